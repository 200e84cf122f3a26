#!/usr/bin/env bash
# One device call: the Python GPU suites on a stripped tessera only (no default model needed):
# Hugging Face checkpoints vs transformers (test_hf_models.py -k gpu) and tiny GGUF models GPU vs
# CPU (test_tiny_models_vs_llama_cpp.py -k gpu, cases by $TINY_K; the tokenizer source is a
# tokenizer-only GGUF). Pack here:
#   C=build-carry-s48; mkdir -p $C; strip -o /tmp/t build/tessera; xz -6 -T2 -c /tmp/t > $C/tessera.xz
#   pip download --no-deps -d $C/wheels pytest iniconfig pluggy packaging pygments
#   tar cJf $C/gguf-py.tar.xz -C $LLAMA_SRC gguf-py/gguf; and $C/tok_only.gguf (tokenizer keys)
# then run(command="bash bench/cuda/gpu_check_loading.sh", carry=["build-carry-s48"]).
set -u
C=${CARRY:-build-carry-s48}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/s48
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2"; }
# $C/tessera.xz, or $C/bins.tar.xz holding tessera_s48 (and test binaries, run below by $TESTS)
if [ -f $C/bins.tar.xz ]; then
  python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" $C/bins.tar.xz /tmp/s48
  mv /tmp/s48/tessera_s48 /tmp/s48/tessera
elif [ ! -x /tmp/s48/tessera ]; then
  unxz_to $C/tessera.xz /tmp/s48/tessera; chmod +x /tmp/s48/tessera
fi
[ -d /tmp/s48/gguf-py ] || python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" $C/gguf-py.tar.xz /tmp/s48
python3 -m pytest --version > /dev/null 2>&1 || python3 -m pip install -q --no-index --find-links $C/wheels pytest
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/summary.txt"
for t in ${TESTS:-}; do  # gtest binaries from bins.tar.xz
  /tmp/s48/$t --gtest_brief=1 > "$out/$t.log" 2>&1
  echo "== $t rc=$?" | tee -a "$out/summary.txt"; tail -3 "$out/$t.log" | tee -a "$out/summary.txt"
done
tok=$PWD/$C/tok_only.gguf
cd tests/reference
if [ -z "${SKIP_HF:-}" ]; then
  t0=$SECONDS
  TESSERA_BIN=/tmp/s48/tessera TESSERA_TEST_CUDA=1 timeout ${HF_TIMEOUT:-280} python3 -m pytest -q -s -p no:cacheprovider \
    test_hf_models.py -k gpu > "$out/hf_gpu.log" 2>&1
  echo "== hf_gpu rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
  grep -E "GPU vs HF|passed|failed" "$out/hf_gpu.log" | tee -a "$out/summary.txt"
fi
t0=$SECONDS
PYTHONPATH=/tmp/s48/gguf-py TESSERA_MODEL=$tok TESSERA_BIN=/tmp/s48/tessera TESSERA_TEST_CUDA=1 \
  timeout ${TINY_TIMEOUT:-280} python3 -m pytest -q -s -p no:cacheprovider test_tiny_models_vs_llama_cpp.py \
  -k "gpu and (${TINY_K:-yarn or q3_k or iq4})" > "$out/tiny_gpu.log" 2>&1
echo "== tiny_gpu rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
grep -E "GPU default|GPU 8-bit|passed|failed" "$out/tiny_gpu.log" | tee -a "$out/summary.txt"
