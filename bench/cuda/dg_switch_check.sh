#!/usr/bin/env bash
# One device call for dequant_gemm's measurement switches: from a carry directory of xz'd binaries
# (BASE: the baseline's mmq_bench, CAND: the candidate's, TEST: the candidate's
# dequant_gemm_cuda_test; names without .xz), run the test under every setting in TEST_ENVS
# (";"-separated, each a space-separated list of NAME=VALUE, "-" for none), compute-sanitizer
# memcheck under the last one (the tests in MEMCHECK_FILTER, default the PDL chains), then dg_env_ab.sh over the baseline and the candidate under each
# setting in AB (";"-separated label=NAME=VALUE,... ; label= alone for no variables). Results in
# $OUT: dg_tests.txt, dg_memcheck.txt, dg_ab.txt / dg_ab.md.
#   TEST_ENVS="-;TESSERA_DG_SCALED=0" AB="cand=;rounded=TESSERA_DG_SCALED=0" \
#     bash bench/cuda/dg_switch_check.sh build-carry-dg
set -u -o pipefail
carry=${1:?usage: $0 CARRY_DIR}
out=${OUT:-dg_switch_out}; mkdir -p "$out" /tmp/dgsw
here=$(dirname "$0")
# (The defaults: the candidate as built, no switches. Session 41's switches, TESSERA_DG_PAIR /
# _PIPE / _SK, lived on branches that did not land; patch variants without switches:
# variants_pack.sh / variants_check.sh.)
BASE=${BASE:-mmq_bench_main} CAND=${CAND:-mmq_bench_cand} TEST=${TEST:-dgt_cand}
TEST_ENVS=${TEST_ENVS:-"-"}
AB=${AB:-"cand="}
for b in "$BASE" "$CAND" "$TEST"; do
  bash "$here/unxz.sh" "$carry/$b.xz" "/tmp/dgsw/$b" || { echo "dg_switch_check: no $carry/$b.xz" >&2; exit 2; }
done
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
[ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > "$out/dg_tests.txt" 2>&1
IFS=';' read -r -a envs <<< "$TEST_ENVS"
last=()
for e in "${envs[@]}"; do
  [ "$e" = - ] && e=""
  read -r -a vars <<< "$e"
  echo "== test with: ${e:-(none)}" >> "$out/dg_tests.txt"
  env "${vars[@]}" timeout 240 "/tmp/dgsw/$TEST" >> "$out/dg_tests.txt" 2>&1
  echo "rc=$? (${e:-none})" | tee -a "$out/dg_tests.txt"
  last=("${vars[@]}")
done
if command -v compute-sanitizer > /dev/null; then
  env "${last[@]}" timeout 300 compute-sanitizer --tool memcheck "/tmp/dgsw/$TEST" \
    --gtest_filter="${MEMCHECK_FILTER:-*Pdl*}" > "$out/dg_memcheck.txt" 2>&1
  echo "memcheck rc=$? (${last[*]})" | tee -a "$out/dg_tests.txt"
fi
IFS=';' read -r -a abs <<< "$AB"
variants=("base=/tmp/dgsw/$BASE")
for a in "${abs[@]}"; do
  label=${a%%=*} vars=${a#*=}
  variants+=("$label=/tmp/dgsw/$CAND${vars:+,$vars}")
done
OUT=$out bash "$here/dg_env_ab.sh" "${variants[@]}"
