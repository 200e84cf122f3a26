#!/usr/bin/env python3
"""Per-kernel table of the last engine step in an ncu --csv --page raw log.

Usage: ncu_step_table.py LOG.csv [ROWS]
The log holds one gpu__time_duration.sum per launch (bench/cuda/ncu_step.sh). An engine step
ends with the sampling kernel, whose grid has a block per sampled row; ncu lists launches in
the order it profiled them, not always the program's, so a step is picked by its rows: the
last one that samples ROWS rows (default: the most rows of any step); a step that samples
nothing (prefill chunks only) counts with the next one. Prints one layer's launches in order
(from the 3rd to the 4th launch of the first kernel launched once per layer, i.e. as often as
most kernels of the step), then each kernel and grid with its calls, total and mean time, and
the step's sum.
"""
import collections
import csv
import sys


def launches(path):
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    name, grid, block = head.index("Kernel Name"), head.index("Grid Size"), head.index("Block Size")
    t = head.index("gpu__time_duration.sum")
    unit = rows[1][t]
    scales = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}
    if unit not in scales:
        sys.exit(f"ncu_step_table: unknown time unit {unit!r}")
    scale = scales[unit]
    out = []
    for r in rows[2:]:
        if len(r) > t and r[t]:
            out.append((r[name], r[grid], r[block], float(r[t].replace(",", "")) * scale))
    return out


def layer_starts(keys):
    """Where the layers of a step begin: the launches of the first key (kernel, grid) that runs
    once per layer, i.e. as often as most keys launched more than once in the step (the step's
    own kernels, once each, do not count; also used by kernel_trace_table.py)."""
    count = collections.Counter(keys)
    repeated = collections.Counter(v for v in count.values() if v > 1)
    if not repeated:
        return []
    per_layer = repeated.most_common(1)[0][0]
    anchor = next(k for k in keys if count[k] == per_layer)
    return [i for i, k in enumerate(keys) if k == anchor]


def short(kernel):
    return kernel.split("(")[0].replace("void ", "")[:90]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    ks = launches(sys.argv[1])
    ends = [i for i, k in enumerate(ks) if "sample_kernel" in k[0]]
    if len(ends) < 2:
        sys.exit("ncu_step_table: fewer than two engine steps in the log")

    def rows(i):  # sampled rows of the step ending at launch i: the grid's x
        return int(ks[i][1].strip("()").split(",")[0])

    want = int(sys.argv[2]) if len(sys.argv) == 3 else max(rows(i) for i in ends[1:])
    last = [j for j in range(1, len(ends)) if rows(ends[j]) == want]
    if not last:
        sys.exit(f"ncu_step_table: no step samples {want} rows")
    j = last[-1]
    step = ks[ends[j - 1] + 1 : ends[j] + 1]
    print(f"Step sampling {want} rows (step {j} of {len(ends)} in the log)")
    at = layer_starts([(short(k[0]), k[1]) for k in step])
    if len(at) >= 4:
        print("One layer, in order (us, grid, block, kernel):")
        for k in step[at[2] : at[3]]:
            print(f"{k[3]:9.2f} {k[1]:>14} {k[2]:>12}  {short(k[0])}")
        print()
    agg = collections.OrderedDict()
    for k in step:
        key = (short(k[0]), k[1])
        agg.setdefault(key, [0, 0.0])
        agg[key][0] += 1
        agg[key][1] += k[3]
    total = sum(v[1] for v in agg.values())
    print(f"The step: {len(step)} launches, sum {total / 1000:.3f} ms")
    print(f"{'total us':>10} {'calls':>5} {'us/call':>8}  kernel [grid]")
    for (kernel, grid), (calls, us) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"{us:10.1f} {calls:5d} {us / calls:8.2f}  {kernel} {grid}")


if __name__ == "__main__":
    main()
