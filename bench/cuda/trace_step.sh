#!/usr/bin/env bash
# Where a decode step's time goes under PDL and CUDA graphs (unlike ncu, which serializes
# kernels): runs `tessera bench` with the CUPTI tracer (bench/cuda/kernel_trace.cpp, built as
# build/libkernel_trace.so where cupti_activity.h was found) injected, and prints
# bench/cuda/kernel_trace_table.py's per-kernel exposed times of the most common step (by
# default the batch-1 decode steps at a 512-token context).
# On the GPU machine (tessera in /tmp/bin or $TESSERA_BIN, a GGUF for the tokenizer in
# /tmp/m/model.gguf or $TESSERA_MODEL):
#   TYPE=q4_0 bash bench/cuda/trace_step.sh         # -> $OUT/trace_step_q4_0.txt (+ the CSV, gzipped)
# libcupti: the toolkit's, else $KERNEL_TRACE_CUPTI (e.g. a libcupti.so.13 carried along).
# The traced GPU step matches an untraced run (q4_0 batch 1: 1.89 ms from the trace, 1.92 ms
# per token untraced); the bench's own ms/token under tracing reads ~10 % high (host-side cost).
set -u -o pipefail
out=${OUT:-trace_out}; mkdir -p "$out"
type=${TYPE:-q4_0}
bin=${TESSERA_BIN:-/tmp/bin/tessera}
lib=${KERNEL_TRACE_LIB:-$(dirname "$bin")/libkernel_trace.so}
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
cupti=$(find /usr/local/cuda* /opt -name 'libcupti.so.13*' 2>/dev/null | head -1)
export KERNEL_TRACE_CUPTI=${KERNEL_TRACE_CUPTI:-$cupti}
[ -n "$KERNEL_TRACE_CUPTI" ] || { echo "trace_step: no libcupti.so.13 (set KERNEL_TRACE_CUPTI)" >&2; exit 1; }
[ -f "$lib" ] || { echo "trace_step: no $lib (build kernel_trace; gpu_pack.sh EXTRA_BINS=.../libkernel_trace.so)" >&2; exit 1; }
ARGS=${ARGS:---decode-ctx 512 --decode-tokens 24 --prefill 64 --batch 2 --batch-gen 2 --batch-ctx 16}
csv=$out/trace_step_$type.csv
rm -f "$csv"
CUDA_INJECTION64_PATH=$lib KERNEL_TRACE_OUT=$csv TESSERA_GEMM_PREPARE=${TESSERA_GEMM_PREPARE:-0} \
  "$bin" bench -m "${TESSERA_MODEL:-/tmp/m/model.gguf}" --device cuda --dummy "${DUMMY:-llama3-8b}" \
  --dummy-type "$type" $ARGS --out /tmp/trace_step_bench.md > /tmp/trace_step_bench.log 2>&1 ||
  { echo "trace_step: tessera bench failed:" >&2; tail -5 /tmp/trace_step_bench.log >&2; exit 1; }
grep -E "decode|kernel_trace" /tmp/trace_step_bench.log
python3 "$(dirname "$0")/kernel_trace_table.py" "$csv" ${TABLE_ARGS:-} | tee "$out/trace_step_$type.txt"
gzip -f "$csv"
