#!/usr/bin/env bash
# One device call: quantized batched decode, Tessera vs llama.cpp on Llama-3-8B-shaped random
# weights, same GPU, same call; one side-by-side table (peer_quant_batched.md under $OUT).
#   Tessera:   tessera bench --dummy llama3-8b --dummy-type T --decode-ctx 512 --batch $NPL
#              --batch-gen 16 ("decode, batch N": steps that decode all N sequences together)
#   llama.cpp: llama-batched-bench -npp 512 -ntg 16 -npl $NPL -fa on (S_TG, the decode rate
#              of N sequences after their 512-token prompts)
# Inputs: $PEER (default build-carry-peer: llama.tar.xz, gguf-py.tar.gz, packed by
# bench/cuda/peer_pack.sh), $TESSERA_BIN (default /tmp/bin/tessera), $DONOR (a GGUF whose
# tokenizer serves the dummy model; default $PEER/tok_donor.gguf), $TYPES (default q4_0 q8_0),
# $NPL (the sequence counts, default 16,64,128).
set -u
out=${OUT:-peer_out}; mkdir -p "$out" /tmp/bin /tmp/peer
here=$(cd "$(dirname "$0")" && pwd)
P=${PEER:-build-carry-peer}
T=${TESSERA_BIN:-/tmp/bin/tessera}
M=${DONOR:-$P/tok_donor.gguf}
TYPES=${TYPES:-q4_0 q8_0}
NPL=${NPL:-16,64,128}
log=$out/peer_quant_log.txt
note() { echo "== $* ($(date +%T))" | tee -a "$log"; }
if command -v xz > /dev/null; then xz -dc $P/llama.tar.xz | tar xf - -C /tmp/bin
else python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('$P/llama.tar.xz')).extractall('/tmp/bin')"; fi
mkdir -p /tmp/gguf-py && tar xzf $P/gguf-py.tar.gz -C /tmp/gguf-py
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
[ -x "$T" ] || { note "no tessera at $T (set TESSERA_BIN)"; exit 1; }
/tmp/bin/llama-batched-bench --help > /dev/null 2>&1 ||
  { note "llama-batched-bench does not run: $P must hold llama.cpp packed by bench/cuda/peer_pack.sh"; exit 1; }
[ -s "$M" ] || { note "no tokenizer donor GGUF at $M (set DONOR)"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >> "$log"
for ty in $TYPES; do
  note "tessera $ty"
  timeout 200 $T bench -m $M --device cuda --dummy llama3-8b --dummy-type $ty --decode-ctx 512 --decode-tokens 4 \
    --prefill 16 --batch $NPL --batch-gen 16 --out "$out/tessera_quant_$ty.md" >> "$log" 2>&1
  note "llama.cpp $ty"
  PYTHONPATH=/tmp/gguf-py python3 $here/peer_make_gguf.py /tmp/peer/$ty.gguf $ty >> "$log" 2>&1
  timeout 240 /tmp/bin/llama-batched-bench -m /tmp/peer/$ty.gguf -ngl 99 -fa on -c 69632 -b 2048 -ub 512 \
    -npp 512 -ntg 16 -npl $NPL > /tmp/peer/lbb_$ty.txt 2>&1
  grep -E "^\|" /tmp/peer/lbb_$ty.txt >> "$log"
  rm -f /tmp/peer/$ty.gguf
done
python3 - "$out" "$NPL" $TYPES <<'PY'
import re, sys
out, npl, types = sys.argv[1], [int(v) for v in sys.argv[2].split(",")], sys.argv[3:]
lines = ["| Llama-3-8B shape, random weights, 512-token contexts, tokens/s | Tessera | llama.cpp | Tessera advantage |",
         "|---|---|---|---|"]
for ty in types:
    ours = {}
    try:
        for line in open(f"{out}/tessera_quant_{ty}.md"):
            m = re.match(r"\| decode, batch (\d+) \(tokens/s\) \| ([\d.]+) \|", line)
            if m: ours[int(m.group(1))] = float(m.group(2))
    except OSError: pass
    peer = {}
    try:
        for line in open(f"/tmp/peer/lbb_{ty}.txt"):
            c = [v.strip() for v in line.split("|")]
            if len(c) > 9 and c[1] == "512" and c[2] == "16" and c[3].isdigit():
                peer[int(c[3])] = float(c[-4])  # S_TG (columns end T_TG, S_TG, T, S)
    except OSError: pass
    for n in npl:
        a, b = ours.get(n), peer.get(n)
        num = lambda v: f"{v:.0f}" if v else "-"
        lines.append(f"| {ty}, {n} sequences | {num(a)} | {num(b)} | {f'{a / b:.2f}x' if a and b else '-'} |")
n = ",".join(map(str, npl))
lines += ["", f"Tessera: `tessera bench --device cuda --dummy llama3-8b --dummy-type T --decode-ctx 512 --batch {n} "
          f"--batch-gen 16`; llama.cpp: `llama-batched-bench -ngl 99 -fa on -npp 512 -ntg 16 -npl {n}` (S_TG)."]
open(f"{out}/peer_quant_batched.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
