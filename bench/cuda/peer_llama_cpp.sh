#!/usr/bin/env bash
# Peer comparison: llama.cpp (the copy vendored in the llama-cpp-python sdist, CUDA backend built
# for sm_90a) against Tessera's batch-1 decode, on the same Llama-3-8B-shaped random-weight model
# per weight type, on the same GPU in the same call; prints one side-by-side table.
#
#   peer_llama_cpp.sh prepare DIR      (a machine with network) pip-download
#                                      llama-cpp-python==$PEER_VERSION's sdist and write
#                                      DIR/llama.cpp-src.tar.gz: its vendor/llama.cpp without
#                                      models/docs/tests/examples/other GPU backends (~6 MB; the
#                                      sdist is ~77 MB, over the device tool's 64 MiB carry)
#   peer_llama_cpp.sh build [TYPES]    (GPU machine) build llama-bench from $PEER_SRC into
#                                      $PEER_BUILD, writing the GGUFs for TYPES meanwhile
#   peer_llama_cpp.sh bench [TYPES]    (GPU machine) llama-bench per type: tg128 at context depth
#                                      512 (as Tessera's bench: context 512 -> 611), pp512, pp2048;
#                                      then the table (Tessera's numbers from $TESSERA_RESULTS, the
#                                      output of llama_decode_bench, or a fresh run of $BIN/llama_decode_bench)
#   peer_llama_cpp.sh all [TYPES]      build, then bench
# TYPES: any of bf16 q8_0 q4_0 q4_k (default: all four; Tessera's bench runs the same set).
# Env: PEER_SRC (tarball; default: next to this script), PEER_BUILD (/tmp/llama.cpp),
#      GGUF_DIR (/tmp/peer_gguf), BIN (dir of llama_decode_bench; default: this script's dir),
#      OUT (results; default ./peer_out), DEADLINE (epoch seconds: start no llama-bench run after it).
set -u
here=$(cd "$(dirname "$0")" && pwd)
PEER_VERSION=${PEER_VERSION:-0.3.36}
PEER_SRC=${PEER_SRC:-$here/llama.cpp-src.tar.gz}
PEER_BUILD=${PEER_BUILD:-/tmp/llama.cpp}
GGUF_DIR=${GGUF_DIR:-/tmp/peer_gguf}
BIN=${BIN:-$here}
OUT=${OUT:-peer_out}
DEADLINE=${DEADLINE:-0}
cmd=${1:-all}; shift || true
types=${*:-"q4_0 q8_0 q4_k bf16"}
mkdir -p "$OUT"

