#!/usr/bin/env bash
# One device call (session 60), meant for an H200 (the status table's machine; an H100 came): main's 8-warp
# split blocks (the rule) against the earlier 4-warp blocks (TESSERA_ATTN_SPLIT_WARPS=4), batch
# 1, Q8_0 / Q4_0 / Q4_K / bf16, 3 rounds, then CUPTI traces of Q8_0 both ways.
# run(command="bash docs/design/gpu_runs/s60_h200_split_warps_ab.sh", carry=["build-carry-s60g"], kind="nvidia-h200")
set -u
out=${OUT:-h200_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
rm -f /tmp/bin/tessera  # a warm machine's earlier build
start_call build-carry-s60g "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60g/tok_only.gguf /tmp/bin/
s=$out/summary.txt
B=/tmp/bin/tessera
TYPES="q8_0 q4_0 q4_k bf16" ROUNDS=${ROUNDS:-3} DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab bash bench/cuda/batch1_env_ab.sh \
  rule=$B w4=$B,TESSERA_ATTN_SPLIT_WARPS=4 > /dev/null 2>&1
cat /tmp/ab/summary.txt | tee -a $s
trace_variants q8_0 $s rule:X=1 w4:TESSERA_ATTN_SPLIT_WARPS=4
