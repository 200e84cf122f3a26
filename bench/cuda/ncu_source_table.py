#!/usr/bin/env python3
"""Where a kernel's instructions and stalls are, from ncu's per-SASS-instruction source counters.

Input: the CSV of `ncu --section SourceCounters --section WarpStateStats --page source
--print-source sass --csv ...` for one kernel launch (bench/cuda/ncu_source.sh writes it).
Output (markdown):
  - instructions grouped by how often each executed: in a loop kernel the groups are the code
    that runs once per block or warp, once per iteration, on a branch taken by some iterations,
    so each group's share of the executed instructions and of the stall samples says which part
    of the kernel to shorten (session 20 found the narrow attention kernel's copy issue this way:
    223 of its 573 instructions per 16-key chunk);
  - the instructions with the most stall samples, and each one's dominant stall reason.

  python3 bench/cuda/ncu_source_table.py ncu_source.csv [--top 15] [--runs 8]
"""
import argparse
import collections
import csv
import io
import sys


def read_rows(path):
    """The per-instruction rows of the CSV (ncu prints the program's own output above them)."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"Address"')]
    if not starts:
        sys.exit(f"{path}: no source-counter table (expected a header row starting with \"Address\")")
    table = list(csv.reader(io.StringIO("\n".join(lines[starts[0]:]))))
    header, body = table[0], table[1:]
    rows = [dict(zip(header, r)) for r in body if len(r) == len(header) and r[0] != header[0]]  # repeated headers
    if not rows:
        sys.exit(f"{path}: the source-counter table is empty")
    return header, rows


def as_int(text):
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15, help="instructions with the most stall samples to list")
    ap.add_argument("--runs", type=int, default=10, help="execution-count groups to list")
    args = ap.parse_args()
    header, rows = read_rows(args.csv)
    executed = [as_int(r.get("Instructions Executed", "0")) for r in rows]
    samples = [as_int(r.get("Warp Stall Sampling (All Samples)", "0")) for r in rows]
    stall_cols = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    total_ex, total_samples = sum(executed), sum(samples)
    if total_ex == 0:
        sys.exit(f"{args.csv}: no instruction executed")

    groups = collections.defaultdict(lambda: [0, 0])  # executions -> [instructions, samples]
    for e, s in zip(executed, samples):
        if e:
            groups[e][0] += 1
            groups[e][1] += s
    print(f"{len(rows)} SASS instructions, {total_ex:,} warp instructions executed, {total_samples:,} stall samples\n")
    print("| executions each | instructions | executed | % of executed | stall samples | % of samples |")
    print("|---|---|---|---|---|---|")
    ranked = sorted(groups.items(), key=lambda kv: -kv[0] * kv[1][0])
    for e, (n, s) in ranked[: args.runs]:
        share_s = 100 * s / total_samples if total_samples else 0.0
        print(f"| {e:,} | {n} | {e * n:,} | {100 * e * n / total_ex:.1f} | {s:,} | {share_s:.1f} |")
    rest = ranked[args.runs:]
    if rest:
        ex = sum(e * n for e, (n, _) in rest)
        print(f"| (other {len(rest)} counts) | {sum(n for _, (n, _) in rest)} | {ex:,} | {100 * ex / total_ex:.1f} | "
              f"{sum(s for _, (_, s) in rest):,} | |")

    print(f"\nTop {args.top} instructions by stall samples (index in the listing, executions, samples, main reason):\n")
    order = sorted(range(len(rows)), key=lambda i: -samples[i])[: args.top]
    for i in order:
        if samples[i] == 0:
            break
        reasons = sorted(((as_int(rows[i].get(c, "0")), c[len("stall_"):]) for c in stall_cols), reverse=True)
        reason = reasons[0][1] if reasons and reasons[0][0] else "-"
        print(f"{i:6d} {executed[i]:>10,} {samples[i]:>6} {reason:<18} {rows[i].get('Source', '').strip()}")


if __name__ == "__main__":
    main()
