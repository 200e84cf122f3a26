#!/usr/bin/env bash
# Session 54's first device call (branch wip/s53-half-smem): the one-row GEMVs with their
# activation row staged in shared memory (TESSERA_HALF_SMEM=1: down's f16 row; TESSERA_SMEM_X8=1:
# every 8-bit row, qkv / gate|up / o) against their references, a batch-1 A/B of the four
# settings, and ncu's memory traffic of the one-row GEMVs with both off and both on. Also stages
# the default model's first part (build-carry-m1) in /tmp/m for s54_model_check.sh.
# run(command="bash docs/design/gpu_runs/s54_gpu_probe.sh", carry=["build-carry-s54p", "build-carry-m1"])
set -u
out=${OUT:-probe_out}; mkdir -p "$out" /tmp/bin /tmp/m
cp build-carry-m1/model.part.1 /tmp/m/
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" \
  build-carry-s54p/bins.tar.xz /tmp/bin
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
s=$out/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $s
for t in gemv_cuda_test mmq_cuda_test; do
  TESSERA_HALF_SMEM=1 TESSERA_SMEM_X8=1 /tmp/bin/$t > $out/$t.txt 2>&1
  echo "$t, both switches on: $(grep -E '^\[  (PASSED|FAILED)' $out/$t.txt | tr '\n' ' ')" | tee -a $s
done
TESSERA_HALF_SMEM=1 TESSERA_SMEM_X8=1 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy.*' > $out/dummy.txt 2>&1
echo "LlamaCudaDummy, both on: $(grep -E '^\[  (PASSED|FAILED)' $out/dummy.txt | tr '\n' ' ')" | tee -a $s
B=/tmp/bin/tessera
TYPES="q4_0 q8_0" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab bash bench/cuda/batch1_env_ab.sh \
  base=$B half=$B,TESSERA_HALF_SMEM=1 x8=$B,TESSERA_SMEM_X8=1 both=$B,TESSERA_HALF_SMEM=1,TESSERA_SMEM_X8=1 \
  > /dev/null 2>&1
cat $out/ab/summary.txt | tee -a $s
for v in 0 1; do
  TESSERA_HALF_SMEM=$v TESSERA_SMEM_X8=$v TYPE=q4_0 TESSERA_MODEL=/tmp/bin/tok_only.gguf OUT=$out/ncu_$v COUNT=12 \
    bash bench/cuda/ncu_gemv_traffic.sh > /dev/null 2>&1
  echo "## ncu q4_0, both switches =$v" | tee -a $s
  head -16 $out/ncu_$v/ncu_gemv_traffic_q4_0.txt | tee -a $s
done
