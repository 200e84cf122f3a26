#!/usr/bin/env bash
# (Kept for the record: it needs gpu_runs/s52_gu_tail_l2.diff applied.)
# One device call (session 52): the last pct % of each one-row SwiGLU gate|up's rows asked of the
# L2 from a side stream (TESSERA_GU_TAIL_PCT, _LAST, _AT; branch exp/s52-gu-tail-l2), batch-1
# decode A/B against 0 in the same call.
# Pack here: C=build-carry-s52; tessera stripped as tessera_s52 in $C/bins.tar.xz; $C/tok_only.gguf.
set -u
C=${CARRY:-build-carry-s52}
out=${OUT:-gpu_out}; mkdir -p "$out" /tmp/bin
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" $C/bins.tar.xz /tmp/bin
cp $C/tok_only.gguf /tmp/bin/
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/summary.txt"
bench() {  # type, round, then VAR=value settings
  local t=$1 r=$2; shift 2
  env "$@" /tmp/bin/tessera_s52 bench -m /tmp/bin/tok_only.gguf --device cuda --dummy llama3-8b \
    --dummy-type $t --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 > /tmp/bin/b.log 2>&1
  echo "$r $t $*: $(grep 'decode, batch 1 (' /tmp/bin/b.log || tail -2 /tmp/bin/b.log)" | tee -a "$out/summary.txt"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for t in ${TYPES:-q4_0 q8_0}; do
    for v in ${VARIANTS:-"P=0" "P=10" "P=20" "P=30" "P=20 L=1" "P=30 L=1" "P=20 A=attn" "P=20 A=attn L=1"}; do
      set -- $v; args=()
      for kv in "$@"; do
        case ${kv%%=*} in P) args+=(TESSERA_GU_TAIL_PCT=${kv#*=});; L) args+=(TESSERA_GU_TAIL_LAST=${kv#*=});;
          A) args+=(TESSERA_GU_TAIL_AT=${kv#*=});; C) args+=(TESSERA_GU_TAIL_CHUNK=${kv#*=});; B) args+=(TESSERA_GU_TAIL_BLOCKS=${kv#*=});; esac
      done
      bench $t $r "${args[@]}"
    done
  done
done
# Traces (TRACES="q4_0,0 q4_0,20"): the step's per-kernel exposed times with and without the tail.
for tv in ${TRACES:-}; do
  mkdir -p "$out/trace_${tv/,/_}"
  OUT="$out/trace_${tv/,/_}" TYPE=${tv%,*} TESSERA_BIN=/tmp/bin/tessera_s52 KERNEL_TRACE_LIB=/tmp/bin/libkernel_trace.so \
    TESSERA_MODEL=/tmp/bin/tok_only.gguf TESSERA_GU_TAIL_PCT=${tv#*,} bash bench/cuda/trace_step.sh > /dev/null 2>&1 ||
    echo "trace $tv failed" | tee -a "$out/summary.txt"
done
