#!/usr/bin/env bash
# dg_ab.sh over variants that differ by binary and / or environment (dequant_gemm's measurement
# switches: TESSERA_DG_PAIR, TESSERA_DG_PIPE, TESSERA_DG_SK, ...). Each argument
# "label=binary[,NAME=VALUE...]" becomes a wrapper script named label that sets those variables
# and runs the binary; dg_ab.sh then runs the wrappers alternately (ROWS, TYPES, ROUNDS as
# there) and prints each one's ratio to the first.
#   bash bench/cuda/dg_env_ab.sh main=/tmp/a/mmq_bench sk=/tmp/b/mmq_bench,TESSERA_DG_SK=1
set -u -o pipefail
[ $# -ge 2 ] || { echo "usage: $0 label=binary[,NAME=VALUE...] label=binary[,...] [...]" >&2; exit 2; }
dir=$(mktemp -d /tmp/dg_env_ab.XXXX)
wrappers=()
for spec in "$@"; do
  label=${spec%%=*}
  rest=${spec#*=}
  IFS=, read -r -a parts <<< "$rest"
  bin=${parts[0]}
  [ -x "$bin" ] || { echo "dg_env_ab: $bin is not an executable" >&2; exit 2; }
  {
    echo '#!/usr/bin/env bash'
    for kv in "${parts[@]:1}"; do printf 'export %q\n' "$kv"; done
    printf 'exec %q "$@"\n' "$bin"
  } > "$dir/$label"
  chmod +x "$dir/$label"
  wrappers+=("$dir/$label")
done
bash "$(dirname "$0")/dg_ab.sh" "${wrappers[@]}"
