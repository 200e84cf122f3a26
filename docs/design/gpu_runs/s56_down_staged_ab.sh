#!/usr/bin/env bash
# One device call (branch wip/s56-down-staged): down's one-row f16 GEMV with its weights streamed
# through a per-thread cp.async ring of P shared-memory stages (TESSERA_DOWN_STAGES=2|3|4|3w|4w)
# against the plain kernel (one step of weights in registers): MmqHalf and LlamaCudaDummy with
# the setting, a batch-1 A/B on Q4_0 / Q8_0 / Q4_K, ncu of the first layer's GEMVs, registers.
# run(command="bash docs/design/gpu_runs/s56_down_staged_ab.sh", carry=["build-carry-s56"])
set -u
out=${OUT:-down_staged_out}; mkdir -p "$out" /tmp/bin
. bench/cuda/gpu_probe.sh  # unxz_tar, use_device_cublaslt, gpu_clocks, gtest_line
unxz_tar build-carry-s56/bins.tar.xz /tmp/bin
use_device_cublaslt
s=$out/summary.txt
gpu_clocks $s
(cuobjdump --dump-resource-usage /tmp/bin/gemv_cuda_test 2>/dev/null | grep -A1 "staged" | grep -o "REG:[0-9]*\|STACK:[0-9]*\|SHARED:[0-9]*\|LOCAL:[0-9]*" | paste -sd' ') > $out/regs.txt
echo "staged kernels' resources: $(head -c 600 $out/regs.txt)" | tee -a $s
for v in 3 2 4; do
  TESSERA_DOWN_STAGES=$v timeout 120 /tmp/bin/gemv_cuda_test --gtest_filter='MmqHalf.*' > $out/gemv_$v.txt 2>&1
  gtest_line "MmqHalf, TESSERA_DOWN_STAGES=$v" $out/gemv_$v.txt | tee -a $s
done
TESSERA_DOWN_STAGES=3 timeout 200 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy.*' > $out/dummy_3.txt 2>&1
gtest_line "LlamaCudaDummy, TESSERA_DOWN_STAGES=3" $out/dummy_3.txt | tee -a $s
B=/tmp/bin/tessera
TYPES="q4_0" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab4 bash bench/cuda/batch1_env_ab.sh \
  base=$B s2=$B,TESSERA_DOWN_STAGES=2 s3=$B,TESSERA_DOWN_STAGES=3 s3w=$B,TESSERA_DOWN_STAGES=3w \
  s4=$B,TESSERA_DOWN_STAGES=4 s4w=$B,TESSERA_DOWN_STAGES=4w > /dev/null 2>&1
cat $out/ab4/summary.txt | tee -a $s
TYPES="q8_0" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab8 bash bench/cuda/batch1_env_ab.sh \
  base=$B s2=$B,TESSERA_DOWN_STAGES=2 s3=$B,TESSERA_DOWN_STAGES=3 s3w=$B,TESSERA_DOWN_STAGES=3w > /dev/null 2>&1
cat $out/ab8/summary.txt | tee -a $s
TYPES="q4_k" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/abk bash bench/cuda/batch1_env_ab.sh \
  base=$B s2=$B,TESSERA_DOWN_STAGES=2 s3=$B,TESSERA_DOWN_STAGES=3 s3w=$B,TESSERA_DOWN_STAGES=3w > /dev/null 2>&1
cat $out/abk/summary.txt | tee -a $s
for v in 0 3; do
  TESSERA_DOWN_STAGES=$v KERNEL=mmq_gemv TYPE=q4_0 TESSERA_MODEL=/tmp/bin/tok_only.gguf OUT=$out/ncu_$v COUNT=6 \
    bash bench/cuda/ncu_gemv_traffic.sh > /dev/null 2>&1
  echo "## ncu q4_0, TESSERA_DOWN_STAGES=$v" | tee -a $s
  head -8 $out/ncu_$v/ncu_gemv_traffic_q4_0.txt | tee -a $s
done
