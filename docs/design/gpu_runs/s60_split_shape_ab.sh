#!/usr/bin/env bash
# One device call (session 60): at the bench's 513-576 keys a batch-1 decode launch of 8 splits
# rounds each split's range up to 128 keys (whole 64-key units), so 5 of 8 splits hold keys and
# each of their 4 warps takes 2 chunks of 16 keys in series, the second copied after the PDL wait.
# Variants that give every warp one chunk, all copied before the wait: 8 warps per block
# (TESSERA_ATTN_SPLIT_WARPS=8), 6 warps, or 12 / 16 splits of 64 keys
# (TESSERA_ATTN_DECODE_SPLITS; o's quantizer then merges 12-16 partials). Batch-1 A/B on Q8_0,
# Q4_0, Q4_K, then CUPTI traces of Q8_0. (TESSERA_ATTN_DECODE_SPLITS was a knob of this call's build
# only; 8 warps became the rule: TESSERA_ATTN_SPLIT_WARPS=4 gives the earlier blocks.)
# run(command="bash docs/design/gpu_runs/s60_split_shape_ab.sh", carry=["build-carry-s60b"])
set -u
out=${OUT:-split_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line, gtest_step, trace_variants
rm -f /tmp/bin/tessera  # a warm machine's earlier build
start_call build-carry-s60b "$out"
[ -f /tmp/bin/tok_only.gguf ] || cp build-carry-s60b/tok_only.gguf /tmp/bin/
s=$out/summary.txt
B=/tmp/bin/tessera
for t in q8_0 q4_0 q4_k; do
  TYPES="$t" ROUNDS=${ROUNDS:-2} DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab_$t bash bench/cuda/batch1_env_ab.sh \
    base=$B w8=$B,TESSERA_ATTN_SPLIT_WARPS=8 w6=$B,TESSERA_ATTN_SPLIT_WARPS=6 s12=$B,TESSERA_ATTN_DECODE_SPLITS=12 \
    s16=$B,TESSERA_ATTN_DECODE_SPLITS=16 > /dev/null 2>&1
  cat /tmp/ab_$t/summary.txt | tee -a $s
done
trace_variants q8_0 $s base:X=0 w8:TESSERA_ATTN_SPLIT_WARPS=8 s16:TESSERA_ATTN_DECODE_SPLITS=16
