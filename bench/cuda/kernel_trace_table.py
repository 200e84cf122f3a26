#!/usr/bin/env python3
"""Where a decode step's time goes, from a bench/cuda/kernel_trace.cpp trace.

Steps are cut at the embedding gather (gather_kernel, the first kernel of every engine step;
--step-start NAME for another); the steps of the most common shape (the same kernels with the
same grids, e.g. the batch-1 decode steps of `tessera bench`; --steps-with N: the most common
shape of N kernels, e.g. a 128-row decode step, whose kernel count a prefill step can share) are
averaged.
Per kernel: its GPU duration and its *exposed* time, end(k) - max(end of the kernels before it)
(at least 0): what it adds to the step's end. Under programmatic dependent launch a kernel
starts before its predecessor ends, so durations overlap and add up to more than the step; the
exposed times add up to the step exactly. Printed: one layer in order (the middle one), then
totals per kernel name.

usage: kernel_trace_table.py TRACE.csv [--steps-with N] [--step-start KERNEL_NAME]
"""
import collections
import re
import subprocess
import sys

from ncu_step_table import layer_starts


def demangle_all(names):
    """c++filt's demangling where it is installed, else the names as they are."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.split("\n")
        return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short_name(demangled):
    """tessera::cuda::(anonymous namespace)::gemv_kernel<4, Q4_0Fmt, QkvRopeEpi<float> >(...)
    -> gemv_kernel<4,Q4_0Fmt,QkvRopeEpi>: no namespaces, no parameters, nested templates cut."""
    s = demangled.replace("(anonymous namespace)::", "")
    s = (s[5:] if s.startswith("void ") else s).split("(")[0]
    s = re.sub(r"\b[A-Za-z_]\w*::", "", s)
    out, depth = [], 0
    for ch in s:  # keep the outermost template arguments only
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append(ch)
            continue
        if ch == ">":
            depth -= 1
            if depth == 0:
                out.append(ch)
            continue
        if depth <= 1:
            out.append(ch)
    return "".join(out).replace(" ", "")[:70]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    want = int(sys.argv[sys.argv.index("--steps-with") + 1]) if "--steps-with" in sys.argv else None
    start_name = sys.argv[sys.argv.index("--step-start") + 1] if "--step-start" in sys.argv else "gather_kernel"
    raw = []
    for line in open(sys.argv[1]):
        parts = line.rstrip("\n").split(",", 7)
        if len(parts) == 8:
            raw.append(parts)
    if not raw:
        sys.exit(f"kernel_trace_table: no kernel records in {sys.argv[1]}")
    demangled = demangle_all(sorted({p[7] for p in raw}))
    rows = [(int(a), int(b), int(gx), int(gy), int(gz), short_name(demangled[nm]), nm)
            for a, b, _, gx, gy, gz, _, nm in raw]
    rows.sort()
    steps, cur = [], []
    for r in rows:
        # The short name where c++filt demangled it; the mangled name contains it too.
        if (r[5].startswith(start_name) or start_name in r[6]) and cur:
            steps.append(cur)
            cur = []
        cur.append(r)
    if cur:
        steps.append(cur)
    counts = collections.Counter(len(s) for s in steps)
    shape = lambda s: tuple((r[6], r[2], r[3], r[4]) for r in s)  # kernels and grids
    shapes = collections.Counter(shape(s) for s in steps if want is None or len(s) == want)
    top = shapes.most_common(1)[0][0] if shapes else None
    picked = [s for s in steps if shape(s) == top]
    n = len(top) if top else 0
    if len(steps) < 2 or not picked:
        sys.exit(f"kernel_trace_table: no steps to average (cut at {start_name!r}: {len(steps)} "
                 f"step(s){'' if want is None else f' with {want} kernels'}; kernel counts "
                 f"{dict(counts.most_common(6))})")
    if len(picked) <= 3:
        print(f"kernel_trace_table: warning: only {len(picked)} step(s) of the most common shape "
              f"(grids that change from step to step make every step its own shape)", file=sys.stderr)
    # The first of them may include warm-up effects; drop it when there are several.
    if len(picked) > 3:
        picked = picked[1:]
    print(f"{len(steps)} steps in the trace; {len(picked)} of one shape with {n} kernels averaged "
          f"(kernel counts seen: {dict(counts.most_common(6))}; {len(shapes)} shape(s) "
          f"{'in all' if want is None else 'of that count'})")
    dur = [0.0] * n
    exp = [0.0] * n
    gap = [0.0] * n
    total = 0.0
    for s in picked:
        t0 = s[0][0]
        last_end = t0
        prev_end = t0
        for i, r in enumerate(s):
            dur[i] += (r[1] - r[0]) / 1e3
            exp[i] += max(0, r[1] - last_end) / 1e3
            gap[i] += (r[0] - prev_end) / 1e3
            prev_end = r[1]
            last_end = max(last_end, r[1])
        total += (last_end - t0) / 1e3
    k = len(picked)
    dur = [d / k for d in dur]
    exp = [e / k for e in exp]
    gap = [g / k for g in gap]
    names = [f"{r[5]} [{r[2]}x{r[3]}x{r[4]}]" for r in picked[0]]
    # Between steps: from a picked step's last kernel end to the next step's first kernel start
    # (the copies and the host between the two, which no kernel's time shows).
    following = {id(steps[i]): steps[i + 1] for i in range(len(steps) - 1)}
    between = sorted((following[id(s)][0][0] - max(r[1] for r in s)) / 1e3 for s in picked
                     if id(s) in following)
    after = (f"; median {between[len(between) // 2]:.1f} us to the next step's first kernel"
             if between else "")
    print(f"step: {total / k:.1f} us (first kernel's start to the last one's end){after}\n")
    starts = layer_starts(names)  # ncu_step_table's rule
    if len(starts) >= 3:
        mid, end = starts[len(starts) // 2 - 1], starts[len(starts) // 2]
        print(f"one layer (kernels {mid}..{end - 1} of {n}; {len(starts)} layers):")
        print("| kernel [grid] | duration us | exposed us | start - previous end us |")
        print("|---|---|---|---|")
        for i in range(mid, end):
            print(f"| {names[i]} | {dur[i]:.2f} | {exp[i]:.2f} | {gap[i]:+.2f} |")
        print(f"| layer | {sum(dur[mid:end]):.2f} | {sum(exp[mid:end]):.2f} | |\n")
    by = collections.OrderedDict()
    for i, nm in enumerate(names):
        e = by.setdefault(nm, [0, 0.0, 0.0])
        e[0] += 1
        e[1] += dur[i]
        e[2] += exp[i]
    print("per step, by kernel:")
    print("| kernel [grid] | launches | duration us | exposed us | exposed % |")
    print("|---|---|---|---|---|")
    for nm, (c, d, e) in sorted(by.items(), key=lambda kv: -kv[1][2]):
        print(f"| {nm} | {c} | {d:.1f} | {e:.1f} | {100 * e / (total / k):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
