#!/usr/bin/env bash
# Same-call engine A/B of tessera builds and / or environments on dummy Llama-3-8B weights:
# each argument "label=binary[,NAME=VALUE...]" (env_variants.sh) runs `tessera bench` for every
# weight type in TYPES, ROUNDS times, alternating the variants so drift hits all alike; the
# report tables go to $OUT/engine_ab.txt and engine_ab_table.py prints each result's mean per
# variant and the ratio to the first ($OUT/engine_ab.md; tokens/s: > 1 is faster, ms: < 1).
#   DONOR=/tmp/tok_donor.gguf TYPES="q4_0 q8_0" BATCH=16,32,64,128 \
#     bash bench/cuda/engine_env_ab.sh main=/tmp/a/tessera sk=/tmp/b/tessera,TESSERA_DG_SK=1
# DONOR: a GGUF whose tokenizer serves the dummy model; BATCH: the batched-decode sequence
# counts (bench --batch); PREFILL: the prefill lengths (bench --prefill, default 64).
set -u -o pipefail
[ $# -ge 2 ] || { echo "usage: [DONOR=..] [TYPES=..] [BATCH=..] [PREFILL=..] [ROUNDS=n] $0 label=binary[,NAME=VALUE...] ..." >&2; exit 2; }
here=$(dirname "$0")
. "$here/env_variants.sh"
make_wrappers "$@" || exit 2
out=${OUT:-engine_ab_out}; mkdir -p "$out"
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
: > "$out/engine_ab.txt"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for t in ${TYPES:-q4_0 q8_0}; do
    for w in "${wrappers[@]}"; do
      echo "== $(basename "$w") $t round $r" >> "$out/engine_ab.txt"
      timeout 300 "$w" bench -m "${DONOR:-/tmp/tok_donor.gguf}" --device cuda --dummy llama3-8b --dummy-type "$t" \
        --decode-ctx 512 --decode-tokens 8 --prefill "${PREFILL:-64}" --batch "${BATCH:-16,32,64,128}" --batch-gen 16 \
        --out "$out/bench_last.md" >> "$out/engine_ab.txt" 2>&1 ||
        echo "engine_ab: $(basename "$w") $t failed (rc $?)" >> "$out/engine_ab.txt"
    done
  done
done
python3 "$here/engine_ab_table.py" "$out/engine_ab.txt" | tee "$out/engine_ab.md"
