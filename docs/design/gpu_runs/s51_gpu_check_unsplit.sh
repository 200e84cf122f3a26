#!/usr/bin/env bash
# (Kept for the record: it needs gpu_runs/s51_half_o_attention.diff applied and runs from bench/cuda/.)
# One device call (session 51): batch-1 attention unsplit, writing o's f16 row itself
# (TESSERA_HALF_O=1: paged_attention<float, HalfPosRow> -> mmq_gemv_half[_residual_norm], no
# merge / quantizer kernel between attention and o), against the default split attention.
# Pack here:
#   C=build-carry-s51; mkdir -p $C /tmp/pk; strip -o /tmp/pk/tessera build/tessera
#   cp build/paged_attention_bench build/libkernel_trace.so /tmp/pk/ (and an optional test binary)
#   tar cf - -C /tmp/pk . | xz -6 -T2 > $C/bins.tar.xz; cp <tokenizer GGUF> $C/tok_only.gguf
# then run(command="bash bench/cuda/gpu_check_unsplit.sh", carry=["build-carry-s51"]).
set -u
C=${CARRY:-build-carry-s51}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/s51
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" $C/bins.tar.xz /tmp/s51
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/summary.txt"
if [ -x /tmp/s51/gpu_tests ]; then
  timeout ${TEST_TIMEOUT:-200} /tmp/s51/gpu_tests --gtest_filter="${FILTER:-*HalfPos*:*HalfO*}" > "$out/tests.log" 2>&1
  echo "== tests rc=$?" | tee -a "$out/summary.txt"
  grep -E "nMSE|^\[  (PASSED|FAILED)|Failure" "$out/tests.log" | tail -30 | tee -a "$out/summary.txt"
fi
for sh in ${SHAPES-4,2 12,2 8,3 6,4}; do
  echo "== attention bench, unsplit shape $sh" >> "$out/attention.txt"
  TESSERA_ATTN_UNSPLIT_SHAPE=$sh timeout 120 /tmp/s51/paged_attention_bench "decode 1 seq x ctx" >> "$out/attention.txt" 2>&1
done
grep -E "==|none" "$out/attention.txt" | tee -a "$out/summary.txt"
bench() {  # type, TESSERA_HALF_O, round, shape
  TESSERA_ATTN_UNSPLIT_SHAPE=$4 TESSERA_HALF_O=$2 /tmp/s51/tessera bench -m $C/tok_only.gguf --device cuda \
    --dummy llama3-8b --dummy-type $1 --decode-ctx ${CTX:-512} --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 2>&1 |
    grep 'decode, batch 1 (' | sed "s/^/$3 $1 half_o=$2 shape=$4: /" | tee -a "$out/summary.txt"
}
# TESSERA_HALF_O: 1 unsplit, 2 split with the last block's merge, 3 split with a merge kernel.
for r in $(seq 1 "${ROUNDS:-2}"); do
  for t in ${TYPES:-q4_0 q8_0}; do for m in ${MODES:-1 0}; do bench $t $m $r 8,3; done; done
done
for sh in ${ENGINE_SHAPES-12,2 6,4}; do bench q4_0 1 s $sh; done
if [ -f /tmp/s51/libkernel_trace.so ]; then
  for t in ${TRACE:-q4_0}; do
    for e in ${TRACE_MODES:-1 0}; do
      mkdir -p "$out/trace_half_o$e"
      OUT="$out/trace_half_o$e" TYPE=$t TESSERA_BIN=/tmp/s51/tessera KERNEL_TRACE_LIB=/tmp/s51/libkernel_trace.so \
        TESSERA_MODEL=$C/tok_only.gguf TESSERA_HALF_O=$e bash "$(dirname "$0")/trace_step.sh" > /dev/null 2>&1 ||
        echo "trace $t half_o=$e failed" | tee -a "$out/summary.txt"
    done
  done
fi
