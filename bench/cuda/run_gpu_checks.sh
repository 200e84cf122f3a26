#!/usr/bin/env bash
# One device-machine call: every GPU test, compute-sanitizer memcheck on each (MEMCHECK=0 skips),
# the decode kernel benchmark (BENCH_RUNS times, default 1) and the Llama decode bench; with
# PEER=1 also llama.cpp on the same model shapes (bench/cuda/peer_llama_cpp.sh): its build runs
# in the background while the tests run, its benchmarks after ours (not concurrently on the GPU).
# Binaries come prebuilt (carried build/ paths). $OUT (or ./gpu_out) gets at most 7 files, written
# as the run goes (the device tool returns 8): summary.txt, tests.log, sanitizer.log, bench.txt,
# llama_decode_bench.txt, peer_table.txt and, at the end, logs.tgz with everything else.
set -u
start=$(date +%s)
out=${OUT:-gpu_out}; mkdir -p "$out"
logs=/tmp/gpu_logs; mkdir -p "$logs"
bin=${BIN:-build}  # where the prebuilt binaries (and, for PEER=1, the peer scripts) are
limit=${LIMIT_S:-570}  # the call's own limit: no peer benchmark starts past ~limit - 60 s
tests="backend_cuda_test rms_norm_cuda_test decode_kernels_cuda_test decode_attention_cuda_test act_quant_cuda_test gemv_cuda_test llama_decode_cuda_test"
# cuBLASLt is linked shared: find it where the toolkit or the Python wheel put it.
if ! ldd $bin/backend_cuda_test | grep -q 'libcublasLt.so.*=> /'; then
  d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/summary.txt"
peer=$bin/peer_llama_cpp.sh  # next to the binaries (carried folder) or next to this script
[ -f "$peer" ] || peer=$(dirname "$0")/peer_llama_cpp.sh
if [ "${PEER:-0}" = 1 ]; then
  OUT=$logs nice -n 5 bash $peer build > "$logs/peer_build_stage.log" 2>&1 &
  peer_pid=$!
fi
status=0
for t in $tests; do
  echo "== $t" >> "$out/tests.log"
  ./$bin/$t --gtest_brief=1 >>"$out/tests.log" 2>&1; rc=$?
  echo "$t rc=$rc" | tee -a "$out/summary.txt"; [ $rc -eq 0 ] || status=1
done
if [ "${MEMCHECK:-1}" = 1 ]; then
  for t in ${MEMCHECK_TESTS:-$tests}; do
    echo "== memcheck $t" >>"$out/sanitizer.log"
    compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 ./$bin/$t --gtest_brief=1 \
      >>"$out/sanitizer.log" 2>&1; rc=$?
    echo "memcheck $t rc=$rc" | tee -a "$out/summary.txt"; [ $rc -eq 0 ] || status=1
  done
fi
for r in $(seq 1 "${BENCH_RUNS:-1}"); do
  echo "== decode_kernels_bench run $r" >> "$out/bench.txt"
  ./$bin/decode_kernels_bench >> "$out/bench.txt" 2>&1; echo "bench rc=$?" | tee -a "$out/summary.txt"
done
./$bin/llama_decode_bench ${DECODE_TYPES:-} > "$out/llama_decode_bench.txt" 2>&1
echo "llama_decode_bench rc=$?" | tee -a "$out/summary.txt"
grep -E "FAILED|Failure|ERROR SUMMARY: [1-9]" "$out/tests.log" "$out/sanitizer.log" 2>/dev/null | head -30
grep -E "^\| (gemv|qkv|decode_att|swiglu|add_rms|rope|embed)" "$out/bench.txt" | tail -40
tail -22 "$out/llama_decode_bench.txt"
if [ "${PEER:-0}" = 1 ]; then
  wait $peer_pid; echo "peer build rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
  tail -8 "$logs/peer_build_stage.log" | tee -a "$out/summary.txt"
  OUT=$logs DEADLINE=$(( start + limit - 60 )) TESSERA_RESULTS="$out/llama_decode_bench.txt" \
    bash $peer bench ${DECODE_TYPES:-} 2>&1 | tee "$out/peer_table.txt"
fi
echo "total $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
exit $status
