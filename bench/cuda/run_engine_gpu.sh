#!/usr/bin/env bash
# One device-machine call for the batched GPU engine: every CUDA test
# (+ memcheck), the paged-attention microbenchmark, `tessera bench` on dummy Llama-3-8B bf16
# weights, and `tessera serve` on the same weights under bench/serve_load.py.
# Prebuilt binaries in $BIN (default build-carry); the default model (for the model tests and
# the tokenizer) at $TESSERA_MODEL; logs in $OUT.
set -u
out=${OUT:-gpu_out}; mkdir -p "$out"
bin=${BIN:-build-carry}
if ! ldd $bin/tessera | grep -q 'libcublasLt.so.*=> /'; then
  d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
status=0
for t in ${TESTS:-backend_cuda_test row_ops_cuda_test rms_norm_cuda_test act_quant_cuda_test gemv_cuda_test decode_attention_cuda_test decode_kernels_cuda_test paged_attention_cuda_test mmq_cuda_test sample_cuda_test llama_decode_cuda_test llama_cuda_test llama_cuda_quant_test engine_sample_cuda_test}; do
  ./$bin/$t --gtest_brief=0 >"$out/$t.log" 2>&1; rc=$?
  echo "$t rc=$rc" | tee -a "$out/summary.txt"; [ $rc -eq 0 ] || status=1
  grep -E "GPU vs CPU|follows|greedy agreement|FAILED|Failure|Expected|Which|actual" "$out/$t.log" | head -30
done
compute-sanitizer --tool memcheck --error-exitcode 9 ./$bin/paged_attention_cuda_test --gtest_brief=1 \
  >"$out/memcheck.log" 2>&1; echo "memcheck paged_attention rc=$?" | tee -a "$out/summary.txt"
[ -n "${SKIP_MODEL_MEMCHECK:-}" ] || compute-sanitizer --tool memcheck --error-exitcode 9 ./$bin/llama_cuda_test --gtest_brief=1 \
  --gtest_filter='*Dummy*:*SequenceInABatch*' >>"$out/memcheck.log" 2>&1
echo "memcheck llama_cuda rc=$?" | tee -a "$out/summary.txt"
./$bin/paged_attention_bench 2>&1 | tee "$out/paged_attention_bench.txt"
M=${TESSERA_MODEL}
timeout 300 ./$bin/tessera bench -m "$M" --device cuda --dummy llama3-8b --prefill 512,2048 \
  --batch 16,64,128 --batch-gen 32 --decode-tokens 64 --out "$out/bench_llama3_8b.md" 2>&1 | tail -20
echo "bench rc=${PIPESTATUS[0]}" | tee -a "$out/summary.txt"
# Serving: 128 closed-loop clients, ~512-token prompts, 128 output tokens, greedy.
./$bin/tessera serve -m "$M" --device cuda --dummy llama3-8b --port 18080 --ctx 1024 \
  --max-running 128 --max-queue 256 --kv-cache-tokens 131072 --max-step-tokens 2048 \
  2>"$out/serve.log" &
spid=$!
for i in $(seq 1 120); do grep -q listening "$out/serve.log" && break; sleep 1; done
timeout 240 python3 bench/serve_load.py --url http://127.0.0.1:18080 --clients 128 --requests 384 \
  --prompt-tokens 512:512 --max-tokens 128:128 --ignore-eos --json "$out/serve_load.json" 2>&1 | tail -16
echo "serve_load rc=${PIPESTATUS[0]}" | tee -a "$out/summary.txt"
curl -s http://127.0.0.1:18080/metrics | grep -E "^tessera_(preempt|kv_blocks|requests_total)" | tee "$out/metrics.txt"
kill -TERM $spid; wait $spid; echo "serve exit rc=$?" | tee -a "$out/summary.txt"
cat "$out/summary.txt"
exit $status
