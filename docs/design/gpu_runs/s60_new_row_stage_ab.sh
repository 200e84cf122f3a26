#!/usr/bin/env bash
# One device call (session 60): decode attention with new rows writes the new K/V row straight
# into the shared stage of the warp that reads it (its older rows copied before the PDL wait),
# instead of that warp copying the chunk after the wait from the cache row the block has just
# written. Tests (the same bits as the RoPE kernel path, settled keys or not), then the batch-1
# A/B against TESSERA_ATTENTION_NEW_ROW_STAGE=0 on Q8_0 / Q4_0 / Q4_K / bf16, 3 rounds, and
# CUPTI traces of Q8_0 both ways.
# run(command="bash docs/design/gpu_runs/s60_new_row_stage_ab.sh", carry=["build-carry-s60f"])
# The carry held main plus gpu_runs/s60_new_row_stage.diff (measured neutral, not kept).
set -u
out=${OUT:-stage_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
rm -f /tmp/bin/tessera  # a warm machine's earlier build
start_call build-carry-s60f "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60f/tok_only.gguf /tmp/bin/
s=$out/summary.txt
gtest_step $s "paged_attention_cuda_test" $out/attention.txt timeout 200 /tmp/bin/paged_attention_cuda_test
gtest_step $s "LlamaCudaDummy left partials + fused norms + rope + one-row + graphs" $out/dummy.txt timeout 200 /tmp/bin/llama_cuda_test \
  --gtest_filter='LlamaCudaDummy.LeftAttention*:LlamaCudaDummy.FusedNorm*:LlamaCudaDummy.DecodeSteps*:LlamaCudaDummy.OneRow*:LlamaCudaDummy.DecodeGraphs*'
B=/tmp/bin/tessera
TYPES="q8_0 q4_0 q4_k bf16" ROUNDS=${ROUNDS:-3} DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab bash bench/cuda/batch1_env_ab.sh \
  stage=$B cache=$B,TESSERA_ATTENTION_NEW_ROW_STAGE=0 > /dev/null 2>&1
cat /tmp/ab/summary.txt | tee -a $s
trace_variants q8_0 $s stage:X=1 cache:TESSERA_ATTENTION_NEW_ROW_STAGE=0
