#!/usr/bin/env bash
# Session 54's second device call: attention copying the K/V chunks of settled keys before its
# PDL wait (PagedAttentionWorkspace::settled_keys; TESSERA_ATTENTION_SETTLED=0 turns it off):
# the attention tests, the engine's dummy-weight tests, a batch-1 A/B and CUPTI traces of both.
# run(command="bash docs/design/gpu_runs/s54_settled_ab.sh", carry=["build-carry-s54s"])
set -u
out=${OUT:-settled_out}; mkdir -p "$out" /tmp/bin
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" \
  build-carry-s54s/bins.tar.xz /tmp/bin
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
s=$out/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $s
/tmp/bin/paged_attention_cuda_test > $out/paged_attention.txt 2>&1
echo "paged_attention_cuda_test: $(grep -E '^\[  (PASSED|FAILED)' $out/paged_attention.txt | tr '\n' ' ')" | tee -a $s
/tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy.*' > $out/dummy.txt 2>&1
echo "LlamaCudaDummy: $(grep -E '^\[  (PASSED|FAILED)' $out/dummy.txt | tr '\n' ' ')" | tee -a $s
B=/tmp/bin/tessera
TYPES="${TYPES:-q4_0 q8_0 bf16}" ROUNDS=${ROUNDS:-3} TRACES="q4_0:off q4_0:on" DONOR=/tmp/bin/tok_only.gguf \
  OUT=$out/ab bash bench/cuda/batch1_env_ab.sh off=$B,TESSERA_ATTENTION_SETTLED=0 on=$B > /dev/null 2>&1
cat $out/ab/summary.txt | tee -a $s
for i in 1 2; do
  echo "## trace $(cat $out/ab/trace_$i/variant.txt)" | tee -a $s
  grep -A10 "one layer" $out/ab/trace_$i/trace_step_q4_0.txt | tee -a $s
done
