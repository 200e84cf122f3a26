#!/usr/bin/env bash
# One device call (session 60): the batch-1 down GEMV (f16 SwiGLU row, residual + next norm
# epilogue, one weight block per lane per step: 7 steps at k = 14336) asking for each step's
# weights before the previous step's dots (TESSERA_DOWN_PIPE=1: two steps in flight per lane
# instead of one). Bits first (gemv_cuda_test's f16-row test: the residual epilogue must equal
# the plain GEMV's sums exactly), then the batch-1 A/B on Q4_0 / Q8_0 / Q4_K, 3 rounds, and
# CUPTI traces of Q4_0 both ways.
# run(command="bash docs/design/gpu_runs/s60_down_pipe_ab.sh", carry=["build-carry-s60h"])
# The carry held main plus gpu_runs/s60_down_pipe.diff (measured, not kept).
set -u
out=${OUT:-pipe_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
rm -f /tmp/bin/tessera  # a warm machine's earlier build
start_call build-carry-s60h "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60h/tok_only.gguf /tmp/bin/
s=$out/summary.txt
gtest_step $s "gemv_cuda_test MmqHalf.* with TESSERA_DOWN_PIPE=1" $out/gemv.txt env TESSERA_DOWN_PIPE=1 timeout 200 /tmp/bin/gemv_cuda_test --gtest_filter='MmqHalf.*'
grep -q "PASSED" $out/gemv.txt || { echo "bits differ: no A/B" | tee -a $s; exit 0; }
B=/tmp/bin/tessera
TYPES="q4_0 q8_0 q4_k" ROUNDS=${ROUNDS:-3} DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab bash bench/cuda/batch1_env_ab.sh \
  base=$B pipe=$B,TESSERA_DOWN_PIPE=1 > /dev/null 2>&1
cat /tmp/ab/summary.txt | tee -a $s
trace_variants q4_0 $s base:X=0 pipe:TESSERA_DOWN_PIPE=1
