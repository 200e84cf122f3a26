#!/usr/bin/env bash
# Three chained device calls (session 60): the 8-warp split blocks of batch-1 decode attention
# (paged_attention.cu's narrow_warps) checked before they become the default: every paged
# attention test, the default model on the GPU against the CPU (llama_cuda_test: teacher-forced
# agreement, greedy text of 5 prompts) and the dummy-weight engine tests, then the batch-1 A/B
# of the rule against 4-warp blocks (TESSERA_ATTN_SPLIT_WARPS=4) on Q8_0 / Q4_0 / Q4_K / bf16,
# and 2 / 4 / 16 sequences of Q4_0 both ways.
#   run(command="bash docs/design/gpu_runs/s60_split_warps_check.sh a", carry=["build-carry-s60c/a"])
#   run(command="bash docs/design/gpu_runs/s60_split_warps_check.sh a2", carry=["build-carry-s60c/a2"])
#   run(command="bash docs/design/gpu_runs/s60_split_warps_check.sh b", carry=["build-carry-s60c/b"])
set -u
out=${OUT:-warps_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
mkdir -p /tmp/m "$out"
case $1 in
  a) cp build-carry-s60c/a/model.part.1 /tmp/m/; ls -l /tmp/m | tee -a $out/summary.txt; exit 0 ;;
  a2) cat build-carry-s60c/a2/model.part.1b >> /tmp/m/model.part.1; ls -l /tmp/m | tee -a $out/summary.txt; exit 0 ;;
esac
cat /tmp/m/model.part.1 build-carry-s60c/b/model.part.2 > /tmp/m/model.gguf
rm -f /tmp/bin/tessera
start_call build-carry-s60c/b "$out"
s=$out/summary.txt
sha256sum /tmp/m/model.gguf | tee -a $s
export TESSERA_MODEL=/tmp/m/model.gguf
gtest_step $s "paged_attention_cuda_test" $out/attention.txt timeout 200 /tmp/bin/paged_attention_cuda_test
timeout 300 /tmp/bin/llama_cuda_test > $out/llama.txt 2>&1
echo "rc $?" >> $out/llama.txt
gtest_line "llama_cuda_test" $out/llama.txt | tee -a $s
grep -E "GPU vs CPU|first difference|identical|chunks of|Failure|rc " $out/llama.txt | head -20 | tee -a $s
B=/tmp/bin/tessera
TYPES="q8_0 q4_0 q4_k bf16" ROUNDS=2 DONOR=$TESSERA_MODEL OUT=/tmp/ab bash bench/cuda/batch1_env_ab.sh \
  rule=$B w4=$B,TESSERA_ATTN_SPLIT_WARPS=4 > /dev/null 2>&1
cat /tmp/ab/summary.txt | tee -a $s
for v in rule:X=0 w4:TESSERA_ATTN_SPLIT_WARPS=4; do
  env ${v#*:} timeout 200 $B bench -m $TESSERA_MODEL --device cuda --dummy llama3-8b --dummy-type q4_0 \
    --decode-ctx 512 --decode-tokens 16 --prefill 64 --batch 2,4,16 --batch-gen 16 > /tmp/multi.log 2>&1
  grep -E "^\| decode" /tmp/multi.log | sed "s/^/${v%%:*} q4_0 /" | tee -a $s
done
