#!/usr/bin/env bash
# One device call (session 57): weight_layout_bench twice, then s56_down_balance_ncu.sh.
# run(command="bash docs/design/gpu_runs/s57_layout_and_balance.sh", carry=["build-carry-s57", "build-carry-s56"])
set -u
mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
./build-carry-s57/weight_layout_bench 2>&1 | tee $OUT/weight_layout.txt
./build-carry-s57/weight_layout_bench 2>&1 | tee $OUT/weight_layout_2.txt
OUT=$OUT/balance bash docs/design/gpu_runs/s56_down_balance_ncu.sh > /dev/null 2>&1
cat $OUT/balance/summary.txt | head -90
