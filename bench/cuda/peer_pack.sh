#!/usr/bin/env bash
# Packs what bench/cuda/peer_same_call.sh needs into build-carry-peer/ (ignored by git; < 64 MiB,
# one device call): gzip'd tessera from $BUILD (default build/), the tokenizer donor GGUF, llama.cpp's
# gguf-py, and llama.cpp's llama-bench / llama-batched-bench built HERE for sm_90a from the
# llama-cpp-python sdist's vendored source ($LLAMA_SRC: a llama.cpp source tree; the build takes
# ~1 hour on 2 cores, so the GPU machine does not spend its time on it). Then:
#   run(command="bash bench/cuda/peer_same_call.sh", carry=["build-carry-peer"])
set -eu
B=${BUILD:-build}
SRC=${LLAMA_SRC:?set LLAMA_SRC to a llama.cpp source tree (llama-cpp-python sdist: vendor/llama.cpp)}
LB=${LLAMA_BUILD:-build-llama-cpp}
D=build-carry-peer
DONOR=${DONOR:-build-carry/tok_donor.gguf}
if [ ! -x "$LB/bin/llama-batched-bench" ]; then
  cmake -S "$SRC" -B "$LB" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
  cmake --build "$LB" --target llama-bench llama-batched-bench -j "$(nproc)"
fi
rm -rf $D && mkdir -p $D
gzip -1 -c "$B/tessera" > $D/tessera.gz
for t in llama-bench llama-batched-bench; do gzip -1 -c "$LB/bin/$t" > $D/$t.gz; done
tar czf $D/gguf-py.tar.gz -C "$SRC/gguf-py" .
cp "$DONOR" $D/tok_donor.gguf
du -sh $D
