#!/bin/bash
# Device call 1 (wip-mmq): integer-dot kernel tests + memcheck + microbenchmark; stages model part aa.
# Run from the main checkout root with carry ["build-carry-mmq", "build-carry/model.part.aa"]; build-carry-mmq/
# holds bins.tar.xz (stripped tessera, mmq_cuda_test, llama_cuda_test, mmq_bench) and these scripts.
set -u
cp build-carry/model.part.aa /tmp/model.part.aa &
mkdir -p /tmp/mmq && tar -xJf build-carry-mmq/bins.tar.xz -C /tmp/mmq
B=/tmp/mmq
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 150 $B/mmq_cuda_test > $OUT/mmq_test.log 2>&1; echo "mmq_cuda_test rc=$?"
grep -E "^\[  (FAILED|PASSED)|^\[       OK|Failure|Expected|Which is|actual|error:|vs cpu" $OUT/mmq_test.log | head -40
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/mmq_cuda_test --gtest_filter="MmqMatmul.*:MmqQuant.*" > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -2 $OUT/memcheck.log
timeout 200 $B/mmq_bench q4_0 q8_0 q4_k q6_k > $OUT/mmq_bench.txt 2>&1; echo "bench rc=$?"
grep -E "ceilings|\| (1|8|16|64|128|2048) \|" $OUT/mmq_bench.txt | cut -c1-110
wait; ls -la /tmp/model.part.aa
