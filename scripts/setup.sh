#!/usr/bin/env bash
# Installs everything Tessera needs on Debian 12 (system packages, a Python venv with the
# reference packages), builds the project and fetches the default model. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "[setup] error: run as root or install sudo (system packages are needed)" >&2
    exit 1
  fi
  SUDO="sudo"
fi

need_apt=0
for pkg in build-essential cmake pkg-config libpcre2-dev libgtest-dev libboost1.74-dev nlohmann-json3-dev python3 python3-venv python3-dev git; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt=1
done
if [ "$need_apt" = 1 ]; then
  echo "[setup] installing system packages" >&2
  $SUDO apt-get update -qq >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    build-essential cmake pkg-config libpcre2-dev libgtest-dev libboost1.74-dev nlohmann-json3-dev python3 python3-venv python3-dev git >&2
fi

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating Python venv in .venv" >&2
  python3 -m venv .venv
fi
# PyTorch (for transformers, the reference of the Hugging Face checkpoint tests): the CPU-only
# build from PyTorch's own index where that index is reachable (~200 MB), else the PyPI build
# (which pulls the CUDA libraries, several GB, but is the only one a PyPI-only machine can get).
# Installed before requirements.txt so its torch pin is already satisfied.
TORCH_VERSION="$(sed -n 's/^torch==//p' requirements.txt)"
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "[setup] installing PyTorch ${TORCH_VERSION}" >&2
  .venv/bin/python -m pip install -q --upgrade pip >&2
  if ! .venv/bin/python -m pip install -q --retries 0 --timeout 15 \
      --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}" >&2 2>/dev/null; then
    echo "[setup] PyTorch CPU index not reachable; installing torch from PyPI" >&2
    # The PyPI build and its CUDA libraries take ~6 GB installed (more while pip unpacks); say so
    # plainly rather than fail half-way with ENOSPC. No wheel cache: it would double the footprint.
    free_kb="$(df -Pk .venv | awk 'NR==2 {print $4}')"
    if [ "${free_kb:-0}" -lt $((8 * 1024 * 1024)) ]; then
      echo "[setup] error: PyTorch from PyPI needs ~8 GB free where .venv lives; $((free_kb / 1024)) MB free" >&2
      exit 1
    fi
    .venv/bin/python -m pip install -q --no-cache-dir "torch==${TORCH_VERSION}" >&2
  fi
fi
if ! .venv/bin/python -c "import gguf, numpy, pytest, jinja2, sentencepiece, llama_cpp, tokenizers, safetensors, transformers" 2>/dev/null; then
  echo "[setup] installing Python packages (llama-cpp-python compiles llama.cpp: several minutes)" >&2
  .venv/bin/python -m pip install -q --upgrade pip >&2
  # llama-cpp-python builds llama.cpp for this CPU (-march=native), but without its AMX kernels:
  # on AMX machines (Sapphire Rapids and later) its AMX matrix product crashes evaluating the
  # default model (ggml_backend_amx_mul_mat, llama-cpp-python 0.3.36). GCC's explicit -mno-amx-*
  # flags win over -march=native. Built here, not taken from pip's wheel cache (whose key
  # ignores CMAKE_ARGS).
  if [ "$(uname -m)" = x86_64 ]; then
    LLAMA_CPP_REQ="$(grep '^llama-cpp-python==' requirements.txt)"
    NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    CMAKE_ARGS="-DCMAKE_C_FLAGS='$NO_AMX' -DCMAKE_CXX_FLAGS='$NO_AMX' ${CMAKE_ARGS:-}" \
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip install -q --no-cache-dir "$LLAMA_CPP_REQ" >&2
  fi
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip install -q -r requirements.txt >&2
fi

echo "[setup] building" >&2
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PWD/.venv/bin/python" >&2
cmake --build build -j"$(nproc)" >&2

echo "[setup] fetching the default model" >&2
.venv/bin/python scripts/fetch_model.py
# Published chat templates (from the pinned llama-cpp-python source package) for the tests.
.venv/bin/python scripts/fetch_templates.py >/dev/null
