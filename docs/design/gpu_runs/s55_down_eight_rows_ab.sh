#!/usr/bin/env bash
# One device call (branch wip/s54-down-two-rows): down's one-row f16 GEMV with 8 rows per warp and
# a k split of 4 (TESSERA_DOWN_ROWS=8: each f16 activation load serves 8 rows instead of 4; session
# 55 found 2 rows per warp slower because those loads then outweigh the weight bytes in the L1)
# against the default 4 rows x k split 2. Engine tests with the setting, a batch-1 A/B, ncu.
# run(command="bash docs/design/gpu_runs/s55_down_eight_rows_ab.sh", carry=["build-carry-s55c"])
set -u
out=${OUT:-down_rows_out}; mkdir -p "$out" /tmp/bin
. bench/cuda/gpu_probe.sh  # unxz_tar, use_device_cublaslt, gpu_clocks, gtest_line
unxz_tar build-carry-s55c/bins.tar.xz /tmp/bin
use_device_cublaslt
s=$out/summary.txt
gpu_clocks $s
B=/tmp/bin/tessera
TYPES="${TYPES:-q4_0 q8_0}" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab bash bench/cuda/batch1_env_ab.sh \
  base=$B r8=$B,TESSERA_DOWN_ROWS=8 > /dev/null 2>&1
cat $out/ab/summary.txt | tee -a $s
TESSERA_DOWN_ROWS=8 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy.*' > $out/dummy_8.txt 2>&1
gtest_line "LlamaCudaDummy, TESSERA_DOWN_ROWS=8" $out/dummy_8.txt | tee -a $s
TESSERA_DOWN_ROWS=8 /tmp/bin/gemv_cuda_test --gtest_filter='MmqHalf.*' > $out/gemv_8.txt 2>&1
gtest_line "MmqHalf, TESSERA_DOWN_ROWS=8" $out/gemv_8.txt | tee -a $s
TESSERA_DOWN_ROWS=8 TYPE=q4_0 TESSERA_MODEL=/tmp/bin/tok_only.gguf OUT=$out/ncu_8 COUNT=6 \
  bash bench/cuda/ncu_gemv_traffic.sh > /dev/null 2>&1
echo "## ncu q4_0, TESSERA_DOWN_ROWS=8" | tee -a $s
head -8 $out/ncu_8/ncu_gemv_traffic_q4_0.txt | tee -a $s
