#!/usr/bin/env bash
# One device call (session 62): batch-1 A/B of TESSERA_O_HALF=1 (branch wip/s62-o-half, diff
# gpu_runs/s62_o_half.diff): o on
# Q4_0 weights in 8-warp blocks of <= 128 registers holding all of k = 4096 in one step (half an
# SM per block), so that gate|up's first blocks start beside o's and load their weights during
# the attention -> quantizer -> o hop; Q8_0 is unchanged (a control). Same binary, 3 rounds, and
# traces of both Q4_0 variants.
#   run(command="bash docs/design/gpu_runs/s62_o_half.sh", carry=["build-carry-s62o"])
set -u
out=${OUT:-s62o_out}
. bench/cuda/gpu_probe.sh  # start_call, ab_report
start_call build-carry-s62o "$out"
s=$out/summary.txt
TYPES="q4_0 q8_0" ROUNDS=3 DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab TRACES="q4_0:base q4_0:ohalf" \
  bash bench/cuda/batch1_env_ab.sh base=/tmp/bin/tessera ohalf=/tmp/bin/tessera,TESSERA_O_HALF=1 > /dev/null 2>&1
ab_report /tmp/ab $s "$out"
