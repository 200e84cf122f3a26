#!/bin/bash
# Device call 2 (wip-mmq): default-model tests (GPU vs CPU) and tessera bench on dummy llama3-8b.
# Run within 30 s of mmq_device_call1.sh (same warm machine) with carry ["build-carry-mmq",
# "build-carry/model.part.ab"].
set -u
[ -f /tmp/model.part.aa ] || { echo "part aa missing (machine not warm)"; exit 3; }
cat /tmp/model.part.aa build-carry/model.part.ab > /tmp/model.gguf; ls -la /tmp/model.gguf
[ -x /tmp/mmq/tessera ] || { mkdir -p /tmp/mmq && tar -xJf build-carry-mmq/bins.tar.xz -C /tmp/mmq; }
B=/tmp/mmq
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-} TESSERA_MODEL=/tmp/model.gguf
timeout 200 $B/llama_cuda_test > $OUT/llama_test.log 2>&1; echo "llama_cuda_test rc=$?"
grep -E "GPU vs CPU|chunks of|^prompt|^\[  (FAILED|PASSED)|^\[       OK|Failure|Expected|Which is|actual" $OUT/llama_test.log | head -40
for t in ${TYPES:-q4_0 q8_0 q4_k q6_k q4_1 bf16}; do
  timeout 100 $B/tessera bench -m /tmp/model.gguf --device cuda --dummy llama3-8b --dummy-type $t \
    --prefill 2048 --batch 16,64,128 --batch-gen 32 --decode-tokens 32 --out $OUT/bench_$t.md > $OUT/bench_$t.log 2>&1
  echo "bench $t rc=$?"; grep -E "\|" $OUT/bench_$t.log | cut -c1-120 | tail -8
done
