#!/usr/bin/env bash
# Device sampling on one GPU: kernel vs host sampler (+ memcheck, racecheck), engine seeded
# sampling on dummy models, the kernel microbenchmark.
set -u
B=${BIN:-build-carry-sample}; out=${OUT:-out}; mkdir -p "$out"
d=$(dirname "$(find /usr/local -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
run() { local name=$1; shift; local t0=$SECONDS; "$@" >"$out/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$out/summary.txt";
  grep -E "^V |kept tokens|FAILED|Failure|differ|device [0-9]|PASSED|SKIPPED" "$out/$name.log" | head -20; }
run sample_test $B/sample_cuda_test
run engine_smollm env TESSERA_MODEL=$B/tok_donor.gguf TESSERA_TEST_DUMMY=smollm2-135m $B/engine_sample_cuda_test
run engine_llama3 env TESSERA_MODEL=$B/tok_donor.gguf TESSERA_TEST_DUMMY=llama3-8b $B/engine_sample_cuda_test
run llama_cuda_test $B/llama_cuda_test
run memcheck timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/sample_cuda_test --gtest_filter='-*Draws*'
tail -3 "$out/memcheck.log"
run racecheck timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/sample_cuda_test --gtest_filter='*Vocab1000*:*Penalties*'
tail -3 "$out/racecheck.log"
run bench timeout 90 $B/sample_bench
cat "$out/bench.log"
