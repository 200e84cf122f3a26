#!/usr/bin/env bash
# A / B of dequant_gemm builds in one device call: each mmq_bench binary runs the --dequant-gemm
# table in turn, ROUNDS times (alternating, so drift hits all alike), into $OUT/dg_ab.txt, and
# bench/cuda/mmq_ab_table.py prints each shape's mean time per binary and the ratios to the
# first one ($OUT/dg_ab.md).
#   ROWS=16,32,64,128 TYPES="q4_0 q8_0 q4_k" ROUNDS=2 bash bench/cuda/dg_ab.sh /tmp/mb_main /tmp/mb_new
set -u -o pipefail
[ $# -ge 2 ] || { echo "usage: [ROWS=..] [TYPES=..] [ROUNDS=n] $0 mmq_bench_a mmq_bench_b [...]" >&2; exit 2; }
out=${OUT:-dg_ab_out}; mkdir -p "$out"
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
: > "$out/dg_ab.txt"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for b in "$@"; do
    echo "== $(basename "$b") round $r" >> "$out/dg_ab.txt"
    # shellcheck disable=SC2086
    timeout 300 "$b" --dequant-gemm --rows "${ROWS:-16,32,64,128}" ${TYPES:-q4_0 q8_0 q4_k} >> "$out/dg_ab.txt" 2>&1 ||
      echo "dg_ab: $b failed (rc $?)" >> "$out/dg_ab.txt"
  done
done
python3 "$(dirname "$0")/mmq_ab_table.py" "$out/dg_ab.txt" | tee "$out/dg_ab.md"
