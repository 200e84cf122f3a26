#!/usr/bin/env python3
"""Side-by-side table of mmq_bench --dequant-gemm runs (bench/cuda/dg_ab.sh's output).

The input holds runs headed "== <label> round <n>", each followed by mmq_bench's markdown table.
Prints one row per (type, shape, rows): the mean dequant_gemm time of each label over its rounds,
and each later label's time as a ratio to the first label's (< 1: faster).
"""
import collections
import re
import sys


def parse(text):
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    labels = []
    label = None
    for line in text.splitlines():
        head = re.match(r"== (\S+) round \d+", line)
        if head:
            label = head.group(1)
            if label not in labels:
                labels.append(label)
            continue
        if label is None or not line.startswith("| Q"):
            continue
        # The shape name "gate|up" holds the table's separator.
        cells = [c.strip() for c in line.replace("gate|up", "gate+up").strip("|").split("|")]
        if len(cells) < 5:
            continue
        key = (cells[0], cells[1].split()[0].replace("gate+up", "gate|up"), int(cells[2]))
        times[key][label].append(float(cells[4]))
    return labels, times


def print_ab_table(key_names, labels, values, cell, label_suffix=""):
    """One markdown row per key of values ({key tuple: {label: [numbers]}}): each label's mean
    (cell(mean), "-" where it has none), then each later label's mean as a ratio to the first's."""
    base = labels[0]
    print("| " + " | ".join(key_names) + " | " + " | ".join(f"{l}{label_suffix}" for l in labels) + " | " +
          " | ".join(f"{l} / {base}" for l in labels[1:]) + " |")
    print("|---" * (len(key_names) + 2 * len(labels) - 1) + "|")
    for key, per in values.items():
        means = [sum(per[l]) / len(per[l]) if per[l] else None for l in labels]
        cells = [cell(m) if m is not None else "-" for m in means]
        ratios = [f"{m / means[0]:.3f}" if m is not None and means[0] else "-" for m in means[1:]]
        print("| " + " | ".join(str(k) for k in key) + " | " + " | ".join(cells + ratios) + " |")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mmq_ab_table.py dg_ab.txt")
    labels, times = parse(open(sys.argv[1]).read())
    if not labels:
        sys.exit("mmq_ab_table: no runs found")
    print_ab_table(["type", "shape", "rows"], labels, times, lambda m: f"{m:.2f}", " us")


if __name__ == "__main__":
    main()
