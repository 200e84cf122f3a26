"""Shared fixtures for the reference tests: the tessera binary and the default model.

Outside CI a missing model or package skips the test; in CI (env CI set) it fails, so a broken
set-up can never pass silently."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _require(condition, why):
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def tessera_bin():
    path = os.environ.get("TESSERA_BIN") or str(ROOT / "build" / "tessera")
    _require(os.path.exists(path), f"tessera binary not found at {path}")
    return path


def _cache(*parts):
    """A path in Tessera's per-user cache (where scripts/fetch_*.py put what they fetch)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tessera", *parts)


@pytest.fixture(scope="session")
def model_path():
    path = os.environ.get("TESSERA_MODEL") or _cache("SmolLM2-135M-Instruct.Q4_1.gguf")
    _require(os.path.exists(path), f"default model not found at {path} (run scripts/fetch_model.py)")
    return path


@pytest.fixture(scope="session")
def published_templates_dir():
    """Published chat templates (scripts/fetch_templates.py)."""
    path = _cache("chat_templates")
    _require(os.path.isdir(path), f"published templates not found in {path} "
             "(run scripts/fetch_templates.py)")
    return path


@pytest.fixture(scope="session")
def llama_cpp():
    try:
        import llama_cpp as mod
    except ImportError:
        _require(False, "llama-cpp-python is not installed")
    return mod


def llama_cpp_avx512(llama_cpp):
    """Whether this llama.cpp is an AVX-512 build: the one whose CPU float operations Tessera
    reproduces bit for bit (docs/design/llm_cpu_path.md)."""
    return "AVX512 = 1" in llama_cpp.llama_print_system_info().decode()


def run_tessera(binary, *args, check=True, timeout=600, env=None):
    """Runs the CLI (env: its whole environment, or None for this process's); returns
    CompletedProcess with text stdout/stderr (bytes decoded leniently)."""
    proc = subprocess.run([binary, *map(str, args)], capture_output=True, timeout=timeout, env=env)
    out = proc.stdout.decode("utf-8", errors="replace")
    err = proc.stderr.decode("utf-8", errors="replace")
    if check and proc.returncode != 0:
        raise AssertionError(f"tessera {' '.join(map(str, args))} failed ({proc.returncode}):\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
