"""bench/cuda/dg_switch_check.sh with stand-in binaries: the test binary runs once per setting with
exactly that setting's variables, and the A/B table holds the baseline and one column per switch."""
import lzma
import os
import pathlib
import shutil
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cuda" / "dg_switch_check.sh"

FAKE_BENCH = """#!/usr/bin/env bash
echo "| type | shape | rows | floor us | dequant_gemm us | % of floor | x | y | z |"
echo "|---|---|---|---|---|---|---|---|---|"
us=40; [ "${TESSERA_DG_SK:-}" = 1 ] && us=36; [ "${TESSERA_DG_PAIR:-}" = 0 ] && us=44
echo "| Q4_0 | gate|up 28672x4096 | 128 | 1.00 | $us | 10.0% | 9.00 | 1.00x | 8.00 |"
"""
FAKE_TEST = """#!/usr/bin/env bash
echo "switches: $(env | grep '^TESSERA_DG_' | sort | tr '\\n' ' ')"
"""


def xz(path, text):
    path.write_bytes(lzma.compress(text.encode()))


def test_every_setting_and_variant(tmp_path):
    carry = tmp_path / "carry"
    carry.mkdir()
    xz(carry / "mmq_bench_main.xz", FAKE_BENCH.replace("us=40;", "us=50;"))
    xz(carry / "mmq_bench_cand.xz", FAKE_BENCH)
    xz(carry / "dgt_cand.xz", FAKE_TEST)
    env = dict(os.environ, OUT=str(tmp_path / "out"), ROUNDS="1", ROWS="128", TYPES="q4_0",
               TEST_ENVS="-;TESSERA_DG_PIPE=1 TESSERA_DG_PAIR=0", AB="pair=;sk=TESSERA_DG_SK=1;mbar=TESSERA_DG_PAIR=0")
    env.pop("TESSERA_DG_SK", None)
    # no compute-sanitizer here: the stand-in test is a script
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not (pathlib.Path(p) / "compute-sanitizer").exists())
    r = subprocess.run(["bash", str(SCRIPT), str(carry)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    tests = (tmp_path / "out" / "dg_tests.txt").read_text()
    assert "switches: " in tests.splitlines()  # the "-" setting: none
    assert "switches: TESSERA_DG_PAIR=0 TESSERA_DG_PIPE=1 " in tests
    assert tests.count("rc=0") == 2
    table = (tmp_path / "out" / "dg_ab.md").read_text().splitlines()
    assert table[0] == "| type | shape | rows | base us | pair us | sk us | mbar us | pair / base | sk / base | mbar / base |"
    assert "| Q4_0 | gate|up | 128 | 50.00 | 40.00 | 36.00 | 44.00 | 0.800 | 0.720 | 0.880 |" in table


def test_unxz_without_xz_takes_python(tmp_path):
    src = tmp_path / "tool.xz"
    xz(src, "#!/bin/sh\necho unpacked\n")
    bin_dir = tmp_path / "bin"  # a PATH with bash and python3 but no xz
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    for tool in ("bash", "chmod"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    dst = tmp_path / "tool"
    r = subprocess.run([str(bin_dir / "bash"), str(SCRIPT.parent / "unxz.sh"), str(src), str(dst)],
                       capture_output=True, text=True, env={"PATH": str(bin_dir)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert subprocess.run([str(dst)], capture_output=True, text=True).stdout == "unpacked\n"
