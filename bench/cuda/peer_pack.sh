#!/usr/bin/env bash
# Packs what bench/cuda/peer_same_call.sh needs into build-carry-peer/{a,b} (ignored by git; each
# under the device tool's 64 MiB per call): gzip'd tessera from $BUILD (default build/), the
# tokenizer donor GGUF, llama.cpp's gguf-py, and llama.cpp's llama-bench / llama-batched-bench
# built HERE for sm_90a from the llama-cpp-python sdist's vendored source ($LLAMA_SRC: a llama.cpp
# source tree; the build takes ~20 minutes on 2 cores, so the GPU machine does not spend its time
# on it; each static binary is ~47 MB gzip'd). Then two chained calls (the machine stays warm
# ~30 s; /tmp survives), the first only stages its files:
#   run(command="bash bench/cuda/peer_same_call.sh stage", carry=["build-carry-peer/a"])
#   run(command="bash bench/cuda/peer_same_call.sh", carry=["build-carry-peer/b"])
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
rm -rf $D && mkdir -p $D/a $D/b
gzip -1 -c "$B/tessera" > $D/a/tessera.gz
gzip -1 -c "$LB/bin/llama-bench" > $D/a/llama-bench.gz
tar czf $D/a/gguf-py.tar.gz -C "$SRC/gguf-py" .
gzip -1 -c "$LB/bin/llama-batched-bench" > $D/b/llama-batched-bench.gz
cp "$DONOR" $D/b/tok_donor.gguf
du -sh $D/*
