#!/usr/bin/env bash
# Memory traffic of the one-row GEMVs of a batch-1 decode step, by ncu (each launch alone: no PDL
# overlap, clocks not locked): per launch its time, DRAM bytes read, bytes L1 asked of the L2,
# the L1 and L2 hit rates, and the L2 / DRAM throughput as % of peak. Asks whether a GEMV's
# activation reads (the same row for every warp of a block) reach the L2 once per warp.
# On the GPU machine with tessera in /tmp/bin and a tokenizer GGUF:
#   TYPE=q4_0 TESSERA_MODEL=/tmp/bin/tok_only.gguf bash bench/cuda/ncu_gemv_traffic.sh
# KERNEL (regex, default mmq_gemv_kernel), SKIP (launches to skip, default 0), COUNT (default 40).
# Writes $OUT/ncu_gemv_traffic_$TYPE.txt and the CSV, gzipped.
set -u -o pipefail
out=${OUT:-ncu_out}; mkdir -p "$out"
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
N=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$N" ] || { echo "ncu_gemv_traffic: no ncu on this machine" >&2; exit 1; }
T=${TYPE:-q4_0}
csv=/tmp/ncu_gemv_traffic_$T.csv
metrics=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum
metrics=$metrics,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct
metrics=$metrics,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
TESSERA_GEMM_PREPARE=0 timeout 500 "$N" --clock-control none --kernel-name "regex:${KERNEL:-mmq_gemv_kernel}" \
  --launch-skip "${SKIP:-0}" --launch-count "${COUNT:-40}" --metrics "$metrics" --csv --page raw --print-units base \
  ${TESSERA_BIN:-/tmp/bin/tessera} bench -m "${TESSERA_MODEL:-/tmp/m/model.gguf}" --device cuda --dummy llama3-8b \
  --dummy-type "$T" --decode-ctx 64 --decode-tokens 2 --prefill 16 --batch 2 --batch-gen 2 \
  > "$csv" 2> "$out/ncu_gemv_traffic_$T.err" ||
  { echo "ncu_gemv_traffic: ncu failed (rc $?); see $out/ncu_gemv_traffic_$T.err" >&2; tail -5 "$out/ncu_gemv_traffic_$T.err" >&2; exit 1; }
python3 - "$csv" <<'PY' | tee "$out/ncu_gemv_traffic_$T.txt"
import csv, re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
rows = list(csv.reader(lines[start:]))
head = rows[0]  # rows[1]: the units (--print-units base)
col = {h: i for i, h in enumerate(head)}
def num(r, m):
    v = r[col[m]].replace(",", "")
    return float(v) if v not in ("", "n/a") else float("nan")
print("| kernel | grid | block | us | DRAM read MB | L1->L2 read MB | L2 / DRAM | L1 hit % | L2 hit % | L2 % peak | DRAM % peak |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows[2:]:
    name = r[col["Kernel Name"]]
    m = re.search(r"mmq_gemv_kernel<([^>]*)>", name)
    short = m.group(1).replace("tessera::cuda::", "").replace("(anonymous namespace)::", "") if m else name[:60]
    t_ns = num(r, "gpu__time_duration.sum")
    dram = num(r, "dram__bytes_read.sum") / 1e6
    l2 = num(r, "lts__t_sectors_srcunit_tex_op_read.sum") * 32 / 1e6
    print(f"| {short} | {r[col['Grid Size']]} | {r[col['Block Size']]} | {t_ns / 1e3:.2f} | {dram:.2f} | {l2:.2f} | "
          f"{l2 / dram if dram else float('nan'):.2f} | {num(r, 'l1tex__t_sector_hit_rate.pct'):.1f} | "
          f"{num(r, 'lts__t_sector_hit_rate.pct'):.1f} | "
          f"{num(r, 'lts__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} | "
          f"{num(r, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} |")
PY
gzip -c "$csv" > "$out/ncu_gemv_traffic_$T.csv.gz"
