# Sourced by the one-call GPU scripts (bench/cuda/gpu_run.sh, docs/design/gpu_runs/*.sh), run
# from the repository root on the GPU machine, which has no package manager (maybe no xz).
#   unxz_tar FILE DIR      a carried .tar.xz unpacked into DIR (python's lzma where xz is missing;
#                          concatenated archives too)
#   use_device_cublaslt    the machine's libcublasLt.so.13 directory put on LD_LIBRARY_PATH
#   gpu_clocks FILE        the GPU's name and clocks, printed and appended to FILE
#   gtest_line LABEL LOG   "LABEL: " and the PASSED / FAILED lines of a googletest log
#   start_call CARRY OUT   a one-call script's opening: OUT and /tmp/bin made, CARRY/bins.tar.xz
#                          unpacked into /tmp/bin (unless a warm machine has it already), the
#                          device's cuBLASLt on the library path, the clocks into OUT/summary.txt
#   gtest_step SUM LABEL LOG CMD...
#                          a googletest command's output into LOG (its rc appended), then LABEL's
#                          PASSED / FAILED line and the first failure lines into SUM
#   ab_report AB SUM OUT   batch1_env_ab.sh's output folder AB: its summary and each trace's
#                          table head into SUM, the traces copied to OUT/trace_TYPE_LABEL.txt
#   trace_variants TYPE SUM LABEL:NAME=VALUE[,NAME=VALUE...] ...
#                          per variant a CUPTI trace of TYPE's batch-1 decode steps
#                          (trace_step.sh, /tmp/bin's tessera and tok_only.gguf), its table's
#                          head into SUM
unxz_tar() {
  if command -v xz > /dev/null; then xz -dc "$1" | tar xif - -C "$2"
  else python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1]), ignore_zeros=True).extractall(sys.argv[2])" "$1" "$2"; fi
}
use_device_cublaslt() {
  local lt
  lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
  if [ -n "$lt" ]; then export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}; fi
}
gpu_clocks() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$1"
}
gtest_line() {
  echo "$1: $(grep -E '^\[  (PASSED|FAILED)' "$2" | tr '\n' ' ')"
}
start_call() {
  mkdir -p "$2" /tmp/bin
  [ -x /tmp/bin/tessera ] || unxz_tar "$1/bins.tar.xz" /tmp/bin
  use_device_cublaslt
  gpu_clocks "$2/summary.txt"
}
gtest_step() {
  local sum=$1 label=$2 log=$3
  shift 3
  "$@" > "$log" 2>&1
  echo "rc $?" >> "$log"
  gtest_line "$label" "$log" | tee -a "$sum"
  grep -E "Failure|Expected|which is|rc " "$log" | head -20 | tee -a "$sum"
}
ab_report() {
  local ab=$1 sum=$2 out=$3 t
  tee -a "$sum" < "$ab/summary.txt"
  for t in "$ab"/trace_*; do
    [ -d "$t" ] || continue
    echo "## $(cat "$t/variant.txt")" | tee -a "$sum"
    head -14 "$t"/trace_step_*.txt | tee -a "$sum"
    cp "$t"/trace_step_*.txt "$out/trace_$(tr ':' '_' < "$t/variant.txt").txt"
  done
}
trace_variants() {
  local type=$1 sum=$2 v
  shift 2
  for v in "$@"; do
    env $(echo "${v#*:}" | tr ',' ' ') OUT="/tmp/trace_${v%%:*}" TYPE="$type" TESSERA_MODEL=/tmp/bin/tok_only.gguf \
      bash bench/cuda/trace_step.sh > /dev/null 2>&1 || echo "trace $v failed" | tee -a "$sum"
    echo "## trace $type $v" | tee -a "$sum"
    head -14 "/tmp/trace_${v%%:*}/trace_step_$type.txt" | tee -a "$sum"
  done
}
