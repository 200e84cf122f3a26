#!/usr/bin/env bash
# Device calls (session 62), chained while the machine stays warm. Call b (the first) runs
# main's head (57d182f: the decode graphs' cache in decode_graphs.h, run() deciding plain greedy
# rows) through llama_cuda_test's dummy-weight tests and engine_sample_cuda_test on dummy
# Llama-3-8B weights, then a batch-1 A/B of branch wip/s62-prewait's knobs (gpu_runs/s62_knobs.diff),
# same binary:
# TESSERA_DOWN_PRE=2 (down loads two steps of weights before its wait), TESSERA_QKV_PRE=2 (QKV
# likewise), TESSERA_QUANT_LATE_TRIGGER=1 (o launched once the attention merge's loads are in),
# TESSERA_QUANT_THREADS=32 (the attention merge-quantizer in 16 blocks of 32 threads, not 8 of 64),
# TESSERA_DOWN_Q8=1 (down's f16 row quantized to 8 bits in registers, Q4_0 / Q8_0); and
# MmqHalf.GemvOnF16RowsMatchesTheExactProduct under the down knobs.
# Calls a and a2 then carry the default model (SmolLM2-135M-Instruct Q4_1, 98 MB) in two pieces
# and call c runs every llama_cuda_test on it (the GPU's greedy text against the CPU's).
#   run(command="bash docs/design/gpu_runs/s62_check.sh b", carry=["build-carry-s62/b"])
#   run(command="bash docs/design/gpu_runs/s62_check.sh a", carry=["build-carry-s62/a"])
#   run(command="bash docs/design/gpu_runs/s62_check.sh a2", carry=["build-carry-s62/a2"])
#   run(command="bash docs/design/gpu_runs/s62_check.sh c")
set -u
out=${OUT:-s62_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_step, ab_report
mkdir -p /tmp/m "$out"
case $1 in
  a) cp build-carry-s62/a/model.part.1 /tmp/m/; ls -l /tmp/m; exit 0 ;;
  a2) cp build-carry-s62/a2/model.part.2 /tmp/m/; ls -l /tmp/m; exit 0 ;;
esac
start_call build-carry-s62/b "$out"
s=$out/summary.txt
if [ "$1" = c ]; then
  cat /tmp/m/model.part.1 /tmp/m/model.part.2 > /tmp/m/model.gguf
  sha256sum /tmp/m/model.gguf | tee -a $s
  gtest_step $s "llama_cuda_test (default model)" $out/llama.txt \
    env TESSERA_MODEL=/tmp/m/model.gguf timeout 300 /tmp/bin/llama_cuda_test
  grep -E "GPU vs CPU|first difference|identical|margin" $out/llama.txt | head -20 | tee -a $s
  exit 0
fi
gtest_step $s "llama_cuda_test (dummy)" $out/llama.txt timeout 200 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy*'
gtest_step $s "engine_sample_cuda_test (llama3-8b dummy)" $out/engine_sample.txt \
  env TESSERA_TEST_DUMMY=llama3-8b TESSERA_MODEL=/tmp/bin/tok_only.gguf timeout 150 /tmp/bin/engine_sample_cuda_test
TYPES="q8_0 q4_0" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab \
  TRACES="q8_0:base q4_0:base q8_0:q8 q4_0:q8" \
  bash bench/cuda/batch1_env_ab.sh base=/tmp/bin/tessera down2=/tmp/bin/tessera,TESSERA_DOWN_PRE=2 \
  qkv2=/tmp/bin/tessera,TESSERA_QKV_PRE=2 late=/tmp/bin/tessera,TESSERA_QUANT_LATE_TRIGGER=1 \
  q32=/tmp/bin/tessera,TESSERA_QUANT_THREADS=32 q8=/tmp/bin/tessera,TESSERA_DOWN_Q8=1 > /dev/null 2>&1
ab_report /tmp/ab $s "$out"
for v in TESSERA_DOWN_PRE=2 TESSERA_DOWN_Q8=1; do
  gtest_step $s "gemv_cuda_test MmqHalf exact product, $v" $out/gemv_$v.txt \
    env $v timeout 120 /tmp/bin/gemv_cuda_test --gtest_filter='MmqHalf.GemvOnF16RowsMatchesTheExactProduct'
  grep -E "f16 row nMSE" $out/gemv_$v.txt | head -8 | tee -a $s
done
ls -l $out
