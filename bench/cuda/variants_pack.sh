#!/usr/bin/env bash
# Builds the baseline (HEAD) and patch variants of the CUDA target for one device call, and packs
# them into one carry: CARRY/bins.tar.xz holds LABEL/<target> for "main" and every variant (xz
# with a 192 MiB dictionary: the variants share most of their bytes, so main and three variants of
# mmq_bench, dequant_gemm_cuda_test, llama_cuda_test and tessera take 26 MB, main's alone 24).
# variants_check.sh runs them on the device.
#   VARIANTS="planar=P1 nopad=P1+P2" TARGETS="mmq_bench dequant_gemm_cuda_test" \
#     bash bench/cuda/variants_pack.sh build-carry-variants
# Each variant is HEAD with its patches (paths relative to the repository root, "+"-joined)
# applied in order. One worktree and one build directory (build-variants/, ignored) serve all of
# them, so after the first build each variant recompiles only what its patches touch. DONOR (a
# tokenizer donor GGUF) or LLAMA_SRC (to make one) adds CARRY/tok_donor.gguf.xz for the engine bench.
set -eu -o pipefail
carry=${1:?usage: VARIANTS="label=patch[+patch...] ..." [TARGETS=...] $0 CARRY_DIR}
targets=${TARGETS:-mmq_bench dequant_gemm_cuda_test}
root=$(git rev-parse --show-toplevel)
cd "$root"
wt=$root/build-variants/src
stage=$root/build-variants/stage
head=$(git rev-parse HEAD)
[ -d "$wt" ] || git worktree add -q --detach "$wt" "$head"
git -C "$wt" reset -q --hard "$head"  # (unchanged files keep their times: incremental builds)
if [ ! -f "$wt/build/CMakeCache.txt" ]; then
  cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON > "$root/build-variants/cmake.log"
fi
rm -rf "$stage" && mkdir -p "$stage"
build_into() {  # label: build the targets of the worktree as it stands into $stage/label
  echo "variants_pack: building $1 ($targets)" >&2
  # shellcheck disable=SC2086
  make -C "$wt/build" -j"${JOBS:-2}" $targets > "$root/build-variants/build_$1.log" 2>&1 ||
    { echo "variants_pack: the $1 build failed (build-variants/build_$1.log)" >&2; exit 1; }
  mkdir -p "$stage/$1"
  for t in $targets; do cp "$wt/build/$t" "$stage/$1/" && strip "$stage/$1/$t"; done
}
build_into main
for spec in ${VARIANTS:-}; do
  label=${spec%%=*}
  [ "$label" != main ] && [ "$label" != "$spec" ] || { echo "variants_pack: bad variant '$spec'" >&2; exit 2; }
  git -C "$wt" reset -q --hard "$head"
  IFS=+ read -r -a patches <<< "${spec#*=}"
  for p in "${patches[@]}"; do
    git -C "$wt" apply "$root/$p" || { echo "variants_pack: $p does not apply for $label" >&2; exit 1; }
  done
  build_into "$label"
done
git -C "$wt" reset -q --hard "$head"
mkdir -p "$carry"
# The engine bench's tokenizer donor (bench/cuda/make_tok_donor.py): DONOR, or made from LLAMA_SRC
# (a llama.cpp source tree, e.g. the llama-cpp-python sdist's vendor/llama.cpp; PYTHON: one with
# numpy, e.g. .venv/bin/python after scripts/setup.sh).
donor=${DONOR:-}
if [ -z "$donor" ] && [ -n "${LLAMA_SRC:-}" ]; then
  donor=$root/build-variants/tok_donor.gguf
  PYTHONPATH="$LLAMA_SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" "$root/bench/cuda/make_tok_donor.py" "$LLAMA_SRC" "$donor"
fi
if [ -n "$donor" ]; then xz -6 -c "$donor" > "$carry/tok_donor.gguf.xz"; fi
# Ordered by target, then label: a target's builds lie within the dictionary's reach of each
# other, and one xz thread keeps one block (a block cannot match into another). By label instead,
# or with two threads, the same 16 binaries took 48 MB instead of 26.
echo "variants_pack: compressing (a few minutes)" >&2
for t in $targets; do for l in main ${VARIANTS:-}; do echo "./${l%%=*}/$t"; done; done |
  tar cf - -C "$stage" -T - | xz -6 -T1 --lzma2=dict=192MiB > "$carry/bins.tar.xz"
echo "$head" > "$carry/base_commit"
echo "variants_pack: $carry/bins.tar.xz $(du -m "$carry/bins.tar.xz" | cut -f1) MB: main ${VARIANTS:-}" >&2
