#!/usr/bin/env bash
# GPU time of every kernel of the last engine step of a `tessera bench` run, by ncu (clocks
# not locked; one gpu__time_duration pass per kernel, so kernels run serialized: no PDL
# overlap), as a table per kernel and grid plus the sum (bench/cuda/ncu_step_table.py).
# On the GPU machine after gpu_run.sh a (binaries in /tmp/bin, a model for the tokenizer in
# /tmp/m/model.gguf); the default run is the last 128-row bf16 decode step:
#   bash bench/cuda/ncu_step.sh                       # -> $OUT/ncu_step.txt (+ the CSV, gzipped)
#   ARGS="--dummy-type q4_0 --batch 2 --batch-gen 3" bash bench/cuda/ncu_step.sh
# TESSERA_GEMM_PREPARE=0 by default: the start-up timing of cuBLASLt configurations would add
# thousands of kernels to profile (the step then runs cuBLASLt's heuristic picks).
set -u -o pipefail
out=${OUT:-ncu_out}; mkdir -p "$out"
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
N=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$N" ] || { echo "ncu_step: no ncu on this machine" >&2; exit 1; }
ARGS=${ARGS:---dummy-type bf16 --batch 128 --batch-ctx 512 --batch-gen 3 --max-step-tokens 16384}
TESSERA_GEMM_PREPARE=${TESSERA_GEMM_PREPARE:-0} timeout 500 "$N" --clock-control none \
  --metrics gpu__time_duration.sum --csv --page raw --print-units base \
  ${TESSERA_BIN:-/tmp/bin/tessera} bench -m ${TESSERA_MODEL:-/tmp/m/model.gguf} --device cuda \
  --dummy ${DUMMY:-llama3-8b} --decode-ctx 16 --decode-tokens 2 --prefill 64 $ARGS \
  > /tmp/ncu_step.csv 2> "$out/ncu_step.err" ||
  { echo "ncu_step: ncu failed (rc $?); see $out/ncu_step.err" >&2; tail -5 "$out/ncu_step.err" >&2; exit 1; }
python3 "$(dirname "$0")/ncu_step_table.py" /tmp/ncu_step.csv | tee "$out/ncu_step.txt"
gzip -c /tmp/ncu_step.csv > "$out/ncu_step.csv.gz"
