#!/usr/bin/env python3
"""Side-by-side table of tessera bench runs (bench/cuda/engine_env_ab.sh's output).

The input holds runs headed "== <label> <type> round <n>", each followed by the bench's report
table ("| decode, batch 16 (tokens/s) | 4312 | ... |"). Prints one row per (type, result): the mean
value of each label over its rounds and each later label's value as a ratio to the first label's.
"""
import collections
import re
import sys

from mmq_ab_table import print_ab_table  # (this script's directory is on sys.path)


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
    print_ab_table(["type", "result"], labels, values, lambda m: f"{m:,.0f}" if m >= 100 else f"{m:.3f}")


if __name__ == "__main__":
    main()
