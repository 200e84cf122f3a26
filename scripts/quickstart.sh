#!/usr/bin/env bash
# Sets everything up (first run only: packages, build, default model) and streams a chat answer.
# usage: scripts/quickstart.sh ["PROMPT"] [extra tessera run options...]
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(./scripts/setup.sh)
prompt="${1:-Why is the sky blue?}"
shift || true
exec ./build/tessera run -m "$model" --chat -n 256 "$@" "$prompt"
