#!/usr/bin/env bash
# One device-machine call: every GPU test, compute-sanitizer memcheck on each, then the decode
# kernel benchmark. Binaries come prebuilt (carried build/ paths); logs go to $OUT (or ./gpu_out).
set -u
out=${OUT:-gpu_out}; mkdir -p "$out"
bin=${BIN:-build}  # where the prebuilt binaries are
tests="backend_cuda_test rms_norm_cuda_test decode_kernels_cuda_test decode_attention_cuda_test gemv_cuda_test llama_decode_cuda_test"
# cuBLASLt is linked shared: find it where the toolkit or the Python wheel put it.
if ! ldd $bin/backend_cuda_test | grep -q 'libcublasLt.so.*=> /'; then
  d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
status=0
for t in $tests; do
  echo "== $t" | tee -a "$out/tests.log"
  ./$bin/$t --gtest_brief=1 >>"$out/tests.log" 2>&1; rc=$?
  echo "$t rc=$rc" | tee -a "$out/summary.txt"; [ $rc -eq 0 ] || status=1
done
for t in $tests; do
  echo "== memcheck $t" >>"$out/sanitizer.log"
  compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 ./$bin/$t --gtest_brief=1 \
    >>"$out/sanitizer.log" 2>&1; rc=$?
  echo "memcheck $t rc=$rc" | tee -a "$out/summary.txt"; [ $rc -eq 0 ] || status=1
done
./$bin/decode_kernels_bench 2>&1 | tee "$out/bench.txt"; rc=${PIPESTATUS[0]}
echo "== second bench run (run-to-run spread)" | tee -a "$out/bench.txt"
./$bin/decode_kernels_bench 2>&1 | tee -a "$out/bench.txt"
echo "bench rc=$rc" | tee -a "$out/summary.txt"
./$bin/llama_decode_bench 2>&1 | tee "$out/llama_decode_bench.txt"
echo "llama_decode_bench rc=${PIPESTATUS[0]}" | tee -a "$out/summary.txt"
grep -E "FAILED|Failure|rc=|ERROR SUMMARY" "$out/tests.log" "$out/sanitizer.log" | head -40
exit $status
