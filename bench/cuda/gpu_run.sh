#!/usr/bin/env bash
# The GPU machine's side of bench/cuda/gpu_pack.sh, one phase per device call:
#  a: unit tests of every CUDA op against its reference, compute-sanitizer memcheck on the new
#     ones (racecheck on sampling); stages the model's first part in /tmp/m.
#  b: the default model on the GPU vs the CPU (llama_cuda_test: teacher-forced agreement, greedy
#     text of 5 prompts), `tessera bench` on dummy Llama-3-8B weights for bf16, q8_0, q4_0, q4_k.
#  c: seeded GPU sampling through the engine, Hugging Face checkpoints vs transformers on the GPU,
#     kernel microbenchmarks, the per-op profile; SERVE=1 adds the serving issue's workloads
#     (bench/cuda/run_serve_targets.sh).
# Results under $OUT (the tool returns 8 files: logs are concatenated per phase).
set -u
phase=${1:?phase a, b or c}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/m /tmp/bin
src=build-carry-gpu/$phase
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
for f in $src/*.gz; do t=$(basename "$f" .gz); gunzip -c "$f" > /tmp/bin/$t; chmod +x /tmp/bin/$t; done
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
    cp $src/model.part.1 /tmp/m/
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
    for t in backend_cuda_test row_ops_cuda_test rms_norm_cuda_test act_quant_cuda_test gemv_cuda_test \
             decode_attention_cuda_test paged_attention_cuda_test mmq_cuda_test sample_cuda_test; do
      step $t /tmp/bin/$t --gtest_brief=1
    done
    for t in row_ops_cuda_test paged_attention_cuda_test sample_cuda_test; do
      step memcheck_$t compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/bin/$t --gtest_brief=1 --gtest_filter='-*Draws*'
    done
    step racecheck_sample compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/bin/sample_cuda_test --gtest_brief=1 --gtest_filter='*Vocab1000*:*Penalties*'
    step memcheck_mmq compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/bin/mmq_cuda_test --gtest_brief=1 --gtest_filter='MmqQuant.*:MmqDequant.*:MmqMatmul.RowInABatch*'
    ;;
  b)
    cat /tmp/m/model.part.1 $src/model.part.2 > /tmp/m/model.gguf
    step llama_cuda_test /tmp/bin/llama_cuda_test --gtest_brief=0
    grep -E "GPU vs CPU|first difference|identical|chunks of" /tmp/m/llama_cuda_test.log | tee -a "$out/summary.txt"
    for ty in bf16 q8_0 q4_0 q4_k; do
      step bench_$ty timeout 150 /tmp/bin/tessera bench -m $TESSERA_MODEL --device cuda --dummy llama3-8b \
        --dummy-type $ty --prefill 512,2048 --batch 16,64,128 --batch-gen 32 --decode-tokens 64 \
        --out "$out/bench_$ty.md"
      grep "^| [dp]" "$out/bench_$ty.md" | sed "s/^/$ty /" | tee -a "$out/summary.txt"
    done
    ;;
  c)
    step engine_sample /tmp/bin/engine_sample_cuda_test --gtest_brief=1
    step engine_sample_dummy env TESSERA_TEST_DUMMY=llama3-8b /tmp/bin/engine_sample_cuda_test --gtest_brief=1
    step decode_kernels /tmp/bin/decode_kernels_cuda_test --gtest_brief=1
    if [ -d $src/wheels ]; then
      python3 -m pytest --version > /dev/null 2>&1 || python3 -m pip install -q --no-index --find-links $src/wheels pytest
      step hf_vs_transformers_gpu env TESSERA_BIN=/tmp/bin/tessera TESSERA_TEST_CUDA=1 timeout 300 \
        python3 -m pytest -q -s -p no:cacheprovider tests/reference/test_hf_models.py -k gpu
      grep -E "GPU vs HF|passed|failed" /tmp/m/hf_vs_transformers_gpu.log | tee -a "$out/summary.txt"
    fi
    step paged_attention_bench /tmp/bin/paged_attention_bench
    step sample_bench timeout 90 /tmp/bin/sample_bench
    step profile env TESSERA_CUDA_PROFILE=1 timeout 120 /tmp/bin/tessera bench -m $TESSERA_MODEL --device cuda \
      --dummy llama3-8b --prefill 2048 --batch 128 --batch-gen 8 --decode-tokens 8 --out /tmp/m/prof.md
    if [ "${SERVE:-0}" = 1 ]; then
      step serve_targets env OUT=/tmp/m/serve BIN=/tmp/bin bash bench/cuda/run_serve_targets.sh
      cp /tmp/m/serve/serve_targets.txt "$out/" 2>/dev/null
    fi
    ;;
esac
cat "$out/summary.txt"
