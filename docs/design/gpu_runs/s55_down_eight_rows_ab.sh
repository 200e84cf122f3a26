#!/usr/bin/env bash
# One device call (branch wip/s54-down-two-rows): down's one-row f16 GEMV with 8 rows per warp and
# a k split of 4 (TESSERA_DOWN_ROWS=8: each f16 activation load serves 8 rows instead of 4; session
# 55 found 2 rows per warp slower because those loads then outweigh the weight bytes in the L1)
# against the default 4 rows x k split 2. Engine tests with the setting, a batch-1 A/B, ncu.
# run(command="bash docs/design/gpu_runs/s55_down_eight_rows_ab.sh", carry=["build-carry-s55c"])
set -u
out=${OUT:-down_rows_out}; mkdir -p "$out" /tmp/bin
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" \
  build-carry-s55c/bins.tar.xz /tmp/bin
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
s=$out/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $s
B=/tmp/bin/tessera
TYPES="${TYPES:-q4_0 q8_0}" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab bash bench/cuda/batch1_env_ab.sh \
  base=$B r8=$B,TESSERA_DOWN_ROWS=8 > /dev/null 2>&1
cat $out/ab/summary.txt | tee -a $s
TESSERA_DOWN_ROWS=8 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy.*' > $out/dummy_8.txt 2>&1
echo "LlamaCudaDummy, TESSERA_DOWN_ROWS=8: $(grep -E '^\[  (PASSED|FAILED)' $out/dummy_8.txt | tr '\n' ' ')" | tee -a $s
TESSERA_DOWN_ROWS=8 /tmp/bin/gemv_cuda_test --gtest_filter='MmqHalf.*' > $out/gemv_8.txt 2>&1
echo "MmqHalf, TESSERA_DOWN_ROWS=8: $(grep -E '^\[  (PASSED|FAILED)' $out/gemv_8.txt | tr '\n' ' ')" | tee -a $s
TESSERA_DOWN_ROWS=8 TYPE=q4_0 TESSERA_MODEL=/tmp/bin/tok_only.gguf OUT=$out/ncu_8 COUNT=6 \
  bash bench/cuda/ncu_gemv_traffic.sh > /dev/null 2>&1
echo "## ncu q4_0, TESSERA_DOWN_ROWS=8" | tee -a $s
head -8 $out/ncu_8/ncu_gemv_traffic_q4_0.txt | tee -a $s
