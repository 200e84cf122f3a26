#!/usr/bin/env bash
# One device call: batch-1 decode A/B of environment switches on dummy Llama-3-8B weights at a
# 512-token context (tessera bench --decode-tokens 64), every variant per weight type per round,
# alternating so drift hits all alike; optional CUPTI traces (bench/cuda/trace_step.sh) per variant.
#   VARIANTS="X=0|X=1 Y=2" TYPES="q4_0 q8_0" ROUNDS=2 TRACES="q4_0:X=0|q4_0:X=1" \
#     TESSERA_BIN=/tmp/bin/tessera DONOR=/tmp/bin/tok_only.gguf bash bench/cuda/batch1_env_ab.sh
# A variant is space-separated NAME=VALUE pairs ("-" for none; BIN=path runs another tessera
# binary); results in $OUT/summary.txt, one line per run; traces under $OUT/trace_N/
# (libkernel_trace.so beside the binary).
set -u
out=${OUT:-batch1_ab_out}; mkdir -p "$out"
T=${TESSERA_BIN:-/tmp/bin/tessera}
M=${DONOR:-/tmp/bin/tok_only.gguf}
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
env_of() { local kv; for kv in $1; do case $kv in - | BIN=*) ;; *) echo "$kv" ;; esac; done; }  # its NAME=VALUE words
bin_of() { local kv b=$T; for kv in $1; do case $kv in BIN=*) b=${kv#BIN=} ;; esac; done; echo "$b"; }
IFS='|' read -r -a variants <<< "${VARIANTS:--}"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for t in ${TYPES:-q4_0 q8_0}; do
    for v in "${variants[@]}"; do
      # shellcheck disable=SC2046
      env $(env_of "$v") timeout 200 "$(bin_of "$v")" bench -m "$M" --device cuda --dummy llama3-8b --dummy-type "$t" \
        --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 > /tmp/batch1_ab.log 2>&1
      echo "$r $t [$v]: $(grep 'decode, batch 1 (' /tmp/batch1_ab.log || tail -2 /tmp/batch1_ab.log)" | tee -a "$out/summary.txt"
    done
  done
done
IFS='|' read -r -a traces <<< "${TRACES:-}"
i=0
for tv in "${traces[@]}"; do
  i=$((i + 1)); mkdir -p "$out/trace_$i"; echo "$tv" > "$out/trace_$i/variant.txt"
  # shellcheck disable=SC2046
  env $(env_of "${tv#*:}") OUT="$out/trace_$i" TYPE="${tv%%:*}" TESSERA_BIN="$(bin_of "${tv#*:}")" TESSERA_MODEL="$M" \
    bash "$(dirname "$0")/trace_step.sh" > /dev/null 2>&1 || echo "trace $tv failed" | tee -a "$out/summary.txt"
done
