# Sourced by the *_env_ab.sh scripts: make_wrappers "label=binary[,NAME=VALUE...]" ... writes, for
# each argument, an executable named label (in a new temporary directory) that exports those
# variables and runs the binary with its arguments; their paths land in the array `wrappers`.
make_wrappers() {
  local dir spec label rest bin kv
  local -a parts
  dir=$(mktemp -d /tmp/env_variants.XXXX)
  wrappers=()
  for spec in "$@"; do
    label=${spec%%=*}
    rest=${spec#*=}
    IFS=, read -r -a parts <<< "$rest"
    bin=${parts[0]}
    [ -x "$bin" ] || { echo "$(basename "$0"): $bin is not an executable" >&2; return 2; }
    {
      echo '#!/usr/bin/env bash'
      for kv in "${parts[@]:1}"; do printf 'export %q\n' "$kv"; done
      printf 'exec %q "$@"\n' "$bin"
    } > "$dir/$label"
    chmod +x "$dir/$label"
    wrappers+=("$dir/$label")
  done
}
