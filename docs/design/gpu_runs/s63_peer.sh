#!/usr/bin/env bash
# Session 63: main's head against llama.cpp in one table, two chained calls (the carries do not
# fit one call's 64 MiB together):
#   a: run(command="bash docs/design/gpu_runs/s63_peer.sh a", carry=["build-carry-s63"])
#      main's tessera and llama_cuda_test (+ tok_only.gguf) into /tmp/bin; LlamaCudaDummy*.
#   b: run(command="bash docs/design/gpu_runs/s63_peer.sh b", carry=["build-carry-peer"])
#      within 30 s of a (the machine and /tmp/bin stay while warm): bench/cuda/peer_same_call.sh
#      on bf16 / Q8_0 / Q4_0 / Q4_K.
set -u
out=${OUT:-s63_out}
. bench/cuda/gpu_probe.sh  # start_call, gtest_step
case ${1:-} in
  a)
    rm -f /tmp/bin/tessera
    start_call build-carry-s63 "$out"
    gtest_step $out/summary.txt "llama_cuda_test (dummy)" $out/llama.txt \
      timeout 200 /tmp/bin/llama_cuda_test --gtest_filter='LlamaCudaDummy*'
    ;;
  b)
    # peer_same_call.sh says itself when /tmp/bin has no tessera (call a first) and prints the table.
    TOK_DONOR=/tmp/bin/tok_only.gguf TYPES="bf16 q8_0 q4_0 q4_k" OUT=$out \
      bash bench/cuda/peer_same_call.sh > $out/peer_stdout.txt 2>&1
    echo "rc $?"; tail -25 $out/peer_stdout.txt
    ;;
  *) echo "usage: s63_peer.sh a|b"; exit 2 ;;
esac
