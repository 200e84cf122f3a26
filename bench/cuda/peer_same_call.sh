#!/usr/bin/env bash
# One device call: llama.cpp (built here from the llama-cpp-python sdist's vendored copy, CUDA,
# sm_90a) and Tessera on the same Llama-3-8B-shaped random bf16 weights, same GPU, same call:
#   batch-1 decode (llama-bench tg128 at depth 512 | Tessera's batch-1 runner, llama_decode_bench),
#   prefill 512 / 2048 (llama-bench pp | tessera bench),
#   128 sequences x (512 prompt + 128 generated) (llama-batched-bench, total tokens/s | tessera
#   serve under bench/serve_load.py: 128 closed-loop clients, 512-token prompts, 128 out).
# Prints one side-by-side table (peer_same_call.md under $OUT).
# Inputs ($P, default build-carry-peer/): llama.cpp-src.tar.gz, tessera.gz, llama_decode_bench.gz,
# tok_donor.gguf (a GGUF whose tokenizer serves the dummy model). Packing (here):
#   mkdir -p build-carry-peer && cp build-gpu-carry/llama.cpp-src.tar.gz build-carry-peer/ &&
#   gzip -1 -c build/tessera > build-carry-peer/tessera.gz && gzip -1 -c build/llama_decode_bench \
#   > build-carry-peer/llama_decode_bench.gz && cp build-carry/tok_donor.gguf build-carry-peer/
set -u
P=${P:-build-carry-peer}; out=${OUT:-peer_out}; mkdir -p "$out" /tmp/bin
here=$(cd "$(dirname "$0")" && pwd)
for f in tessera llama_decode_bench; do gunzip -c $P/$f.gz > /tmp/bin/$f; chmod +x /tmp/bin/$f; done
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
L=/tmp/llama.cpp; mkdir -p $L/src
tar xzf $P/llama.cpp-src.tar.gz -C $L/src
t0=$(date +%s)
( nice -n 5 cmake -S $L/src -B $L/b -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF > /tmp/lc_cmake.log 2>&1 &&
  timeout ${BUILD_LIMIT_S:-450} nice -n 5 cmake --build $L/b --target llama-bench llama-batched-bench -j "$(nproc)" > /tmp/lc_build.log 2>&1
  echo "llama.cpp build rc=$? in $(( $(date +%s) - t0 )) s" ) > /tmp/lc_status.txt 2>&1 &
build_pid=$!
# Meanwhile: the peer's GGUF (CPU) and Tessera's GPU-bound benches (the build runs at nice 5; at
# nice 19 it took over 335 s on the H200 machine); the serving run (host-heavy) and the peer's
# benches once the build is done; never two on the GPU.
PYTHONPATH=$L/src/gguf-py python3 $here/peer_make_gguf.py /tmp/peer_bf16.gguf bf16 > /tmp/gguf.log 2>&1
/tmp/bin/llama_decode_bench bf16 > "$out/tessera_runner.txt" 2>&1
M=$P/tok_donor.gguf
timeout 120 /tmp/bin/tessera bench -m $M --device cuda --dummy llama3-8b --prefill 512,2048 --batch 128 \
  --batch-gen 32 --decode-tokens 32 --out "$out/tessera_bench.md" > /tmp/tb.log 2>&1
wait $build_pid; cat /tmp/lc_status.txt | tee "$out/status.txt"  # the host-heavy serving run after it
/tmp/bin/tessera serve -m $M --device cuda --dummy llama3-8b --port 18080 --ctx 2048 --max-running 128 \
  --max-queue 128 --kv-cache-tokens 262144 --max-step-tokens 2048 2> /tmp/serve.log &
spid=$!
for i in $(seq 1 120); do grep -q listening /tmp/serve.log && break; sleep 1; done
timeout 120 python3 $here/../serve_load.py --url http://127.0.0.1:18080 --ignore-eos --token-ids --clients 128 \
  --requests 1024 --prompt-tokens 512:512 --max-tokens 128:128 --json "$out/tessera_serve.json" > /tmp/sl.txt 2>&1