prepare() {
  local dir=$1 tmp
  tmp=$(mktemp -d)
  python3 -m pip download --no-binary :all: --no-deps "llama-cpp-python==$PEER_VERSION" -d "$tmp" >&2 || return 1
  tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp" || return 1
  local src=$(ls -d "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
  mkdir -p "$dir"
  ( cd "$src" && tar czf - --exclude=./models --exclude=./docs --exclude=./media --exclude=./tools/ui \
      --exclude=./benches --exclude=./examples --exclude=./tests --exclude=./pocs --exclude=./conversion \
      --exclude=./ggml/src/ggml-vulkan --exclude=./ggml/src/ggml-sycl --exclude=./ggml/src/ggml-opencl \
      --exclude=./ggml/src/ggml-hexagon --exclude=./ggml/src/ggml-metal --exclude=./ggml/src/ggml-et \
      --exclude=./ggml/src/ggml-webgpu --exclude=./ggml/src/ggml-openvino --exclude=./ggml/src/ggml-cann \
      --exclude=./ggml/src/ggml-virtgpu . ) > "$dir/llama.cpp-src.tar.gz"
  echo "llama-cpp-python $PEER_VERSION" > "$dir/llama.cpp-src.version"
  rm -rf "$tmp"
  ls -la "$dir/llama.cpp-src.tar.gz"
}

make_ggufs() {
  mkdir -p "$GGUF_DIR"
  for t in $types; do
    [ -s "$GGUF_DIR/$t.gguf" ] && continue
    PYTHONPATH="$PEER_BUILD/src/gguf-py${PYTHONPATH:+:$PYTHONPATH}" \
      python3 "$here/peer_make_gguf.py" "$GGUF_DIR/$t.gguf.tmp" "$t" && mv "$GGUF_DIR/$t.gguf.tmp" "$GGUF_DIR/$t.gguf"
  done
}

build() {
  local t0=$(date +%s)
  mkdir -p "$PEER_BUILD/src"
  tar xzf "$PEER_SRC" -C "$PEER_BUILD/src" || return 1
  make_ggufs > "$OUT/gguf.log" 2>&1 &
  local gen=$!
  # Static libraries so the binary needs no LD_LIBRARY_PATH; no NCCL/OpenSSL/curl (no network).
  cmake -S "$PEER_BUILD/src" -B "$PEER_BUILD/b" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF > "$OUT/peer_cmake.log" 2>&1 || { tail -30 "$OUT/peer_cmake.log"; return 1; }
  cmake --build "$PEER_BUILD/b" --target llama-bench -j "$(nproc)" > "$OUT/peer_build.log" 2>&1 \
    || { tail -30 "$OUT/peer_build.log"; return 1; }
  echo "llama-bench built in $(( $(date +%s) - t0 )) s"
  wait $gen
  cat "$OUT/gguf.log"
}

bench() {
  local lb="$PEER_BUILD/b/bin/llama-bench"
  [ -x "$lb" ] || { echo "no llama-bench at $lb"; return 1; }
  make_ggufs >> "$OUT/gguf.log" 2>&1
  local res=${TESSERA_RESULTS:-}
  if [ -z "$res" ] || [ ! -s "$res" ]; then
    res="$OUT/tessera_decode.txt"
    "$BIN/llama_decode_bench" $types > "$res" 2>&1
  fi
  for t in $types; do
    if [ "$DEADLINE" -gt 0 ] && [ "$(date +%s)" -gt "$DEADLINE" ]; then echo "deadline: skipping $t"; continue; fi
    # -fa 1 (flash attention, llama.cpp's fast decode path), all layers on the GPU, 5 repetitions.
    "$lb" -m "$GGUF_DIR/$t.gguf" -ngl 99 -fa 1 -p 0 -n 128 -d 512 -r 5 -o json > "$OUT/llama_bench_tg_$t.json" 2> "$OUT/llama_bench_tg_$t.err"
    "$lb" -m "$GGUF_DIR/$t.gguf" -ngl 99 -fa 1 -p 512,2048 -n 0 -r 3 -o json > "$OUT/llama_bench_pp_$t.json" 2> "$OUT/llama_bench_pp_$t.err"
  done
  python3 - "$OUT" "$res" $types <<'PY'
import json, os, re, sys
out, res, types = sys.argv[1], sys.argv[2], sys.argv[3:]
ours = {}
for line in open(res):
    m = re.match(r"RESULT type=(\S+) ms=([\d.]+) floor_ms=([\d.]+)", line)
    if m:
        ours[m.group(1)] = (float(m.group(2)), float(m.group(3)))
def load(path):
    try:
        return json.load(open(path))
    except Exception:
        return []
print("\n| weights | Tessera ms/tok | Tessera tok/s | floor ms | Tessera % of floor | llama.cpp tg128@d512 tok/s | llama.cpp ms/tok | llama.cpp % of floor | Tessera speed-up | llama.cpp pp512 tok/s | llama.cpp pp2048 tok/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for t in types:
    tg = [r for r in load(f"{out}/llama_bench_tg_{t}.json") if r.get("n_gen", 0) > 0]
    pp = {r["n_prompt"]: r["avg_ts"] for r in load(f"{out}/llama_bench_pp_{t}.json") if r.get("n_gen", 1) == 0}
    o = ours.get(t)
    peer_ts = tg[0]["avg_ts"] if tg else None
    peer_ms = 1e3 / peer_ts if peer_ts else None
    f = lambda v, fmt: (fmt % v) if v is not None else "-"
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        t, f(o and o[0], "%.3f"), f(o and 1e3 / o[0], "%.1f"), f(o and o[1], "%.3f"),
        f(o and 100 * o[1] / o[0], "%.1f%%"), f(peer_ts, "%.1f"), f(peer_ms, "%.3f"),
        f(o and peer_ms and 100 * o[1] / peer_ms, "%.1f%%"), f(o and peer_ms and peer_ms / o[0], "%.2fx"),
        f(pp.get(512), "%.0f"), f(pp.get(2048), "%.0f")))
PY
  echo "(llama.cpp: $(cat "$here/llama.cpp-src.version" 2>/dev/null || echo "vendored llama.cpp"), llama-bench -ngl 99 -fa 1, tg128 at depth 512, 5 reps / pp 3 reps; build $(grep -m1 -o 'ggml version: [0-9.]*' "$OUT/peer_cmake.log" 2>/dev/null))"
}

case $cmd in
  prepare) prepare "${1:-$here}" ;;
  build) build ;;
  bench) bench ;;
  all) build && bench ;;
  *) echo "usage: $0 prepare DIR | build | bench | all [types]"; exit 2 ;;
esac
