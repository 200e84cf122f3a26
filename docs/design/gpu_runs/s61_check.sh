#!/usr/bin/env bash
# One device call (session 61): one copy of a step's tables instead of six
# (models/cuda/step_tables.h), the sampled ids left where the next step reads its tokens (no
# device-to-device copy), each decode graph replayed on the buffers it was captured on
# (tessera_tables); then also the greedy argmax inside the decode graph (tessera). Batch-1 A/B of
# main's head (d4925f8, tessera_old) against both on Q8_0 / Q4_0 (tessera bench, alternating,
# 2 rounds), the CUDA tests
# that cover it (the dummy-weight engine tests with the new alternating-row-count graph test,
# seeded GPU sampling through the engine: launched-ahead steps, penalties, the host path), every
# paged attention test (main's split-warps knob), and a trace of Q8_0 steps from main's binary
# and the new one (the gap between steps).
#   run(command="bash docs/design/gpu_runs/s61_check.sh", carry=["build-carry-s61"])
set -u
out=${OUT:-s61_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_step
start_call build-carry-s61 "$out"
s=$out/summary.txt
export TESSERA_MODEL=/tmp/bin/tok_only.gguf
TYPES="q8_0 q4_0" ROUNDS=2 DONOR=$TESSERA_MODEL OUT=/tmp/ab TRACES="q8_0:old q8_0:new" \
  bash bench/cuda/batch1_env_ab.sh old=/tmp/bin/tessera_old tables=/tmp/bin/tessera_tables \
  new=/tmp/bin/tessera > /dev/null 2>&1
cat /tmp/ab/summary.txt | tee -a $s
for t in /tmp/ab/trace_*; do
  echo "## $(cat $t/variant.txt)" | tee -a $s
  head -3 $t/trace_step_*.txt | tee -a $s
  cp $t/trace_step_*.txt "$out/trace_$(tr ':' '_' < $t/variant.txt).txt"
done
gtest_step $s "llama_cuda_test (dummy)" $out/llama.txt timeout 200 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy*'
gtest_step $s "engine_sample_cuda_test (llama3-8b dummy)" $out/engine_sample.txt \
  env TESSERA_TEST_DUMMY=llama3-8b timeout 200 /tmp/bin/engine_sample_cuda_test
gtest_step $s "paged_attention_cuda_test" $out/attention.txt timeout 120 /tmp/bin/paged_attention_cuda_test
ls -l $out
