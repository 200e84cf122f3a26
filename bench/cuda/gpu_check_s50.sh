#!/usr/bin/env bash
# One device call (session 50): attention's splits merged in a thread-block cluster straight into
# o's 8-bit rows (paged_attention.h: PagedAttentionWorkspace::quantize; TESSERA_ATTN_CLUSTER_QUANT)
# and session 49's f16 SwiGLU row (TESSERA_HALF_SWIGLU), checked and measured on a stripped
# tessera and one test binary holding mmq_cuda_test + llama_cuda_test + paged_attention_cuda_test
# (linked together: one copy of the kernels fits the 64 MiB carry).
# Pack here (ninja build):
#   C=build-carry-s50; mkdir -p $C /tmp/pk; strip -o /tmp/pk/tessera build/tessera; cp build/libkernel_trace.so /tmp/pk
#   (cd build && ninja -t commands llama_cuda_test | tail -1 | sed 's#llama_cuda_test.cpp.o -o llama_cuda_test#llama_cuda_test.cpp.o CMakeFiles/mmq_cuda_test.dir/tests/cuda/mmq_cuda_test.cpp.o CMakeFiles/paged_attention_cuda_test.dir/tests/cuda/paged_attention_cuda_test.cpp.o -o /tmp/pk/gpu_tests#' | bash)
#   strip /tmp/pk/gpu_tests; tar cf - -C /tmp/pk tessera gpu_tests libkernel_trace.so | xz -6 -T2 > $C/bins.tar.xz
#   cp <a GGUF with the default model's tokenizer keys> $C/tok_only.gguf
# then run(command="bash bench/cuda/gpu_check_s50.sh", carry=["build-carry-s50"]).
# Batch-1 decode A/B over the four settings, $ROUNDS rounds alternating, and CUPTI traces of Q8_0.
set -u
C=${CARRY:-build-carry-s50}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/s50
here=$(cd "$(dirname "$0")" && pwd)
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" $C/bins.tar.xz /tmp/s50
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/summary.txt"
timeout ${TEST_TIMEOUT:-300} /tmp/s50/gpu_tests \
  --gtest_filter="${FILTER:-PagedAttentionCuda*:MmqHalf.*:LlamaCudaDummy.*:MmqMatmul.ResidualNorm*}" > "$out/tests.log" 2>&1
echo "== tests rc=$?" | tee -a "$out/summary.txt"
grep -E "nMSE|^\[  (PASSED|FAILED)|Failure|tests ran" "$out/tests.log" | tail -40 | tee -a "$out/summary.txt"
bench() {  # type, TESSERA_HALF_SWIGLU, TESSERA_ATTN_CLUSTER_QUANT, round
  TESSERA_HALF_SWIGLU=$2 TESSERA_ATTN_CLUSTER_QUANT=$3 /tmp/s50/tessera bench -m $C/tok_only.gguf --device cuda \
    --dummy llama3-8b --dummy-type $1 --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 2>&1 |
    grep 'decode, batch 1 (' | sed "s/^/$4 $1 half=$2 cluster=$3: /" | tee -a "$out/summary.txt"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for t in ${TYPES:-q8_0 q4_0 q4_k}; do
    h=1; [ "$t" = q4_k ] && h=all
    bench $t 0 0 $r; bench $t 0 1 $r; bench $t $h 0 $r; bench $t $h 1 $r
  done
done
for v in "0 0" "0 1" "1 1"; do
  set -- $v
  mkdir -p "$out/trace_h$1_c$2"
  OUT="$out/trace_h$1_c$2" TYPE=${TRACE_TYPE:-q8_0} TESSERA_BIN=/tmp/s50/tessera KERNEL_TRACE_LIB=/tmp/s50/libkernel_trace.so \
    TESSERA_MODEL=$C/tok_only.gguf TESSERA_HALF_SWIGLU=$1 TESSERA_ATTN_CLUSTER_QUANT=$2 bash "$here/trace_step.sh" \
    > /dev/null 2>&1 || echo "trace half=$1 cluster=$2 failed" | tee -a "$out/summary.txt"
done
