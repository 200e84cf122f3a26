#!/usr/bin/env bash
# One device call (branch wip/s54-down-two-rows rebased on 5b7ad26): down's one-row f16 GEMV with 2 rows per warp and
# no k split (TESSERA_DOWN_ROWS=2: 2 weight blocks per lane per step, 1 KB runs of each row per
# warp step; =2u1: 1 block, 512 B runs) against the default 4 rows x k split 2 (512 B runs of 4
# rows 7 KB apart). Tests against the exact product and the engine's paths with each setting, a
# batch-1 A/B, and ncu's per-GEMV rates (down alone: 58 % of the DRAM peak in session 54).
# run(command="bash docs/design/gpu_runs/s55_down_rows_ab.sh", carry=["build-carry-s55"])
set -u
out=${OUT:-down_rows_out}; mkdir -p "$out" /tmp/bin
. bench/cuda/gpu_probe.sh  # unxz_tar, use_device_cublaslt, gpu_clocks, gtest_line
unxz_tar build-carry-s55/bins.tar.xz /tmp/bin
use_device_cublaslt
s=$out/summary.txt
gpu_clocks $s
/tmp/bin/paged_attention_cuda_test > $out/paged_attention.txt 2>&1
gtest_line "paged_attention_cuda_test (5b7ad26)" $out/paged_attention.txt | tee -a $s
for v in 2 2u1; do
  TESSERA_DOWN_ROWS=$v /tmp/bin/gemv_cuda_test --gtest_filter='MmqHalf.*' > $out/gemv_$v.txt 2>&1
  gtest_line "MmqHalf, TESSERA_DOWN_ROWS=$v" $out/gemv_$v.txt | tee -a $s
  TESSERA_DOWN_ROWS=$v /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy.*' > $out/dummy_$v.txt 2>&1
  gtest_line "LlamaCudaDummy, TESSERA_DOWN_ROWS=$v" $out/dummy_$v.txt | tee -a $s
done
B=/tmp/bin/tessera
TYPES="${TYPES:-q4_0 q8_0}" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab bash bench/cuda/batch1_env_ab.sh \
  base=$B r2=$B,TESSERA_DOWN_ROWS=2 r2u1=$B,TESSERA_DOWN_ROWS=2u1 > /dev/null 2>&1
cat $out/ab/summary.txt | tee -a $s
for v in ${NCU_SETTINGS:-0 2}; do
  TESSERA_DOWN_ROWS=$v TYPE=q4_0 TESSERA_MODEL=/tmp/bin/tok_only.gguf OUT=$out/ncu_$v COUNT=6 \
    bash bench/cuda/ncu_gemv_traffic.sh > /dev/null 2>&1
  echo "## ncu q4_0, TESSERA_DOWN_ROWS=$v" | tee -a $s
  head -8 $out/ncu_$v/ncu_gemv_traffic_q4_0.txt | tee -a $s
done
