#!/usr/bin/env bash
# One device call: Tessera and llama.cpp on Llama-3-8B-shaped random weights, same GPU, same call,
# one side-by-side table (peer_same_call.md under $OUT):
#   batch-1 decode at a 512-token context, bf16 / q8_0 / q4_0 ($TYPES)
#       (tessera bench --decode-ctx 512 | llama-bench tg64 -d 512, each on its own weights type);
#   prefill 512 / 2048, every type in $TYPES (tessera bench | llama-bench pp);
#   batched decode, 128 sequences at 512-token contexts, bf16 (tessera bench | S_TG of
#       llama-batched-bench -npp 512 -ntg 128 -npl 128);
#   128 x (512 prompt + 128 generated), total tokens/s (tessera serve under bench/serve_load.py,
#       128 closed-loop HTTP clients, 512-token token-id prompts, started at once and started over
#       2 s | S of llama-batched-bench).
# Inputs: build-carry-peer (bench/cuda/peer_pack.sh: llama.tar.xz = llama-bench +
# llama-batched-bench built for sm_90a; gguf-py.tar.gz = llama.cpp's gguf package, for the peer's
# GGUFs; tok_donor.gguf.xz = a GGUF whose tokenizer serves the dummy model, or $TOK_DONOR: any GGUF
# with a tokenizer already on the machine), and tessera: $TESSERA_BIN, default /tmp/bin/tessera
# (which `bench/cuda/gpu_run.sh a` unpacked in a call before).
set -u
out=${OUT:-peer_out}; mkdir -p "$out" /tmp/bin /tmp/peer
here=$(cd "$(dirname "$0")" && pwd)
if command -v xz > /dev/null; then xz -dc build-carry-peer/llama.tar.xz | tar xf - -C /tmp/bin
else python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('build-carry-peer/llama.tar.xz')).extractall('/tmp/bin')"; fi
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
log=$out/peer_log.txt
note() { echo "== $* ($(date +%T))" | tee -a "$log"; }
L=/tmp/bin
T=${TESSERA_BIN:-/tmp/bin/tessera}
if [ ! -x "$T" ]; then
  note "no tessera at $T: run bench/cuda/gpu_run.sh a first (or set TESSERA_BIN)"
  exit 1
fi
if ! $L/llama-bench --help > /dev/null 2>&1; then
  note "llama-bench does not run: build-carry-peer/ must hold llama.cpp packed by bench/cuda/peer_pack.sh"
  exit 1
fi
mkdir -p /tmp/gguf-py && tar xzf build-carry-peer/gguf-py.tar.gz -C /tmp/gguf-py
M=${TOK_DONOR:-/tmp/peer/tok_donor.gguf}
if [ -z "${TOK_DONOR:-}" ] && [ ! -s "$M" ]; then  # gpu_pack.sh carries it xz'd
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
    build-carry-peer/tok_donor.gguf.xz "$M"
fi
TYPES=${TYPES:-bf16 q8_0 q4_0}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >> "$log"

# Tessera: the engine bench per weights type (batch-1 at a 512-token context; bf16 also prefill
# and 128 sequences), then the serving workload.
for ty in $TYPES; do
  note "tessera bench $ty"
  if [ "$ty" = bf16 ]; then extra="--prefill 512,2048 --batch 128 --batch-gen 128"; else extra="--prefill 512,2048 --batch 2 --batch-gen 2"; fi
  timeout 150 $T bench -m $M --device cuda --dummy llama3-8b --dummy-type $ty --decode-ctx 512 \
    --decode-tokens 64 $extra --out "$out/tessera_bench_$ty.md" >> "$log" 2>&1
done
note "tessera serve, 128 clients x (512 + 128)"
$T serve -m $M --device cuda --dummy llama3-8b --port 18080 --ctx 2048 --max-running 128 \
  --max-queue 128 --kv-cache-tokens 262144 --max-step-tokens 2048 2> /tmp/peer/serve.log &
spid=$!
for i in $(seq 1 120); do grep -q listening /tmp/peer/serve.log && break; sleep 1; done
timeout 150 python3 $here/../serve_load.py --url http://127.0.0.1:18080 --ignore-eos --token-ids --clients 128 \
  --requests 1024 --prompt-tokens 512:512 --max-tokens 128:128 --json "$out/tessera_serve.json" >> "$log" 2>&1
note "the same, clients started over 2 s"
timeout 150 python3 $here/../serve_load.py --url http://127.0.0.1:18080 --ignore-eos --token-ids --clients 128 \
  --requests 1024 --prompt-tokens 512:512 --max-tokens 128:128 --ramp-up 2 \
  --json "$out/tessera_serve_ramped.json" >> "$log" 2>&1
kill -TERM $spid; wait $spid

