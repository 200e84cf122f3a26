#!/usr/bin/env bash
# NOT RUN, and not to be run (session 63): this is session 33's TESSERA_FORMED_INPUT=attention
# again, measured then at Q4_0 1.65 -> 1.77 ms, Q8_0 2.37 -> 2.80 (cuda_engine_history.md, "Session 33").
# One device call (prepared in session 62, not run: no machine came): TESSERA_O_MERGE=1 (branch
# wip/s62-o-merge, diff gpu_runs/s62_o_merge.diff): at batch 1 the o GEMV
# (legacy weight types) merges and quantizes attention's left partials itself, each block into
# its shared memory (the quantizer kernel's code and thread mapping, so the same bits), and no
# quantizer kernel runs between attention and o. Checks: the greedy text of dummy Llama-3-8B
# weights with and without it (tessera run, 48 tokens, Q4_0 / Q8_0: the same bits give the same
# text), llama_cuda_test's dummy-weight tests under it; then a same-binary batch-1 A/B, 3 rounds,
# and traces.
# The carry: build-carry-s62m/bins.tar.xz holding the branch build's tessera and llama_cuda_test,
# tok_only.gguf and libkernel_trace.so (tar, xz -6 --lzma2=dict=192MiB; ~37 MB).
#   run(command="bash docs/design/gpu_runs/s62_o_merge.sh", carry=["build-carry-s62m"])
set -u
out=${OUT:-s62m_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_step, ab_report
start_call build-carry-s62m "$out"
s=$out/summary.txt
for t in q4_0 q8_0; do
  for v in 0 1; do
    TESSERA_O_MERGE=$v timeout 120 /tmp/bin/tessera run -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b \
      --dummy-type $t -n 48 "The capital of France is" > $out/run_${t}_$v.txt 2> $out/run_${t}_$v.err
    echo "run $t O_MERGE=$v rc $? sha $(sha256sum < $out/run_${t}_$v.txt | cut -c1-16)" | tee -a $s
  done
  cmp -s $out/run_${t}_0.txt $out/run_${t}_1.txt && echo "$t: same text" | tee -a $s || echo "$t: TEXT DIFFERS" | tee -a $s
done
gtest_step $s "llama_cuda_test (dummy) O_MERGE=1" $out/llama.txt \
  env TESSERA_O_MERGE=1 timeout 200 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy*'
TYPES="q4_0 q8_0" ROUNDS=3 DONOR=/tmp/bin/tok_only.gguf OUT=/tmp/ab TRACES="q4_0:merge q8_0:merge q8_0:base" \
  bash bench/cuda/batch1_env_ab.sh base=/tmp/bin/tessera merge=/tmp/bin/tessera,TESSERA_O_MERGE=1 > /dev/null 2>&1
ab_report /tmp/ab $s "$out"
