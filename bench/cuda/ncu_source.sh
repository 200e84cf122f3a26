#!/usr/bin/env bash
# ncu's per-SASS-instruction source counters for one launch of a kernel, summarized by
# bench/cuda/ncu_source_table.py (instructions grouped by execution count, top stall sites).
# On the GPU machine, with the binaries unpacked (e.g. /tmp/bin):
#   KERNEL=narrow_kernel bash bench/cuda/ncu_source.sh /tmp/bin/paged_attention_bench
#   KERNEL=dequant_gemm_kernel SKIP=2 bash bench/cuda/ncu_source.sh /tmp/bin/mmq_bench --dequant-gemm --rows 16 --shapes 'gate|up' q4_0
# KERNEL: a regex of the kernel name; SKIP: matching launches to skip first (default 0).
# Writes $OUT/ncu_source_<kernel>.txt (the table) and the CSV, gzipped.
set -u -o pipefail
[ $# -ge 1 ] || { echo "usage: KERNEL=regex [SKIP=n] $0 program [args...]" >&2; exit 2; }
out=${OUT:-ncu_out}; mkdir -p "$out"
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
N=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$N" ] || { echo "ncu_source: no ncu on this machine" >&2; exit 1; }
K=${KERNEL:?set KERNEL to a regex of the kernel name}
name=$(echo "$K" | tr -c 'A-Za-z0-9_\n' '_')
csv=/tmp/ncu_source_$name.csv
timeout 500 "$N" --kernel-name "regex:$K" --launch-skip "${SKIP:-0}" --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section InstructionStats \
  --page source --print-source sass --csv "$@" > "$csv" 2> "$out/ncu_source_$name.err" ||
  { echo "ncu_source: ncu failed (rc $?); see $out/ncu_source_$name.err" >&2; exit 1; }
python3 "$(dirname "$0")/ncu_source_table.py" "$csv" | tee "$out/ncu_source_$name.txt"
gzip -c "$csv" > "$out/ncu_source_$name.csv.gz"
