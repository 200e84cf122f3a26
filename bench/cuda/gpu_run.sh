#!/usr/bin/env bash
# The GPU machine's side of bench/cuda/gpu_pack.sh, one phase per device call:
#  a: unpacks the CUDA tests and tessera into /tmp/bin; every CUDA op against its reference (unit
#     tests); stages the model's first part in /tmp/m.
#  a2: only where gpu_pack.sh made build-carry-gpu/a2: appends the model's overflow to that part.
#  b: the default model on the GPU vs the CPU (llama_cuda_test: teacher-forced agreement, one-row
#     steps vs one chunk, greedy text of 5 prompts), quantized projections past one row on dummy
#     weights (llama_cuda_quant_test), seeded GPU sampling through the engine on the
#     default model and on dummy Llama-3-8B weights; `tessera bench --profile` on dummy Llama-3-8B
#     bf16 weights (per-op GPU time and % of floor for batch-1 decode, prefill 2048 and decode of
#     128 sequences); `tessera bench` of dummy Llama-3-8B Q4_0 / Q4_K / Q5_K / Q8_0 weights (batch 1, prefill,
#     16 / 64 / 128 sequences); Hugging Face checkpoints on the GPU vs transformers (skipped with NO_HF=1).
# Results under $OUT (the tool returns 8 files: logs are concatenated per phase).
set -u
phase=${1:?phase a or b}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/m /tmp/bin
. "$(dirname "$0")/gpu_probe.sh"  # unxz_tar, use_device_cublaslt
use_device_cublaslt
export TESSERA_MODEL=/tmp/m/model.gguf
log=$out/phase_$phase.log
step() {  # step NAME CMD...: runs, records rc, keeps the log
  local name=$1; shift; local t0=$SECONDS
  "$@" > /tmp/m/$name.log 2>&1; local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
  { echo "== $name rc=$rc"; cat /tmp/m/$name.log; } >> "$log"
}
case $phase in
  a)
    src=build-carry-gpu/a
    unxz_tar $src/bins.tar.xz /tmp/bin
    cp $src/model.part.1 /tmp/m/
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
    for t in backend_cuda_test row_ops_cuda_test gemv_cuda_test mmq_cuda_test dequant_gemm_cuda_test paged_attention_cuda_test \
             sample_cuda_test decode_kernels_cuda_test act_quant_cuda_test decode_attention_cuda_test \
             rms_norm_cuda_test llama_decode_cuda_test; do
      if [ -x /tmp/bin/$t ]; then step $t /tmp/bin/$t --gtest_brief=1
      else echo "== $t not packed (TESTS)" | tee -a "$out/summary.txt"; fi
    done
    # Shared-memory races of the cluster sampler (its key cache, penalties and bans; session 14
    # found one only through a flaky engine test): racecheck over the penalty test's clusters.
    # NO_RACECHECK=1 skips it (~105 s) when the sampler is unchanged.
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    if [ -n "$cs" ] && [ -z "${NO_RACECHECK:-}" ]; then
      step sample_racecheck $cs --tool racecheck --racecheck-report hazard --error-exitcode 1 \
        /tmp/bin/sample_cuda_test --gtest_filter='*Penalties*:*DrawEdges*'
      grep -E "RACECHECK SUMMARY" /tmp/m/sample_racecheck.log | tee -a "$out/summary.txt"
    fi
    ;;
  a2)  # the model's overflow when it does not fit carries a and b (gpu_pack.sh)
    cat build-carry-gpu/a2/model.part.1b >> /tmp/m/model.part.1
    ls -l /tmp/m/model.part.1 | tee -a "$out/summary.txt"
    ;;
  b)
    src=build-carry-gpu/b
    cat /tmp/m/model.part.1 $src/model.part.2 > /tmp/m/model.gguf
    step llama_cuda_test /tmp/bin/llama_cuda_test --gtest_brief=0
    grep -E "GPU vs CPU|first difference|identical|chunks of|one-row" /tmp/m/llama_cuda_test.log | tee -a "$out/summary.txt"
    step llama_cuda_quant_test /tmp/bin/llama_cuda_quant_test --gtest_brief=0
    grep -E "chunks of|chunk of|mixed step" /tmp/m/llama_cuda_quant_test.log | tee -a "$out/summary.txt"
    step engine_sample /tmp/bin/engine_sample_cuda_test --gtest_brief=1
    step engine_sample_dummy env TESSERA_TEST_DUMMY=llama3-8b /tmp/bin/engine_sample_cuda_test --gtest_brief=1
    step profile timeout 240 /tmp/bin/tessera bench -m $TESSERA_MODEL --device cuda --dummy llama3-8b --profile \
      --prefill 2048 --batch 128 --batch-gen 8 --decode-tokens 16 --decode-ctx 512 --out /tmp/m/prof.md
    sed -n '/GPU time per op/,/^decode x1[0-9]/p' /tmp/m/profile.log | tee -a "$out/summary.txt"
    # Quantized weights at 16-128 rows (dequant_gemm.h; batch 1 takes the GEMV).
    for ty in q4_0 q4_k q5_k q8_0; do
      step bench_$ty timeout 200 /tmp/bin/tessera bench -m $TESSERA_MODEL --device cuda --dummy llama3-8b \
        --dummy-type $ty --decode-ctx 512 --decode-tokens 16 --prefill 512 --batch 16,64,128 --batch-gen 16 \
        --out /tmp/m/bench_$ty.md
      grep -E "^\| (decode|prefill)" /tmp/m/bench_$ty.md | sed "s/^/$ty /" | tee -a "$out/summary.txt"
    done
    if [ -z "${NO_HF:-}" ]; then
      python3 -m pytest --version > /dev/null 2>&1 || python3 -m pip install -q --no-index --find-links $src pytest
      step hf_vs_transformers_gpu env TESSERA_BIN=/tmp/bin/tessera TESSERA_TEST_CUDA=1 timeout 300 \
        python3 -m pytest -q -s -p no:cacheprovider tests/reference/test_hf_models.py -k gpu
      grep -E "GPU vs HF|passed|failed" /tmp/m/hf_vs_transformers_gpu.log | tee -a "$out/summary.txt"
      # Tiny GGUF models of every weight type, GPU vs CPU (needs the gguf package: llama.cpp's
      # gguf-py from the peer carry, unpacked to /tmp/gguf-py by peer_same_call.sh, or pip's).
      if PYTHONPATH=/tmp/gguf-py python3 -c "import gguf" 2> /dev/null; then
        step tiny_gguf_gpu env PYTHONPATH=/tmp/gguf-py TESSERA_BIN=/tmp/bin/tessera TESSERA_TEST_CUDA=1 timeout 540 \
          python3 -m pytest -q -s -p no:cacheprovider tests/reference/test_tiny_models_vs_llama_cpp.py -k gpu
        grep -E "GPU default|passed|failed" /tmp/m/tiny_gguf_gpu.log | tee -a "$out/summary.txt"
      fi
    fi
    ;;
esac
cat "$out/summary.txt"
