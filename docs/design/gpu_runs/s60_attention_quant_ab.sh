#!/usr/bin/env bash
# One device call (session 60): batch-1 split attention whose last block per kv head merges the
# splits and quantizes o's input row itself (TESSERA_ATTN_QUANT=1, cuda::PagedAttentionQuantOut):
# no quantizer kernel between attention and o, the hand-over through the split counter instead.
# Tests first (bits against the same launch's partials through o's quantizer); then the batch-1
# A/B against the default at three trigger points (TESSERA_ATTN_QUANT_TRIGGER 0: attention's
# start, 1: after its PDL wait, 2: after its key loops) on Q8_0 / Q4_0 / Q4_K, then CUPTI traces.
# run(command="bash docs/design/gpu_runs/s60_attention_quant_ab.sh", carry=["build-carry-s60e"])
# The carry held the build of branch wip/s60-attention-quant (diff: gpu_runs/s60_attention_quant.diff).
set -u
out=${OUT:-quant_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
rm -f /tmp/bin/tessera  # a warm machine's earlier build
start_call build-carry-s60e "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60e/tok_only.gguf /tmp/bin/
s=$out/summary.txt
gtest_step $s "paged_attention_cuda_test" $out/attention.txt timeout 200 /tmp/bin/paged_attention_cuda_test
gtest_step $s "LlamaCudaDummy quant + left partials + fused norms + rope + half SwiGLU" $out/dummy.txt timeout 200 /tmp/bin/llama_cuda_test \
  --gtest_filter='LlamaCudaDummy.AttentionQuant*:LlamaCudaDummy.LeftAttention*:LlamaCudaDummy.FusedNorm*:LlamaCudaDummy.DecodeSteps*:LlamaCudaDummy.HalfSwiglu*'
grep -q "PASSED" $out/attention.txt || { echo "attention tests did not pass: no A/B" | tee -a $s; exit 0; }
B=/tmp/bin/tessera
timeout 60 env TESSERA_ATTN_QUANT=1 $B bench -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b \
  --dummy-type q8_0 --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 > $out/guard.txt 2>&1
echo "guard rc $?: $(grep 'decode, batch 1 (' $out/guard.txt)" | tee -a $s
grep -q 'decode, batch 1 (' $out/guard.txt || { tail -5 $out/guard.txt | tee -a $s; exit 0; }
for t in q8_0 q4_0 q4_k; do
  TYPES="$t" ROUNDS=${ROUNDS:-2} DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab_$t bash bench/cuda/batch1_env_ab.sh \
    base=$B q0=$B,TESSERA_ATTN_QUANT=1 q1=$B,TESSERA_ATTN_QUANT=1,TESSERA_ATTN_QUANT_TRIGGER=1 \
    q2=$B,TESSERA_ATTN_QUANT=1,TESSERA_ATTN_QUANT_TRIGGER=2 > /dev/null 2>&1
  cat /tmp/ab_$t/summary.txt | tee -a $s
done
trace_variants q8_0 $s base:X=0 q0:TESSERA_ATTN_QUANT=1 q1:TESSERA_ATTN_QUANT=1,TESSERA_ATTN_QUANT_TRIGGER=1
