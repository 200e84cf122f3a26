#!/usr/bin/env bash
# Packs the whole GPU check-and-bench into three carries (ignored by git; each under the device
# tool's 64 MiB per call, working tree included), four when the default model's second part
# does not fit beside the pytest wheels (the binaries took 27 MB of carry a in session 46, so
# part 1 is smaller): then build-carry-gpu/a2 holds its overflow, staged by `gpu_run.sh a2` in a
# call between a and b. xz with a large dictionary stores the CUDA test binaries, which share
# most of their bytes, in a fraction of their gzip'd size.
#   build-carry-gpu/a    bins.tar.xz (the CUDA tests and tessera of $BUILD, default build/) +
#                        the default model's first part
#   build-carry-gpu/b    the model's second part, pytest wheels (for the Hugging Face GPU test)
#   build-carry-peer     llama.tar.xz: llama-bench + llama-batched-bench built HERE for sm_90a
#                        from the llama-cpp-python sdist's vendored source (bench/cuda/peer_pack.sh),
#                        and the tokenizer donor GGUF that serves the dummy models
#                        ($DONOR, made by bench/cuda/make_tok_donor.py from $LLAMA_SRC if missing)
# Three chained device calls (the machine stays warm ~30 s between them; /tmp survives):
#   run(command="bench/cuda/gpu_run.sh a", carry=["build-carry-gpu/a"])   # every CUDA op's test
#   run(command="bench/cuda/gpu_run.sh a2", carry=["build-carry-gpu/a2"]) # only if it exists
#   run(command="bench/cuda/gpu_run.sh b", carry=["build-carry-gpu/b"])   # model tests, profile
#   run(command="bash bench/cuda/peer_same_call.sh", carry=["build-carry-peer"])  # vs llama.cpp
set -eu -o pipefail
B=${BUILD:-build}
M=${TESSERA_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/SmolLM2-135M-Instruct.Q4_1.gguf}
DONOR=${DONOR:-build-carry/tok_donor.gguf}
D=build-carry-gpu
rm -rf $D && mkdir -p $D/a $D/b
# TESTS: a subset (the model's second part must fit one carry next to nothing else; with every
# test the binaries leave too little room for the first part).
tests=${TESTS:-"backend_cuda_test row_ops_cuda_test gemv_cuda_test mmq_cuda_test dequant_gemm_cuda_test
       paged_attention_cuda_test act_quant_cuda_test decode_attention_cuda_test rms_norm_cuda_test
       llama_decode_cuda_test sample_cuda_test decode_kernels_cuda_test llama_cuda_test llama_cuda_quant_test engine_sample_cuda_test"}
echo "gpu_pack: compressing the CUDA tests and tessera (~1 minute)" >&2
# EXTRA_BINS: more binaries (absolute paths; experiments) for /tmp/bin on the GPU machine.
{ tar cf - -C "$B" $tests tessera; for f in ${EXTRA_BINS:-}; do tar cf - -C "$(dirname "$f")" "$(basename "$f")"; done; } |
  xz -6 -T2 --lzma2=dict=128MiB > $D/a/bins.tar.xz
# 3 MiB of margin: the tool counts the carry and the tree its own way (65 MB in all was refused).
limit=$((61 * 1024 * 1024 - $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)))
part1=$((limit - $(du -sb $D/a | cut -f1)))
head -c $part1 "$M" > $D/a/model.part.1
python3 -m pip download -q --no-deps -d $D/b pytest iniconfig pluggy packaging pygments ||
  echo "gpu_pack: no pytest wheels (the Hugging Face GPU test cannot run)" >&2
rest=$(($(stat -c %s "$M") - part1))
room=$((limit - $(du -sb $D/b | cut -f1)))
if [ $rest -gt $room ]; then  # the overflow goes first, into a2; b keeps the model's tail
  mkdir -p $D/a2
  dd if="$M" of=$D/a2/model.part.1b bs=1M iflag=skip_bytes,count_bytes skip=$part1 count=$((rest - room)) status=none
  echo "gpu_pack: four calls: a, a2 (stages the model's overflow), b, peer" >&2
fi
tail -c $((rest < room ? rest : room)) "$M" > $D/b/model.part.2
bash bench/cuda/peer_pack.sh
if [ ! -s "$DONOR" ]; then  # Llama 3's tokenizer from llama.cpp's test vocabulary, tiny weights
  mkdir -p "$(dirname "$DONOR")"
  PYTHONPATH="$LLAMA_SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" python3 bench/cuda/make_tok_donor.py "$LLAMA_SRC" "$DONOR.tmp"
  mv "$DONOR.tmp" "$DONOR"  # a failed run leaves no file that looks complete
fi
# xz'd (16 -> 9 MB): beside llama.cpp's 44 MB it no longer fit as is (session 46).
rm -f build-carry-peer/tok_donor.gguf  # an earlier pack's, unpacked
xz -9 -T2 -c "$DONOR" > build-carry-peer/tok_donor.gguf.xz
for c in $D/b $D/a2 build-carry-peer; do
  [ -d $c ] || continue
  [ "$(du -sb $c | cut -f1)" -le $limit ] || { echo "gpu_pack: $c is over the limit" >&2; exit 1; }
done
du -sb $D/* build-carry-peer
