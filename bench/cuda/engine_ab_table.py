#!/usr/bin/env python3
"""Side-by-side table of tessera bench runs (bench/cuda/engine_env_ab.sh's output).

The input holds runs headed "== <label> <type> round <n>", each followed by the bench's report
table ("| decode, batch 16 (tokens/s) | 4312 | ... |"). Prints one row per (type, result): the mean
value of each label over its rounds and each later label's value as a ratio to the first label's.
"""
import collections
import re
import sys


def parse(text):
    values = collections.defaultdict(lambda: collections.defaultdict(list))
    labels = []
    label = wtype = None
    for line in text.splitlines():
        head = re.match(r"== (\S+) (\S+) round \d+", line)
        if head:
            label, wtype = head.group(1), head.group(2)
            if label not in labels:
                labels.append(label)
            continue
        row = re.match(r"\| (decode, batch [^|]*?|prefill [^|]*?) \| ([0-9.]+) \|", line)
        if label is not None and row:
            values[(wtype, row.group(1))][label].append(float(row.group(2)))
    return labels, values


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: engine_ab_table.py engine_ab.txt")
    labels, values = parse(open(sys.argv[1]).read())
    if not labels:
        sys.exit("engine_ab_table: no runs found")
    base = labels[0]
    print("| type | result | " + " | ".join(labels) + " | " + " | ".join(f"{l} / {base}" for l in labels[1:]) + " |")
    print("|---" * (2 + 2 * len(labels) - 1) + "|")
    for (wtype, result), per in values.items():
        means = [sum(per[l]) / len(per[l]) if per[l] else None for l in labels]
        cells = ["-" if m is None else f"{m:,.0f}" if m >= 100 else f"{m:.3f}" for m in means]
        ratios = [f"{m / means[0]:.3f}" if m is not None and means[0] else "-" for m in means[1:]]
        print(f"| {wtype} | {result} | " + " | ".join(cells + ratios) + " |")


if __name__ == "__main__":
    main()
