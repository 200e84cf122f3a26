#!/usr/bin/env bash
# One device call (branch wip/s57-tiled-gemv): do row-group-tiled weights (gemv.h: GemvTile; the
# 4 rows of a one-row GEMV warp's step one contiguous span) stream faster? weight_layout_bench (no
# math), the tiled kernels' bit-for-bit tests, then a batch-1 A/B of TESSERA_TILED_GEMV=1 on
# Q4_0 / Q8_0 / Q4_K, and (NCU=1) ncu of layer 0's GEMVs both ways.
# run(command="bash docs/design/gpu_runs/s57_tiled_ab.sh", carry=["build-carry-s57"])
set -u
out=${OUT:-tiled_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_line
start_call build-carry-s57 "$out"
s=$out/summary.txt
ab() {  # ab TYPE...: batch-1 decode, default against TESSERA_TILED_GEMV=1, same binary
  local B=/tmp/bin/tessera t
  for t; do
    TYPES="$t" ROUNDS=${ROUNDS:-2} DONOR=/tmp/bin/tok_only.gguf OUT=$out/ab_$t bash bench/cuda/batch1_env_ab.sh \
      base=$B tiled=$B,TESSERA_TILED_GEMV=1 > /dev/null 2>&1
    cat $out/ab_$t/summary.txt | tee -a $s
  done
}
ab q4_0  # first: the answer that matters most, should the call be cut short
timeout 120 /tmp/bin/weight_layout_bench 2>&1 | tee $out/weight_layout.txt | tee -a $s
ab q8_0
timeout 120 /tmp/bin/gemv_cuda_test --gtest_filter='MmqTiled.*:MmqHalf.*' > $out/gemv.txt 2>&1
gtest_line "MmqTiled + MmqHalf" $out/gemv.txt | tee -a $s
grep -E "Failure|Expected|tiled" $out/gemv.txt | head -20 | tee -a $s
timeout 200 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy.TiledGemv*:LlamaCudaDummy.HalfSwiglu*' > $out/dummy.txt 2>&1
gtest_line "LlamaCudaDummy tiled + half" $out/dummy.txt | tee -a $s
grep -E "Failure|Expected|tiled" $out/dummy.txt | head -20 | tee -a $s
ab q4_k
[ -n "${NCU:-}" ] || exit 0
for v in 0 1; do
  TESSERA_TILED_GEMV=$v KERNEL=mmq_gemv TYPE=q4_0 TESSERA_MODEL=/tmp/bin/tok_only.gguf OUT=$out/ncu_$v COUNT=6 \
    bash bench/cuda/ncu_gemv_traffic.sh > /dev/null 2>&1
  echo "## ncu q4_0, TESSERA_TILED_GEMV=$v" | tee -a $s
  head -8 $out/ncu_$v/ncu_gemv_traffic_q4_0.txt | tee -a $s
done
