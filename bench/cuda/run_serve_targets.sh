#!/usr/bin/env bash
# The serving issue's H200 workloads against `tessera serve --device cuda --dummy llama3-8b`
# (one device call): (1) 128 clients x 512-token prompts x 128 output tokens, long enough that
# the first wave (128 simultaneous prompts) is a small part; (2) 128 clients x 128-token prompts
# x 1024 output tokens; (3) 2x overload: 256 clients against --max-running 128 and a bounded
# queue (429s allowed, no 5xx, server memory sampled before/after). Reports under $OUT.
set -u
out=${OUT:-gpu_out}; mkdir -p "$out"
bin=${BIN:-build-carry}; M=${TESSERA_MODEL}
if ! ldd $bin/tessera | grep -q 'libcublasLt.so.*=> /'; then
  d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
fi
$bin/tessera serve -m "$M" --device cuda --dummy llama3-8b --port 18080 --ctx 2048 \
  --max-running 128 --max-queue 128 --kv-cache-tokens 262144 --max-step-tokens 2048 2>"$out/serve.log" &
spid=$!
for i in $(seq 1 120); do grep -q listening "$out/serve.log" && break; sleep 1; done
load() { timeout 200 python3 bench/serve_load.py --url http://127.0.0.1:18080 --ignore-eos --token-ids "$@"; }
rss() { awk '/VmRSS/ {print $2 " kB"}' /proc/$spid/status; }
echo "== 1: 128 clients, 512 prompt, 128 out, 1024 requests" | tee "$out/serve_targets.txt"
load --clients 128 --requests 1024 --prompt-tokens 512:512 --max-tokens 128:128 --json "$out/w1.json" | tee -a "$out/serve_targets.txt"
echo "== 1b: the same with the 128 clients started over 2 s (--ramp-up 2), 1024 requests" | tee -a "$out/serve_targets.txt"
load --clients 128 --requests 1024 --prompt-tokens 512:512 --max-tokens 128:128 --ramp-up 2 --json "$out/w1b.json" | tee -a "$out/serve_targets.txt"
echo "== 2: 128 clients, 128 prompt, 1024 out, 128 requests" | tee -a "$out/serve_targets.txt"
load --clients 128 --requests 128 --prompt-tokens 128:128 --max-tokens 1024:1024 --json "$out/w2.json" | tee -a "$out/serve_targets.txt"
echo "== 3: 2x overload, 256 clients, 512 prompt, 128 out, 768 requests; RSS before $(rss)" | tee -a "$out/serve_targets.txt"
load --clients 256 --requests 768 --prompt-tokens 512:512 --max-tokens 128:128 --json "$out/w3.json" | tee -a "$out/serve_targets.txt"
echo "RSS after $(rss)" | tee -a "$out/serve_targets.txt"
curl -s http://127.0.0.1:18080/metrics | grep -E "^tessera_(requests_total|kv_blocks_used|preempt)" | tee -a "$out/serve_targets.txt"
kill -TERM $spid; wait $spid; echo "serve exit rc=$?" | tee -a "$out/serve_targets.txt"
