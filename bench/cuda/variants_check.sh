#!/usr/bin/env bash
# The device side of variants_pack.sh, in one call: unpacks CARRY/bins.tar.xz into /tmp/variants
# (python's tarfile: the GPU machines have no xz), then
#   1. runs every label's *_test binaries (TEST_FILTER: a gtest filter; TESSERA_TEST_DUMMY etc.
#      pass through) into $OUT/tests_<label>.txt, and with MEMCHECK=1 compute-sanitizer memcheck
#      of the tests in MEMCHECK_FILTER under each variant (not main) into
#      $OUT/memcheck_<label>_<test>.txt;
#   2. dg_env_ab.sh over the labels' mmq_bench (ROWS, TYPES, ROUNDS as there);
#   3. engine_env_ab.sh over the labels' tessera, if packed (ENGINE_LABELS: a space-separated
#      subset, main first; DONOR: CARRY/tok_donor.gguf.xz when there; ENGINE_TYPES, BATCH,
#      ENGINE_ROUNDS);
# and writes $OUT/summary.md: each label's test verdicts, then the two tables. A label whose
# tests fail still gets measured (the summary says it failed). STEPS: which of "tests dg engine"
# to run (default all; e.g. a second call on the warm machine with STEPS=engine ENGINE_LABELS=..).
#   OUT=$OUT bash bench/cuda/variants_check.sh build-carry-variants
set -u -o pipefail
carry=${1:?usage: $0 CARRY_DIR}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-variants_out}; mkdir -p "$out"
dir=${VARIANTS_DIR:-/tmp/variants}
rm -rf "$dir" && mkdir -p "$dir"
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$carry/bins.tar.xz" "$dir" ||
  { echo "variants_check: cannot unpack $carry/bins.tar.xz" >&2; exit 2; }
labels=(main)
for d in "$dir"/*/; do
  l=$(basename "$d"); [ "$l" = main ] || labels+=("$l")
done
[ -d "$dir/main" ] || { echo "variants_check: no main build in the carry" >&2; exit 2; }
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
summary=$out/summary.md
{
  echo "# variants of $(cat "$carry/base_commit" 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null
  echo
  echo "| label | test | result |"
  echo "|---|---|---|"
} > "$summary"
count() {  # gtest's closing count of $1 (PASSED, FAILED, SKIPPED) in log $2, 0 if none
  local n
  n=$(grep -oE "^\[ +$1 +\] [0-9]+ tests?" "$2" | tail -1 | grep -oE '[0-9]+')
  echo "${n:-0}"
}
step() { case " ${STEPS:-tests dg engine} " in *" $1 "*) return 0 ;; esac; return 1; }
run_tests() {  # label: its *_test binaries, one summary row each (and memcheck rows with MEMCHECK=1)
  local t one rc passed verdict mc
  for t in "$dir/$1"/*_test; do
    [ -x "$t" ] || continue
    one=$(mktemp)
    timeout "${TEST_TIMEOUT:-300}" "$t" ${TEST_FILTER:+--gtest_filter="$TEST_FILTER"} > "$one" 2>&1
    rc=$?
    { echo "== $(basename "$t") (rc $rc)"; cat "$one"; } >> "$out/tests_$1.txt"
    passed=$(count PASSED "$one")
    verdict="FAILED (rc $rc)"
    if [ $rc = 0 ]; then verdict=pass; [ "$passed" = 0 ] && verdict="nothing ran"; fi
    echo "| $1 | $(basename "$t") | $verdict: $passed passed, $(count FAILED "$one") failed, $(count SKIPPED "$one") skipped |" >> "$summary"
    rm -f "$one"
    if [ "${MEMCHECK:-0}" = 1 ] && [ "$1" != main ] && command -v compute-sanitizer > /dev/null; then
      mc=$out/memcheck_$1_$(basename "$t").txt
      timeout 300 compute-sanitizer --tool memcheck "$t" --gtest_filter="${MEMCHECK_FILTER:-*}" > "$mc" 2>&1
      echo "| $1 | memcheck $(basename "$t") | $(grep -m1 'ERROR SUMMARY' "$mc" || echo 'no summary') |" >> "$summary"
    fi
  done
}
if step tests; then
  for l in "${labels[@]}"; do run_tests "$l"; done
fi
specs() {  # label=binary for the labels (of $2, default all) that packed $1
  local l
  for l in "${labels[@]}"; do
    case " ${2:-${labels[*]}} " in *" $l "*) [ -x "$dir/$l/$1" ] && echo "$l=$dir/$l/$1" ;; esac
  done
}
mapfile -t mb < <(specs mmq_bench)
if step dg && [ ${#mb[@]} -ge 2 ]; then
  OUT=$out bash "$here/dg_env_ab.sh" "${mb[@]}" > /dev/null
  { echo; echo "## dequant_gemm kernels (us; ratio to main)"; cat "$out/dg_ab.md"; } >> "$summary"
fi
mapfile -t te < <(specs tessera "${ENGINE_LABELS:-}")
if step engine && [ ${#te[@]} -ge 2 ]; then
  donor=${DONOR:-}
  if [ -z "$donor" ] && [ -f "$carry/tok_donor.gguf.xz" ]; then
    donor=/tmp/tok_donor.gguf
    bash "$here/unxz.sh" "$carry/tok_donor.gguf.xz" "$donor"
  fi
  OUT=$out DONOR=${donor:-/tmp/tok_donor.gguf} TYPES=${ENGINE_TYPES:-q4_0 q8_0} ROUNDS=${ENGINE_ROUNDS:-1} \
    bash "$here/engine_env_ab.sh" "${te[@]}" > /dev/null
  { echo; echo "## engine (tessera bench; ratio to main)"; cat "$out/engine_ab.md"; } >> "$summary"
fi
cat "$summary"
