#!/usr/bin/env bash
# One device call (second form, session 59): does launching the batch-1 o GEMV before attention
# completes pay? TESSERA_EARLY_O=1: o's input quantizer waits for attention's done counter (every
# block past its K/V loop), triggers o, then waits for attention. (The first form, run once, let
# the quantizer trigger at its start, so o launched during qkv and took SMs from the previous
# layer's down: gpu_runs/s59_early_o/.) Tests first (bits), then batch-1 A/B on Q8_0 (o's 17.8 MB:
# the case with most to gain), Q4_0, Q4_K, then CUPTI traces of Q8_0 both ways.
# run(command="bash docs/design/gpu_runs/s59_early_o_ab.sh", carry=["build-carry-s59"])
set -u
out=${OUT:-early_o_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line
start_call build-carry-s59 "$out"
s=$out/summary.txt
timeout 240 /tmp/bin/llama_cuda_test \
  --gtest_filter='LlamaCudaDummy.EarlyO*:LlamaCudaDummy.LeftAttention*:LlamaCudaDummy.FusedNorm*' > $out/dummy.txt 2>&1
gtest_line "LlamaCudaDummy early o + left partials + fused norms" $out/dummy.txt | tee -a $s
grep -E "Failure|Expected|which is" $out/dummy.txt | head -20 | tee -a $s
B=/tmp/bin/tessera
for t in q8_0 q4_0 q4_k; do
  TYPES="$t" ROUNDS=${ROUNDS:-3} DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab_$t bash bench/cuda/batch1_env_ab.sh \
    base=$B early=$B,TESSERA_EARLY_O=1 > /dev/null 2>&1
  cat $out/ab_$t/summary.txt | tee -a $s
done
timeout 200 /tmp/bin/paged_attention_cuda_test > $out/attention.txt 2>&1
gtest_line "paged_attention_cuda_test" $out/attention.txt | tee -a $s
timeout 200 /tmp/bin/mmq_cuda_test > $out/mmq.txt 2>&1
gtest_line "mmq_cuda_test" $out/mmq.txt | tee -a $s
for v in 0 1; do
  OUT=$out/trace_q8_0_$v TYPE=q8_0 TESSERA_EARLY_O=$v TESSERA_MODEL=/tmp/bin/tok_only.gguf \
    bash bench/cuda/trace_step.sh > /dev/null 2>&1 || echo "trace $v failed" | tee -a $s
  echo "## trace q8_0 TESSERA_EARLY_O=$v" | tee -a $s
  head -14 $out/trace_q8_0_$v/trace_step_q8_0.txt | tee -a $s
  rm -f $out/trace_q8_0_$v/*.csv.gz
done
