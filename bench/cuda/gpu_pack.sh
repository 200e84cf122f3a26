#!/usr/bin/env bash
# Packs what bench/cuda/gpu_run.sh needs on the GPU machine into build-carry-gpu/{a,b,c}
# (ignored by git; each under the device tool's 64 MiB per call): gzip'd binaries of a CUDA
# build ($BUILD, default build/) and the default model split in two (a: first part + the unit
# tests, b: second part + tessera + the model test, c: engine sampling test, microbenchmarks,
# pytest wheels for the Hugging Face GPU test). Then three chained device calls (the machine
# stays warm ~30 s between them; /tmp survives):
#   run(command="bench/cuda/gpu_run.sh a", carry=["build-carry-gpu/a"])
#   run(command="bench/cuda/gpu_run.sh b", carry=["build-carry-gpu/b"])
#   run(command="SERVE=1 bench/cuda/gpu_run.sh c", carry=["build-carry-gpu/c"])
set -eu
B=${BUILD:-build}
M=${TESSERA_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/SmolLM2-135M-Instruct.Q4_1.gguf}
D=build-carry-gpu
rm -rf $D && mkdir -p $D/a $D/b $D/c
pack() { local dir=$1; shift; for t in "$@"; do gzip -1 -c "$B/$t" > "$D/$dir/$t.gz"; done; }
pack a row_ops_cuda_test mmq_cuda_test sample_cuda_test paged_attention_cuda_test \
  backend_cuda_test act_quant_cuda_test gemv_cuda_test rms_norm_cuda_test decode_attention_cuda_test
pack b tessera llama_cuda_test
pack c engine_sample_cuda_test decode_kernels_cuda_test paged_attention_bench mmq_bench sample_bench
head -c 50000000 "$M" > $D/a/model.part.1
tail -c +50000001 "$M" > $D/b/model.part.2
if python3 -m pip download -q --no-deps -d $D/c/wheels pytest iniconfig pluggy packaging pygments; then :; else
  echo "gpu_pack: no pytest wheels (the Hugging Face GPU test will be skipped)" >&2; fi
du -sh $D/*
