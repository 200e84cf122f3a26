#!/usr/bin/env bash
# The GPU machine's side of bench/cuda/gpu_pack.sh, one phase per device call:
#  a: every CUDA op against its reference (unit tests); stages the model's first part in /tmp/m.
#  b: the default model on the GPU vs the CPU (llama_cuda_test: teacher-forced agreement, one-row
#     steps vs one chunk, greedy text of 5 prompts), seeded GPU sampling through the engine on the
#     default model and on dummy Llama-3-8B weights.
#  c: `tessera bench --profile` on dummy Llama-3-8B bf16 weights (per-op GPU time and % of floor
#     for batch-1 decode, prefill 2048 and decode of 128 sequences); stages the peer's first half
#     (build-carry-peer/a) for bench/cuda/peer_same_call.sh in the next call.
#  d (optional, after c): Hugging Face checkpoints on the GPU vs transformers
#     (tests/reference/test_hf_models.py -k gpu; pytest from the wheels in build-carry-gpu/d).
# Results under $OUT (the tool returns 8 files: logs are concatenated per phase).
set -u
phase=${1:?phase a, b or c}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/m /tmp/bin
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
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
    for f in $src/*.gz; do t=$(basename "$f" .gz); gunzip -c "$f" > /tmp/bin/$t; chmod +x /tmp/bin/$t; done
    cp $src/model.part.1 /tmp/m/
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
    for f in $src/*_test.gz; do
      t=$(basename "$f" .gz)
      [ "$t" = llama_cuda_test ] || [ "$t" = engine_sample_cuda_test ] || step $t /tmp/bin/$t --gtest_brief=1
    done
    ;;
  b)
    cat /tmp/m/model.part.1 build-carry-gpu/b/model.part.2 > /tmp/m/model.gguf
    step llama_cuda_test /tmp/bin/llama_cuda_test --gtest_brief=0
    grep -E "GPU vs CPU|first difference|identical|chunks of|one-row" /tmp/m/llama_cuda_test.log | tee -a "$out/summary.txt"
    if [ -x /tmp/bin/engine_sample_cuda_test ]; then
      step engine_sample /tmp/bin/engine_sample_cuda_test --gtest_brief=1
      step engine_sample_dummy env TESSERA_TEST_DUMMY=llama3-8b /tmp/bin/engine_sample_cuda_test --gtest_brief=1
    fi
    ;;
  c)
    bash bench/cuda/peer_same_call.sh stage > /dev/null
    gunzip -c /tmp/peer_in/tessera.gz > /tmp/bin/tessera && chmod +x /tmp/bin/tessera
    step profile timeout 240 /tmp/bin/tessera bench -m $TESSERA_MODEL --device cuda --dummy llama3-8b --profile \
      --prefill 2048 --batch 128 --batch-gen 8 --decode-tokens 16 --decode-ctx 512 --out /tmp/m/prof.md
    sed -n '/GPU time per op/,$p' /tmp/m/profile.log | tee -a "$out/summary.txt"
    ;;
  d)
    python3 -m pytest --version > /dev/null 2>&1 ||
      python3 -m pip install -q --no-index --find-links build-carry-gpu/d pytest
    step hf_vs_transformers_gpu env TESSERA_BIN=/tmp/bin/tessera TESSERA_TEST_CUDA=1 timeout 300 \
      python3 -m pytest -q -s -p no:cacheprovider tests/reference/test_hf_models.py -k gpu
    grep -E "GPU vs HF|passed|failed" /tmp/m/hf_vs_transformers_gpu.log | tee -a "$out/summary.txt"
    ;;
esac
cat "$out/summary.txt"
