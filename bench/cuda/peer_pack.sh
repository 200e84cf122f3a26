#!/usr/bin/env bash
# Packs llama.cpp for bench/cuda/peer_same_call.sh into build-carry-peer/ (ignored by git):
# llama.tar.xz = llama-bench + llama-batched-bench built HERE for sm_90a from the
# llama-cpp-python sdist's vendored source ($LLAMA_SRC: a llama.cpp source tree; the build takes
# ~20 minutes on 2 cores, so the GPU machine does not spend its time on it; both static binaries
# in ~44 MB), and gguf-py.tar.gz (llama.cpp's gguf package, to write the peer's GGUFs).
# bench/cuda/gpu_pack.sh calls this and adds the tokenizer donor GGUF; tessera itself travels in
# build-carry-gpu/a and is unpacked into /tmp/bin by `gpu_run.sh a` in a call before.
set -eu -o pipefail
SRC=${LLAMA_SRC:?set LLAMA_SRC to a llama.cpp source tree (llama-cpp-python sdist: vendor/llama.cpp)}
LB=${LLAMA_BUILD:-build-llama-cpp}
D=build-carry-peer
if [ ! -x "$LB/bin/llama-batched-bench" ]; then
  cmake -S "$SRC" -B "$LB" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
  cmake --build "$LB" --target llama-bench llama-batched-bench -j "$(nproc)"
fi
if [ ! -s $D/llama.tar.xz ] || [ "$LB/bin/llama-bench" -nt $D/llama.tar.xz ] ||
   [ "$LB/bin/llama-batched-bench" -nt $D/llama.tar.xz ]; then
  rm -rf $D && mkdir -p $D
  echo "peer_pack: compressing llama.cpp (~40 s)" >&2
  tar cf - -C "$LB/bin" llama-bench llama-batched-bench | xz -6 -T2 --lzma2=dict=192MiB > $D/llama.tar.xz
fi
tar czf $D/gguf-py.tar.gz -C "$SRC/gguf-py" .
du -sh $D
