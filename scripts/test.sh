#!/usr/bin/env bash
# Sets everything up if needed, then runs the whole test suite (C++ tests, fuzz-corpus replay and
# the reference tests against llama.cpp, gguf and jinja2) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
ctest --test-dir build --output-on-failure -j"$(nproc)"
