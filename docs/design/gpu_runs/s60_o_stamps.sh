#!/usr/bin/env bash
# One device call (session 60): where the batch-1 hop from o's input quantizer to o's end goes,
# by globaltimer stamps from the quantizer (entry, wait's end, end) and from o (entry,
# wait's end, every warp's dots done, epilogue done) under TESSERA_STAMPS=1
# (gpu_runs/s60_o_stamps.diff), Q8_0 and Q4_0; s60_o_stamps.py takes the medians. The first call's
# build printf'd the stamps from the kernels, which slowed the step (Q8_0 2.95 -> 4.66 ms): not
# valid. The second (the diff) records them in a device buffer printed at exit: Q8_0 2.97, Q4_0
# 1.88 ms, as without stamps. Its output: gpu_runs/s60_o_stamps/.
# run(command="bash docs/design/gpu_runs/s60_o_stamps.sh", carry=["build-carry-s60i"])
# The carry held main plus gpu_runs/s60_o_stamps.diff (a probe, not kept).
set -u
out=${OUT:-stamps_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
rm -f /tmp/bin/tessera  # a warm machine's earlier build
start_call build-carry-s60i "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60i/tok_only.gguf /tmp/bin/
s=$out/summary.txt
for t in q8_0 q4_0; do
  TESSERA_STAMPS=1 timeout 200 /tmp/bin/tessera bench -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b \
    --dummy-type $t --decode-ctx 512 --decode-tokens 32 --prefill 64 --batch 2 --batch-gen 2 > /tmp/stamps_$t.log 2>&1
  echo "## $t ($(grep -c STAMP /tmp/stamps_$t.log) stamp lines; $(grep 'decode, batch 1 (' /tmp/stamps_$t.log))" | tee -a $s
  python3 docs/design/gpu_runs/s60_o_stamps.py /tmp/stamps_$t.log 2>&1 | tee -a $s
  grep STAMP /tmp/stamps_$t.log | tail -400 > $out/stamps_tail_$t.txt
done
