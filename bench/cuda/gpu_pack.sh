#!/usr/bin/env bash
# Packs the whole GPU check-and-bench (ignored by git; each folder under the device tool's 64 MiB
# per call, working tree included): build-carry-gpu/a = gzip'd CUDA test binaries of a CUDA build
# ($BUILD, default build/) + the default model's first part, build-carry-gpu/b = its second part;
# then bench/cuda/peer_pack.sh (tessera and llama.cpp, build-carry-peer/{a,b}). Four chained
# device calls (the machine stays warm ~30 s between them; /tmp survives):
#   run(command="bench/cuda/gpu_run.sh a", carry=["build-carry-gpu/a"])   # every CUDA op's test
#   run(command="bench/cuda/gpu_run.sh b", carry=["build-carry-gpu/b"])   # model + engine tests
#   run(command="bench/cuda/gpu_run.sh c", carry=["build-carry-peer/a"])  # per-op profile; stages
#   run(command="bash bench/cuda/peer_same_call.sh", carry=["build-carry-peer/b"])  # vs llama.cpp
# (c stages the peer's first half, as `peer_same_call.sh stage` does.) Optional fifth call, after
# c: run(command="bench/cuda/gpu_run.sh d", carry=["build-carry-gpu/d"]) (Hugging Face
# checkpoints vs transformers on the GPU; d holds pytest wheels). peer_pack.sh needs
# LLAMA_SRC (and builds llama.cpp here once, ~20 minutes on 2 cores).
set -eu
B=${BUILD:-build}
M=${TESSERA_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/SmolLM2-135M-Instruct.Q4_1.gguf}
D=build-carry-gpu
rm -rf $D && mkdir -p $D/a $D/b $D/d
for t in backend_cuda_test row_ops_cuda_test gemv_cuda_test mmq_cuda_test paged_attention_cuda_test \
         sample_cuda_test decode_kernels_cuda_test llama_cuda_test engine_sample_cuda_test; do
  gzip -1 -c "$B/$t" > "$D/a/$t.gz"
done
# The model split so that each call stays under 64 MiB with the working tree (~2 MB).
limit=$((64 * 1024 * 1024 - $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) - 300000))
part1=$((limit - $(du -sb $D/a | cut -f1)))
head -c $part1 "$M" > $D/a/model.part.1
tail -c +$((part1 + 1)) "$M" > $D/b/model.part.2
[ "$(du -sb $D/b | cut -f1)" -le $limit ] || { echo "gpu_pack: the model's second part is over the limit" >&2; exit 1; }
python3 -m pip download -q --no-deps -d $D/d pytest iniconfig pluggy packaging pygments ||
  echo "gpu_pack: no pytest wheels (phase d cannot run)" >&2
bash bench/cuda/peer_pack.sh
du -sh $D/*
