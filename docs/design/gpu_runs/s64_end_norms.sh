#!/usr/bin/env bash
# Session 64: the norms at a one-row step's two ends formed like the ones between layers (the
# embedding gather forms layer 0's qkv input, the last down GEMV the head's; TESSERA_END_NORMS=0
# keeps the norm kernels there). Chained device calls, each within 30 s of the last (the machine
# and /tmp stay while warm); the carries are git-ignored build outputs (build-carry-s64/):
#   m1: run(command="bash docs/design/gpu_runs/s64_end_norms.sh m1", carry=["build-carry-s64/m1"])
#   m2: run(command="bash docs/design/gpu_runs/s64_end_norms.sh m2", carry=["build-carry-s64/m2"])
#       the default model (SmolLM2-135M-Instruct Q4_1, 98 MB) in two pieces into /tmp/m
#   b:  run(command="bash docs/design/gpu_runs/s64_end_norms.sh b", carry=["build-carry-s64/b"])
#       the kernel tests (EmbeddingGather*, the residual-norm epilogue), every llama_cuda_test on
#       the default model (greedy text of 5 prompts against the CPU) and dummy weights
#   c:  run(command="bash docs/design/gpu_runs/s64_end_norms.sh c")
#       same-binary batch-1 A/B (TESSERA_END_NORMS=0 vs on), Q8_0 / Q4_0 / Q4_K, traces
#   d:  run(command="bash docs/design/gpu_runs/s64_end_norms.sh d", carry=["build-carry-peer"])
#       bench/cuda/peer_same_call.sh on bf16 / Q8_0 / Q4_0 / Q4_K with this build's tessera
# build-carry-s64/b/bins.tar.xz: tessera, llama_cuda_test, decode_kernels_cuda_test, mmq_cuda_test,
# tok_only.gguf, libkernel_trace.so from the build (tar | xz -6 -T2 --lzma2=dict=192MiB).
set -u
out=${OUT:-s64_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_step, ab_report
mkdir -p /tmp/m "$out"
s=$out/summary.txt
case ${1:-} in
  m1) cp build-carry-s64/m1/model.part.1 /tmp/m/; ls -l /tmp/m ;;
  m2) cat /tmp/m/model.part.1 build-carry-s64/m2/model.part.2 > /tmp/m/model.gguf; sha256sum /tmp/m/model.gguf ;;
  b)
    start_call build-carry-s64/b "$out"
    gtest_step $s "decode_kernels_cuda_test (EmbeddingGather*)" $out/decode_kernels.txt \
      timeout 100 /tmp/bin/decode_kernels_cuda_test --gtest_filter='EmbeddingGather*'
    gtest_step $s "mmq_cuda_test (norm epilogue, row norm)" $out/mmq.txt \
      timeout 150 /tmp/bin/mmq_cuda_test --gtest_filter='MmqMatmul.ResidualNorm*:MmqMatmul.RowNorm*'
    if [ -s /tmp/m/model.gguf ]; then
      gtest_step $s "llama_cuda_test (default model + dummy)" $out/llama.txt \
        env TESSERA_MODEL=/tmp/m/model.gguf timeout 330 /tmp/bin/llama_cuda_test
      grep -E "GPU vs CPU|first difference|identical|end norms|fused norms vs" $out/llama.txt | head -40 | tee -a $s
    else
      gtest_step $s "llama_cuda_test (dummy)" $out/llama.txt timeout 250 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy*'
      grep -E "end norms|fused norms vs" $out/llama.txt | head -20 | tee -a $s
    fi
    ;;
  c)
    start_call build-carry-s64/b "$out"
    TYPES="q8_0 q4_0 q4_k" ROUNDS=2 DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab TRACES="q8_0:base q8_0:ends q4_0:ends" \
      bash bench/cuda/batch1_env_ab.sh base=/tmp/bin/tessera,TESSERA_END_NORMS=0 ends=/tmp/bin/tessera > /dev/null 2>&1
    ab_report /tmp/ab $s "$out"
    ;;
  d)
    TOK_DONOR=/tmp/bin/tok_only.gguf TYPES="bf16 q8_0 q4_0 q4_k" OUT=$out \
      bash bench/cuda/peer_same_call.sh > $out/peer_stdout.txt 2>&1
    echo "rc $?"; tail -25 $out/peer_stdout.txt
    ;;
  *) echo "usage: s64_end_norms.sh m1|m2|b|c|d"; exit 2 ;;
esac
