"""bench/cuda/engine_env_ab.sh and engine_ab_table.py: variants run `tessera bench` with their own
environment, alternating per type and round, and the table gives each result's mean and ratio."""
import os
import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cuda"

FAKE_TESSERA = """#!/usr/bin/env bash
# tessera bench's report rows; 128 sequences run at $FAKE_TPS tokens/s, batch 1 at 1.6 ms.
[ "$1" = bench ] || { echo "unexpected arguments: $*" >&2; exit 3; }
case " $* " in *" --dummy-type q4_0 "*|*" --dummy-type q8_0 "*) ;; *) echo "no weight type: $*" >&2; exit 3;; esac
echo "| decode, batch 1 (ms/token) | 1.6 | 1.01 | 63.1% |"
echo "| decode, batch 128 (tokens/s) | ${FAKE_TPS:-10000} | 41208 | 31.7% |"
"""


def test_variants_alternate_and_the_table_gives_ratios(tmp_path):
    tessera = tmp_path / "tessera"
    tessera.write_text(FAKE_TESSERA)
    tessera.chmod(0o755)
    env = dict(os.environ, OUT=str(tmp_path / "out"), TYPES="q4_0 q8_0", ROUNDS="2", DONOR="/nonexistent.gguf")
    r = subprocess.run(["bash", str(BENCH / "engine_env_ab.sh"), f"base={tessera}", f"fast={tessera},FAKE_TPS=12500"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    log = (tmp_path / "out" / "engine_ab.txt").read_text()
    heads = [l for l in log.splitlines() if l.startswith("== ")]
    assert heads[:4] == ["== base q4_0 round 1", "== fast q4_0 round 1", "== base q8_0 round 1", "== fast q8_0 round 1"]
    assert len(heads) == 8
    table = (tmp_path / "out" / "engine_ab.md").read_text().splitlines()
    assert table[0] == "| type | result | base | fast | fast / base |"
    assert "| q4_0 | decode, batch 128 (tokens/s) | 10,000 | 12,500 | 1.250 |" in table
    assert "| q8_0 | decode, batch 1 (ms/token) | 1.600 | 1.600 | 1.000 |" in table


def test_a_failed_run_leaves_a_dash(tmp_path):
    text = ("== a q4_0 round 1\n| decode, batch 16 (tokens/s) | 4000 | 1 | 1% |\n"
            "== b q4_0 round 1\nengine_ab: b q4_0 failed (rc 1)\n")
    path = tmp_path / "engine_ab.txt"
    path.write_text(text)
    r = subprocess.run([sys.executable, str(BENCH / "engine_ab_table.py"), str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "| q4_0 | decode, batch 16 (tokens/s) | 4,000 | - | - |" in r.stdout.splitlines()