# llama.cpp on GGUFs of the same shape and types (random weights; -fa 1: flash attention).
for ty in $TYPES; do
  note "llama.cpp $ty"
  PYTHONPATH=/tmp/gguf-py python3 $here/peer_make_gguf.py /tmp/peer/$ty.gguf $ty >> "$log" 2>&1
  $L/llama-bench -m /tmp/peer/$ty.gguf -ngl 99 -fa 1 -p 0 -n 64 -d 512 -r 3 -o json > /tmp/peer/tg_$ty.json 2>> "$log"
  $L/llama-bench -m /tmp/peer/$ty.gguf -ngl 99 -fa 1 -p 512,2048 -n 0 -r 3 -o json > /tmp/peer/pp_$ty.json 2>> "$log"
  if [ "$ty" = bf16 ]; then
    timeout 150 $L/llama-batched-bench -m /tmp/peer/$ty.gguf -ngl 99 -fa on -c 83968 -b 2048 -ub 512 \
      -npp 512 -ntg 128 -npl 128 > /tmp/peer/lbb.txt 2>&1
    tail -6 /tmp/peer/lbb.txt >> "$log"
  fi
  rm -f /tmp/peer/$ty.gguf
done

python3 - "$out" $TYPES <<'PY'
import json, re, sys
out, types = sys.argv[1], sys.argv[2:]
def load(p):
    try: return json.load(open(p))
    except Exception: return None
def bench(ty):  # tessera bench rows: name -> value
    rows = {}
    try:
        for line in open(f"{out}/tessera_bench_{ty}.md"):
            m = re.match(r"\| (.+?) \| ([\d.]+) \|", line)
            if m: rows[m.group(1)] = float(m.group(2))
    except OSError: pass
    return rows
def tg(ty):
    r = [x["avg_ts"] for x in (load(f"/tmp/peer/tg_{ty}.json") or []) if x.get("n_gen", 0) > 0]
    return 1e3 / r[0] if r else None
def pp(ty):  # prompt length -> llama-bench tokens/s
    return {x["n_prompt"]: x["avg_ts"] for x in (load(f"/tmp/peer/pp_{ty}.json") or []) if x.get("n_gen", 1) == 0}
s = s_tg = None
try:
    for line in open("/tmp/peer/lbb.txt"):
        c = [v.strip() for v in line.split("|")]
        if len(c) > 9 and c[1] == "512" and c[2] == "128" and c[3] == "128":
            s_tg, s = float(c[-4]), float(c[-2])  # S_TG t/s, S t/s (columns end T_TG, S_TG, T, S)
except OSError: pass
serve = load(f"{out}/tessera_serve.json") or {}
ramped = load(f"{out}/tessera_serve_ramped.json") or {}
b16 = bench("bf16")
fmt = lambda v, f: (f % v) if v else "-"
rows = []
for ty in types:
    rows.append((f"batch-1 decode at 512 context, {ty}, ms/token (lower is better)",
                 bench(ty).get("decode, batch 1 (ms/token)"), tg(ty), "%.3f", True))
for ty in types:
    for n in (512, 2048):
        rows.append((f"prefill {n}, {ty}, tokens/s", bench(ty).get(f"prefill {n} (tokens/s)"), pp(ty).get(n), "%.0f", False))
rows += [("decode 128 sequences at 512 context, bf16, tokens/s", b16.get("decode, batch 128 (tokens/s)"), s_tg, "%.0f", False),
         ("128 x (512 + 128), bf16, total tokens/s", serve.get("total_tokens_per_s"), s, "%.0f", False),
         ("the same, clients started over 2 s, total tokens/s", ramped.get("total_tokens_per_s"), s, "%.0f", False)]
lines = ["| Llama-3-8B shape, random weights, one GPU, one call | Tessera | llama.cpp | Tessera advantage |",
         "|---|---|---|---|"]
for name, ours, peer, f, lower in rows:
    ratio = (peer / ours if lower else ours / peer) if ours and peer else None
    lines.append(f"| {name} | {fmt(ours, f)} | {fmt(peer, f)} | {fmt(ratio, '%.2fx')} |")
lines += ["", "Tessera: `tessera bench --device cuda --dummy llama3-8b --dummy-type T --decode-ctx 512` "
          "(engine, CUDA graphs); serving: `tessera serve` + bench/serve_load.py (128 closed-loop HTTP "
          f"streaming clients, 1024 requests; TTFT p99 {serve.get('ttft_ms_p99', '-')} ms, started over 2 s "
          f"{ramped.get('ttft_ms_p99', '-')} ms). llama.cpp: "
          "llama-bench -ngl 99 -fa 1 (tg64 at depth 512; pp 512/2048 at depth 0), llama-batched-bench -npp 512 "
          "-ntg 128 -npl 128 -fa on (S_TG, S)."]
open(f"{out}/peer_same_call.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
