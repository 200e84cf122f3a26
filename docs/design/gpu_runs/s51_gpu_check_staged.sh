#!/usr/bin/env bash
# (Kept for the record: it needs gpu_runs/s51_staged_o_weights.diff applied and runs from bench/cuda/.)
# One device call (session 51): one-row GEMVs with the next norm's epilogue staging their block's
# weights in shared memory before the PDL wait (TESSERA_STAGE_WEIGHTS=1, mmq_gemv.cu kStaged):
# the residual-norm epilogue test both ways, batch-1 decode A/B, a CUPTI trace.
# Pack here: C=build-carry-s51c; tessera (stripped), mmq_gemv_tests (mmq_cuda_test + gemv_cuda_test
# linked into one binary), libkernel_trace.so in $C/bins.tar.xz; a tokenizer GGUF as $C/tok_only.gguf.
set -u
C=${CARRY:-build-carry-s51c}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/bin
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" $C/bins.tar.xz /tmp/bin
cp $C/tok_only.gguf /tmp/bin/
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/summary.txt"
for e in 1 0; do
  TESSERA_O_LATE_TRIGGER=$e TESSERA_STAGE_WEIGHTS=$e timeout 200 /tmp/bin/mmq_gemv_tests --gtest_filter="${FILTER:-MmqMatmul.ResidualNorm*:MmqMatmul.GemvAfter*}" \
    > "$out/tests_stage$e.log" 2>&1
  echo "== tests stage=$e rc=$?" | tee -a "$out/summary.txt"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$out/tests_stage$e.log" | tail -8 | tee -a "$out/summary.txt"
done
bench() {  # type, TESSERA_STAGE_WEIGHTS, round, TESSERA_O_LATE_TRIGGER
  TESSERA_O_LATE_TRIGGER=${4:-0} TESSERA_STAGE_WEIGHTS=$2 /tmp/bin/tessera bench -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b \
    --dummy-type $1 --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 2>&1 |
    grep 'decode, batch 1 (' | sed "s/^/$3 $1 stage=$2 late=${4:-0}: /" | tee -a "$out/summary.txt"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for t in ${TYPES:-q4_0 q8_0 q4_k}; do
    for v in ${VARIANTS:-1,0 0,0}; do bench $t ${v%,*} $r ${v#*,}; done
  done
done
if [ -f /tmp/bin/libkernel_trace.so ]; then
  for e in ${TRACE_MODES:-1,0}; do
    mkdir -p "$out/trace_stage${e/,/_}"
    OUT="$out/trace_stage${e/,/_}" TYPE=${TRACE:-q4_0} TESSERA_BIN=/tmp/bin/tessera KERNEL_TRACE_LIB=/tmp/bin/libkernel_trace.so \
      TESSERA_MODEL=/tmp/bin/tok_only.gguf TESSERA_STAGE_WEIGHTS=${e%,*} TESSERA_O_LATE_TRIGGER=${e#*,} bash "$(dirname "$0")/trace_step.sh" > /dev/null 2>&1 ||
      echo "trace stage=$e failed" | tee -a "$out/summary.txt"
  done
fi
