#!/usr/bin/env python3
"""Session 60's o probe: reads `STAMP q|o ...` lines (globaltimer ns, printf'd by the batch-1
quantizer kernel on attention's partials and by the o GEMV with its residual-norm epilogue under
TESSERA_STAMPS=1) and prints medians, in us, of each kernel's phases and of the hand-overs:
quantizer entry -> its wait's end -> its end; o entry -> wait's end -> first (only) weight step's
dots done in every warp -> epilogue done; o's wait's end after the quantizer's latest end."""
import bisect
import statistics
import sys

q, o = [], []
# (The session's build printed the quantizer's records with a literal "\\n" between them.)
for line in open(sys.argv[1], errors="replace").read().replace("\\n", "\n").splitlines():
    f = line.split()
    if len(f) >= 6 and f[0] == "STAMP" and f[1] == "q":
        q.append(tuple(int(x) for x in f[3:6]))
    elif len(f) >= 7 and f[0] == "STAMP" and f[1] == "o":
        o.append(tuple(int(x) for x in f[3:7]))
if not q or not o:
    sys.exit("no stamps")
q.sort(key=lambda t: t[2])
q_ends = [t[2] for t in q]
med = lambda xs: statistics.median(xs) / 1000.0
print(f"quantizer blocks: {len(q)}; o blocks: {len(o)}")
print(f"quantizer: entry -> wait end {med([t[1] - t[0] for t in q]):.2f} us, wait end -> end {med([t[2] - t[1] for t in q]):.2f} us")
print(f"o: entry -> wait end {med([t[1] - t[0] for t in o]):.2f} us, wait end -> dots done {med([t[2] - t[1] for t in o]):.2f} us, "
      f"dots -> epilogue done {med([t[3] - t[2] for t in o]):.2f} us")
gaps = []
for t in o:
    i = bisect.bisect_right(q_ends, t[1]) - 1  # the latest quantizer end before o's wait ended
    if i >= 0 and t[1] - q_ends[i] < 50000:
        gaps.append(t[1] - q_ends[i])
print(f"o's wait end after the quantizer's latest end: {med(gaps):.2f} us (of {len(gaps)} o blocks)")
qw = sorted(t[1] for t in q)
starts = []
for t in o:
    i = bisect.bisect_right(qw, t[0]) - 1  # the quantizer wait end before o's entry
    if i >= 0 and t[0] - qw[i] < 50000:
        starts.append(t[0] - qw[i])
print(f"o's block entry after the quantizer's wait end (o's launch): {med(starts):.2f} us")
