#!/usr/bin/env bash
# One device call (session 60): session 59's staged persistent probe (s59_persistent_probe.sh:
# the persistent decode step against today's chain at batch 1, and its per-phase timing) on this
# session's build, plus a CUPTI trace of the cluster pairs' 4 x 4 shape (the least slow in
# s60_attention_pairs_ab.sh) on Q8_0. Only summary.txt and the logs come back.
# run(command="bash docs/design/gpu_runs/s60_persistent_probe.sh", carry=["build-carry-s60"])
# The carry held the build of branch wip/s60-attention-pairs (diff: gpu_runs/s60_attention_pairs.diff).
set -u
out=${OUT:-persist_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
start_call build-carry-s60 "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60/tok_only.gguf /tmp/bin/
s=$out/summary.txt
B=/tmp/bin/tessera
for t in q4_0 q8_0; do
  TYPES="$t" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab_$t bash bench/cuda/batch1_env_ab.sh \
    chain=$B chain8=$B,TESSERA_HALF_SWIGLU=0 persistent=$B,TESSERA_PERSISTENT_DECODE=1 > /dev/null 2>&1
  cat /tmp/ab_$t/summary.txt | tee -a $s
  TESSERA_PERSISTENT_DECODE=1 TESSERA_PERSISTENT_TIMING=1 timeout 200 $B bench -m /tmp/bin/tok_only.gguf \
    --device cuda --dummy llama3-8b --dummy-type $t --decode-ctx 512 --decode-tokens 64 --prefill 64 \
    --batch 2 --batch-gen 2 --profile > $out/timing_$t.log 2>&1
  echo "## $t persistent phases" | tee -a $s
  grep "decode_persistent timing" $out/timing_$t.log | tail -2 | tee -a $s
done
OUT=/tmp/trace_p4x4 TYPE=q8_0 TESSERA_ATTN_PAIRS=1 TESSERA_ATTN_PAIR_SHAPE=4x4 TESSERA_MODEL=/tmp/bin/tok_only.gguf \
  bash bench/cuda/trace_step.sh > /dev/null 2>&1 || echo "trace failed" | tee -a $s
echo "## trace q8_0 TESSERA_ATTN_PAIRS=1 TESSERA_ATTN_PAIR_SHAPE=4x4" | tee -a $s
head -14 /tmp/trace_p4x4/trace_step_q8_0.txt | tee -a $s
