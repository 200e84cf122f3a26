#!/usr/bin/env bash
# One device call (session 60): batch-1 attention in cluster pairs that write o's 8-bit row
# (TESSERA_ATTN_PAIRS=1; cuda::PagedAttentionQuantOut, plan: cuda_attention_pair_cluster_plan.md).
# Tests first (bits against 2 splits + o's quantizer); if they pass, the batch-1 A/B of the
# default against the pairs in three block shapes and three trigger points, on Q8_0, Q4_0 and
# Q4_K, then CUPTI traces of Q8_0 both ways.
# run(command="bash docs/design/gpu_runs/s60_attention_pairs_ab.sh", carry=["build-carry-s60"])
# The carry held the build of branch wip/s60-attention-pairs (diff: gpu_runs/s60_attention_pairs.diff).
set -u
out=${OUT:-pairs_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
start_call build-carry-s60 "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60/tok_only.gguf /tmp/bin/
s=$out/summary.txt
gtest_step $s "paged_attention_cuda_test" $out/attention.txt timeout 150 /tmp/bin/paged_attention_cuda_test
gtest_step $s "LlamaCudaDummy pairs + left partials + fused norms + rope" $out/dummy.txt timeout 200 /tmp/bin/llama_cuda_test \
  --gtest_filter='LlamaCudaDummy.AttentionPair*:LlamaCudaDummy.LeftAttention*:LlamaCudaDummy.FusedNorm*:LlamaCudaDummy.DecodeSteps*'
grep -q "PASSED" $out/attention.txt || { echo "attention tests did not pass: no A/B" | tee -a $s; exit 0; }
# A guard: one pairs bench must finish (a cluster barrier that never completes would hang each run).
B=/tmp/bin/tessera
timeout 60 env TESSERA_ATTN_PAIRS=1 $B bench -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b \
  --dummy-type q8_0 --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 > $out/guard.txt 2>&1
echo "guard rc $?: $(grep 'decode, batch 1 (' $out/guard.txt)" | tee -a $s
grep -q 'decode, batch 1 (' $out/guard.txt || { tail -5 $out/guard.txt | tee -a $s; exit 0; }
for t in q8_0 q4_0 q4_k; do
  TYPES="$t" ROUNDS=${ROUNDS:-2} DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab_$t bash bench/cuda/batch1_env_ab.sh \
    base=$B pairs=$B,TESSERA_ATTN_PAIRS=1 p6x4=$B,TESSERA_ATTN_PAIRS=1,TESSERA_ATTN_PAIR_SHAPE=6x4 \
    p4x4=$B,TESSERA_ATTN_PAIRS=1,TESSERA_ATTN_PAIR_SHAPE=4x4 t0=$B,TESSERA_ATTN_PAIRS=1,TESSERA_ATTN_PAIR_TRIGGER=0 \
    t2=$B,TESSERA_ATTN_PAIRS=1,TESSERA_ATTN_PAIR_TRIGGER=2 > /dev/null 2>&1
  cat $out/ab_$t/summary.txt | tee -a $s
done
for v in 0 1; do
  OUT=$out/trace_q8_0_$v TYPE=q8_0 TESSERA_ATTN_PAIRS=$v TESSERA_MODEL=/tmp/bin/tok_only.gguf \
    bash bench/cuda/trace_step.sh > /dev/null 2>&1 || echo "trace $v failed" | tee -a $s
  echo "## trace q8_0 TESSERA_ATTN_PAIRS=$v" | tee -a $s
  head -14 $out/trace_q8_0_$v/trace_step_q8_0.txt | tee -a $s
  rm -f $out/trace_q8_0_$v/*.csv.gz
done
timeout 100 /tmp/bin/mmq_cuda_test > $out/mmq.txt 2>&1
gtest_line "mmq_cuda_test" $out/mmq.txt | tee -a $s
