"""bench/cuda/dg_env_ab.sh: variants that differ by environment reach dg_ab.sh's table as labels of
their own, each run with its variables set (a stand-in mmq_bench reports a time taken from one)."""
import os
import pathlib
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cuda" / "dg_env_ab.sh"

FAKE_BENCH = """#!/usr/bin/env bash
# mmq_bench --dequant-gemm's table, gate|up taking $FAKE_US us; the arguments must be dg_ab.sh's.
[ "$1" = --dequant-gemm ] && [ "$2" = --rows ] || { echo "unexpected arguments: $*" >&2; exit 3; }
echo "| type | shape | rows | floor us | dequant_gemm us | % of floor | bf16 copy + cuBLASLt us | speed-up | cuBLASLt on bf16 weights us |"
echo "|---|---|---|---|---|---|---|---|---|"
echo "| Q4_0 | gate|up 28672x4096 | 128 | 1.00 | ${FAKE_US:-40} | 10.0% | 9.00 | 1.00x | 8.00 |"
"""


def run(tmp_path, *variants):
    env = dict(os.environ, OUT=str(tmp_path / "out"), ROUNDS="1", ROWS="128", TYPES="q4_0")
    return subprocess.run(["bash", str(SCRIPT), *variants], capture_output=True, text=True, env=env, timeout=120)


def test_each_variant_runs_with_its_environment(tmp_path):
    bench = tmp_path / "mmq_bench"
    bench.write_text(FAKE_BENCH)
    bench.chmod(0o755)
    r = run(tmp_path, f"base={bench}", f"fast={bench},FAKE_US=30,TESSERA_DG_SK=1")
    assert r.returncode == 0, r.stderr
    table = (tmp_path / "out" / "dg_ab.md").read_text().splitlines()
    assert table[0] == "| type | shape | rows | base us | fast us | fast / base |"
    assert "| Q4_0 | gate|up | 128 | 40.00 | 30.00 | 0.750 |" in table


def test_a_missing_binary_is_refused(tmp_path):
    r = run(tmp_path, f"a={tmp_path / 'none'}", f"b={tmp_path / 'none'}")
    assert r.returncode == 2
    assert "is not an executable" in r.stderr
