#!/usr/bin/env bash
# One device call: batch-1 decode A/B of tessera builds and / or environments on dummy Llama-3-8B
# weights at a 512-token context (tessera bench --decode-tokens 64): each argument
# "label=binary[,NAME=VALUE...]" (env_variants.sh) runs once per weight type in TYPES per round,
# alternating so drift hits all alike, one line each in $OUT/summary.txt; TRACES="type:label ..."
# adds a CUPTI trace of those variants (bench/cuda/trace_step.sh, $OUT/trace_N/; the tracer
# library $KERNEL_TRACE_LIB, default /tmp/bin/libkernel_trace.so).
#   TYPES="q4_0 q8_0" ROUNDS=2 TRACES="q4_0:base q4_0:x1" DONOR=/tmp/bin/tok_only.gguf \
#     bash bench/cuda/batch1_env_ab.sh base=/tmp/bin/tessera x1=/tmp/bin/tessera,TESSERA_X=1
# (Session 52 ran an earlier form that took the variants as VARIANTS="X=0|X=1 ...".)
set -u
[ $# -ge 1 ] || { echo "usage: [TYPES=..] [ROUNDS=n] [TRACES=..] [DONOR=..] $0 label=binary[,NAME=VALUE...] ..." >&2; exit 2; }
here=$(dirname "$0")
. "$here/env_variants.sh"
make_wrappers "$@" || exit 2
out=${OUT:-batch1_ab_out}; mkdir -p "$out"
M=${DONOR:-/tmp/bin/tok_only.gguf}
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for t in ${TYPES:-q4_0 q8_0}; do
    for w in "${wrappers[@]}"; do
      timeout 200 "$w" bench -m "$M" --device cuda --dummy llama3-8b --dummy-type "$t" \
        --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 > /tmp/batch1_ab.log 2>&1
      echo "$r $t $(basename "$w"): $(grep 'decode, batch 1 (' /tmp/batch1_ab.log || tail -2 /tmp/batch1_ab.log)" |
        tee -a "$out/summary.txt"
    done
  done
done
i=0
for tv in ${TRACES:-}; do
  i=$((i + 1)); mkdir -p "$out/trace_$i"; echo "$tv" > "$out/trace_$i/variant.txt"
  OUT="$out/trace_$i" TYPE="${tv%%:*}" TESSERA_BIN="$(dirname "${wrappers[0]}")/${tv#*:}" TESSERA_MODEL="$M" \
    KERNEL_TRACE_LIB=${KERNEL_TRACE_LIB:-/tmp/bin/libkernel_trace.so} bash "$here/trace_step.sh" > /dev/null 2>&1 ||
    echo "trace $tv failed" | tee -a "$out/summary.txt"
done
