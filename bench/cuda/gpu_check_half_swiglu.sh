#!/usr/bin/env bash
# One device call (session 49): the f16 SwiGLU row between gate|up and down (mmq.h:
# mmq_gemv_swiglu_half) checked and measured on a stripped tessera and one test binary holding
# mmq_cuda_test + gemv_cuda_test (MmqHalf.*, since session 51) + llama_cuda_test (linked together:
# one copy of the kernels fits the carry).
# Pack here:
#   C=build-carry-s49; mkdir -p $C /tmp/pk; strip -o /tmp/pk/tessera build/tessera
#   sed 's#llama_cuda_test.cpp.o -o llama_cuda_test#llama_cuda_test.cpp.o CMakeFiles/mmq_cuda_test.dir/tests/cuda/mmq_cuda_test.cpp.o CMakeFiles/gemv_cuda_test.dir/tests/cuda/gemv_cuda_test.cpp.o -o /tmp/pk/gpu_s49_tests#' \
#     build/CMakeFiles/llama_cuda_test.dir/link.txt > /tmp/link.sh; (cd build && bash /tmp/link.sh); strip /tmp/pk/gpu_s49_tests
#   tar cf - -C /tmp/pk tessera gpu_s49_tests | xz -6 -T2 > $C/bins.tar.xz; cp <tokenizer GGUF> $C/tok_only.gguf
# then run(command="bash bench/cuda/gpu_check_half_swiglu.sh", carry=["build-carry-s49"]).
# Batch-1 decode A/B (TESSERA_HALF_SWIGLU default / all vs 0), $ROUNDS rounds alternating, and an
# eager per-op profile of Q4_0 both ways.
set -u
C=${CARRY:-build-carry-s49}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/s49
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" $C/bins.tar.xz /tmp/s49
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/summary.txt"
timeout ${TEST_TIMEOUT:-240} /tmp/s49/gpu_s49_tests --gtest_filter="${FILTER:-MmqHalf.*:LlamaCudaDummy.*:MmqMatmul.ResidualNorm*}" \
  > "$out/tests.log" 2>&1
echo "== tests rc=$?" | tee -a "$out/summary.txt"
grep -E "nMSE|^\[  (PASSED|FAILED)|Failure" "$out/tests.log" | tail -40 | tee -a "$out/summary.txt"
bench() {  # type, TESSERA_HALF_SWIGLU value, round
  TESSERA_HALF_SWIGLU=$2 /tmp/s49/tessera bench -m $C/tok_only.gguf --device cuda --dummy llama3-8b --dummy-type $1 \
    --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 2>&1 | grep 'decode, batch 1 (' |
    sed "s/^/$3 $1 half=$2: /" | tee -a "$out/summary.txt"
}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for t in q4_0 q8_0; do bench $t 1 $r; bench $t 0 $r; done
  for t in q6_k q4_k; do bench $t all $r; bench $t 0 $r; done
done
for e in 1 0; do
  TESSERA_HALF_SWIGLU=$e /tmp/s49/tessera bench -m $C/tok_only.gguf --device cuda --dummy llama3-8b --dummy-type q4_0 \
    --decode-ctx 512 --decode-tokens 8 --prefill 64 --batch 2 --batch-gen 2 --profile > "$out/profile_q4_0_half$e.txt" 2>&1
done
# Where the step's time moves (TRACE types; bins.tar.xz may carry build/libkernel_trace.so):
# bench/cuda/trace_step.sh's per-kernel exposed times with the f16 row and with the quantizer.
if [ -f /tmp/s49/libkernel_trace.so ]; then
  for t in ${TRACE:-q8_0 q4_0}; do
    for e in 1 0; do
      mkdir -p "$out/trace_half$e"
      OUT="$out/trace_half$e" TYPE=$t TESSERA_BIN=/tmp/s49/tessera KERNEL_TRACE_LIB=/tmp/s49/libkernel_trace.so \
        TESSERA_MODEL=$C/tok_only.gguf TESSERA_HALF_SWIGLU=$e bash "$(dirname "$0")/trace_step.sh" > /dev/null 2>&1 ||
        echo "trace $t half=$e failed" | tee -a "$out/summary.txt"
    done
  done
fi
