#!/usr/bin/env bash
# dg_ab.sh over variants that differ by binary and / or environment (dequant_gemm's measurement
# switches: TESSERA_DG_PAIR, TESSERA_DG_PIPE, TESSERA_DG_SK, ...). Each argument
# "label=binary[,NAME=VALUE...]" becomes a wrapper named label that sets those variables and runs
# the binary (env_variants.sh); dg_ab.sh then runs the wrappers alternately (ROWS, TYPES, ROUNDS
# as there) and prints each one's ratio to the first.
#   bash bench/cuda/dg_env_ab.sh main=/tmp/a/mmq_bench sk=/tmp/b/mmq_bench,TESSERA_DG_SK=1
set -u -o pipefail
[ $# -ge 2 ] || { echo "usage: $0 label=binary[,NAME=VALUE...] label=binary[,...] [...]" >&2; exit 2; }
here=$(dirname "$0")
. "$here/env_variants.sh"
make_wrappers "$@" || exit 2
bash "$here/dg_ab.sh" "${wrappers[@]}"
