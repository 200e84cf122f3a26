#!/usr/bin/env bash
# One device call: where the persistent decode step (decode_persistent.cu, TESSERA_PERSISTENT_DECODE=1,
# off by default since session 8) stands against today's kernel chain at batch 1, and its phases
# (TESSERA_PERSISTENT_TIMING=1 under --profile: block 0's clock at each grid barrier, us per layer).
# chain8 = the chain on 8-bit SwiGLU rows, as the persistent step quantizes them.
# run(command="bash docs/design/gpu_runs/s59_persistent_probe.sh", carry=["build-carry-s59"])
set -u
out=${OUT:-persist_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line
start_call build-carry-s59 "$out"
s=$out/summary.txt
B=/tmp/bin/tessera
for t in q4_0 q8_0; do
  TYPES="$t" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab_$t bash bench/cuda/batch1_env_ab.sh \
    chain=$B chain8=$B,TESSERA_HALF_SWIGLU=0 persistent=$B,TESSERA_PERSISTENT_DECODE=1 > /dev/null 2>&1
  cat $out/ab_$t/summary.txt | tee -a $s
  TESSERA_PERSISTENT_DECODE=1 TESSERA_PERSISTENT_TIMING=1 timeout 200 $B bench -m /tmp/bin/tok_only.gguf \
    --device cuda --dummy llama3-8b --dummy-type $t --decode-ctx 512 --decode-tokens 64 --prefill 64 \
    --batch 2 --batch-gen 2 --profile > $out/timing_$t.log 2>&1
  echo "## $t persistent phases" | tee -a $s
  grep "decode_persistent timing" $out/timing_$t.log | tail -2 | tee -a $s
done
