#!/usr/bin/env bash
# One device call (session 60): the batch-1 o GEMV waiting for a flag that o's input quantizer
# releases after its stores instead of for the quantizer's grid to complete (TESSERA_O_FLAG=1;
# gpu_runs/s60_o_flag.diff): session 60's stamps put ~3 us of the hop in that PDL hand-over.
# Bits first (llama_cuda_test's LeftAttentionPartials: the one-sequence steps take the flag and
# must give the merging attention's logits bit for bit; FusedNorm; DecodeSteps), then the batch-1
# A/B on Q8_0 / Q4_0 / Q4_K, 3 rounds, and CUPTI traces of Q8_0 both ways.
# run(command="bash docs/design/gpu_runs/s60_o_flag_ab.sh", carry=["build-carry-s60j"])
# The carry held main plus gpu_runs/s60_o_flag.diff (measured slower, not kept).
set -u
out=${OUT:-flag_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
rm -f /tmp/bin/tessera  # a warm machine's earlier build
start_call build-carry-s60j "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60j/tok_only.gguf /tmp/bin/
s=$out/summary.txt
gtest_step $s "LlamaCudaDummy (TESSERA_O_FLAG=1) left partials + fused norms + rope + one-row" $out/dummy.txt env TESSERA_O_FLAG=1 timeout 120 /tmp/bin/llama_cuda_test \
  --gtest_filter='LlamaCudaDummy.LeftAttention*:LlamaCudaDummy.FusedNorm*:LlamaCudaDummy.DecodeSteps*:LlamaCudaDummy.OneRow*'
grep -q "PASSED" $out/dummy.txt || { echo "tests did not pass: no A/B" | tee -a $s; exit 0; }
B=/tmp/bin/tessera
timeout 60 env TESSERA_O_FLAG=1 $B bench -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b \
  --dummy-type q8_0 --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 > $out/guard.txt 2>&1
echo "guard rc $?: $(grep 'decode, batch 1 (' $out/guard.txt)" | tee -a $s
grep -q 'decode, batch 1 (' $out/guard.txt || { tail -5 $out/guard.txt | tee -a $s; exit 0; }
TYPES="q8_0 q4_0 q4_k" ROUNDS=${ROUNDS:-3} DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab bash bench/cuda/batch1_env_ab.sh \
  base=$B flag=$B,TESSERA_O_FLAG=1 > /dev/null 2>&1
cat /tmp/ab/summary.txt | tee -a $s
trace_variants q8_0 $s base:X=0 flag:TESSERA_O_FLAG=1
