#!/usr/bin/env bash
# One device call: why down (one wave of 128 blocks x 16 warps, Q4_0, on its f16 row) streams at
# ~59 % of the DRAM peak alone where gate|up (3584 blocks of 4 warps) reaches ~74 %: ncu's
# speed-of-light, memory, warp-state, launch and occupancy sections plus the spread of active
# cycles across SMs (min / avg / max: a one-wave grid ends with its slowest SM) for layer 0's
# gate|up and down GEMVs, each alone.
# run(command="bash docs/design/gpu_runs/s56_down_balance_ncu.sh", carry=["build-carry-s56"])
set -u
out=${OUT:-down_balance_out}; mkdir -p "$out" /tmp/bin
. bench/cuda/gpu_probe.sh  # unxz_tar, use_device_cublaslt, gpu_clocks, gtest_line
[ -x /tmp/bin/tessera ] || unxz_tar build-carry-s56/bins.tar.xz /tmp/bin
use_device_cublaslt
N=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
gpu_clocks $out/summary.txt
m=sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max
m=$m,dram__bytes_read.sum,gpu__time_duration.sum,launch__waves_per_multiprocessor
for skip in 3 4; do  # launches as ncu_gemv_traffic.sh lists them: head, qkv, o, gate|up (3), down (4)
  TESSERA_GEMM_PREPARE=0 timeout 200 "$N" --clock-control none --kernel-name regex:mmq_gemv_kernel \
    --launch-skip $skip --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section LaunchStats --section Occupancy --metrics "$m" \
    /tmp/bin/tessera bench -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b --dummy-type q4_0 \
    --decode-ctx 64 --decode-tokens 2 --prefill 16 --batch 2 --batch-gen 2 > $out/ncu_skip$skip.txt 2>&1
  grep -E "mmq_gemv_kernel|sm__cycles_active|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Waves Per SM|Registers Per|Stall|L1/TEX Hit|L2 Hit|dram__bytes|Warp Cycles Per Issued|Issued Warp" \
    $out/ncu_skip$skip.txt | head -40 | tee -a $out/summary.txt
done