kill -TERM $spid; wait $spid
B=$L/b/bin
if [ -x $B/llama-bench ]; then
  $B/llama-bench -m /tmp/peer_bf16.gguf -ngl 99 -fa 1 -p 0 -n 128 -d 512 -r 3 -o json > /tmp/lb_tg.json 2> /tmp/lb_tg.err
  $B/llama-bench -m /tmp/peer_bf16.gguf -ngl 99 -fa 1 -p 512,2048 -n 0 -r 3 -o json > /tmp/lb_pp.json 2> /tmp/lb_pp.err
fi
if [ -x $B/llama-batched-bench ]; then
  timeout 120 $B/llama-batched-bench -m /tmp/peer_bf16.gguf -ngl 99 -fa on -c 83968 -b 2048 -ub 512 \
    -npp 512 -ntg 128 -npl 128 > /tmp/lbb.txt 2>&1; tail -8 /tmp/lbb.txt > "$out/llama_batched_bench.txt"
fi
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
def load(p):
    try: return json.load(open(p))
    except Exception: return []
tg = [r["avg_ts"] for r in load("/tmp/lb_tg.json") if r.get("n_gen", 0) > 0]
pp = {r["n_prompt"]: r["avg_ts"] for r in load("/tmp/lb_pp.json") if r.get("n_gen", 1) == 0}
runner = None
for line in open(f"{out}/tessera_runner.txt"):
    m = re.match(r"RESULT type=bf16 ms=([\d.]+)", line)
    if m: runner = float(m.group(1))
bench = {}
for line in open(f"{out}/tessera_bench.md"):
    m = re.match(r"\| (decode, batch 1 \(ms/token\)|prefill (\d+) \(tokens/s\)|decode, batch 128 \(tokens/s\)) \| ([\d.]+)", line)
    if m: bench[m.group(2) or m.group(1)] = float(m.group(3))
serve = load(f"{out}/tessera_serve.json") or {}
lbb = None
try:
    for line in open("/tmp/lbb.txt"):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 9 and cells[1] == "512" and cells[2] == "128" and cells[3] == "128":
            lbb = float(cells[-2])  # S t/s: all tokens / total time
except OSError:
    pass
f = lambda v, fmt="%.0f": (fmt % v) if v else "-"
r = lambda a, b: ("%.2fx" % (a / b)) if a and b else "-"
rows = [
    ("batch-1 decode, ms/token (lower is better)", runner, 1e3 / tg[0] if tg else None, "%.3f", True),
    ("prefill 512, tokens/s", bench.get("512"), pp.get(512), "%.0f", False),
    ("prefill 2048, tokens/s", bench.get("2048"), pp.get(2048), "%.0f", False),
    ("128 x (512 + 128), total tokens/s", serve.get("total_tokens_per_s"), lbb, "%.0f", False),
]
lines = ["| bf16, Llama-3-8B shape, one H200 | Tessera | llama.cpp | Tessera / llama.cpp |", "|---|---|---|---|"]
for name, ours, peer, fmt, lower in rows:
    ratio = r(peer, ours) if lower else r(ours, peer)
    lines.append(f"| {name} | {f(ours, fmt)} | {f(peer, fmt)} | {ratio} |")
lines.append("")
lines.append("Tessera: batch-1 = llama_decode_bench (CUDA-graph runner); prefill = `tessera bench`; 128 x "
             "(512+128) = `tessera serve` + bench/serve_load.py (128 closed-loop clients, 1024 requests, "
             "HTTP streaming). llama.cpp: llama-bench -ngl 99 -fa 1 (tg128 at depth 512; pp 512/2048), "
             "llama-batched-bench -npp 512 -ntg 128 -npl 128 -fa on (S t/s).")
open(f"{out}/peer_same_call.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
