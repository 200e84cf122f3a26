"""bench/cuda/variants_check.sh with stand-in binaries packed as variants_pack.sh packs them: every
label's tests run and their verdicts reach the summary (a failing variant is reported, not
dropped), and the kernel and engine A/B tables hold main first and one column per variant."""
import io
import lzma
import os
import pathlib
import subprocess
import tarfile

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cuda" / "variants_check.sh"

FAKE_BENCH = """#!/usr/bin/env bash
echo "| type | shape | rows | floor us | dequant_gemm us | % of floor | x | y | z |"
echo "|---|---|---|---|---|---|---|---|---|"
echo "| Q8_0 | gate|up 28672x4096 | 64 | 1.00 | US | 10.0% | 9.00 | 1.00x | 8.00 |"
"""
FAKE_TEST = """#!/usr/bin/env bash
echo "[==========] 3 tests from 1 test suite ran."
echo "[  PASSED  ] NPASS tests."
if [ NFAIL != 0 ]; then echo "[  FAILED  ] NFAIL test, listed below:"; echo "[  FAILED  ] DG.Q8_0"; exit 1; fi
"""
FAKE_TESSERA = """#!/usr/bin/env bash
[ "$1" = bench ] || exit 3
echo "| decode, batch 1 (ms/token) | 2.36 | 1.93 | 81.8% |"
echo "| decode, batch 64 (tokens/s) | TPS | 30000 | 33.3% |"
"""


def pack(path, files):
    """files: {member path: script text}, as a tar.xz of executables."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo("./" + name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(lzma.compress(raw.getvalue()))


def test_tests_and_tables_per_variant(tmp_path):
    carry = tmp_path / "carry"
    carry.mkdir()
    files = {}
    for label, us, passed, failed, tps in (("main", "50", "3", "0", "10000"), ("planar", "40", "2", "1", "11000"),
                                           ("nopad", "45", "3", "0", "10500")):
        files[f"{label}/mmq_bench"] = FAKE_BENCH.replace("US", us)
        files[f"{label}/dequant_gemm_cuda_test"] = FAKE_TEST.replace("NPASS", passed).replace("NFAIL", failed)
        files[f"{label}/tessera"] = FAKE_TESSERA.replace("TPS", tps)
    pack(carry / "bins.tar.xz", files)
    (carry / "base_commit").write_text("abc123\n")
    env = dict(os.environ, OUT=str(tmp_path / "out"), VARIANTS_DIR=str(tmp_path / "variants"), ROUNDS="1",
               ROWS="64", TYPES="q8_0", ENGINE_TYPES="q8_0", DONOR="/nonexistent.gguf")
    r = subprocess.run(["bash", str(SCRIPT), str(carry)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = (tmp_path / "out" / "summary.md").read_text().splitlines()
    assert summary[0] == "# variants of abc123"
    assert "| main | dequant_gemm_cuda_test | pass: 3 passed, 0 failed, 0 skipped |" in summary
    assert "| planar | dequant_gemm_cuda_test | FAILED (rc 1): 2 passed, 1 failed, 0 skipped |" in summary
    assert "| nopad | dequant_gemm_cuda_test | pass: 3 passed, 0 failed, 0 skipped |" in summary
    # main first, then the variants in the carry's (sorted) order
    head = next(l for l in summary if l.startswith("| type | shape | rows |"))
    assert head == ("| type | shape | rows | main us | nopad us | planar us | nopad / main | planar / main |")
    assert "| Q8_0 | gate|up | 64 | 50.00 | 45.00 | 40.00 | 0.900 | 0.800 |" in summary
    engine = summary[summary.index("## engine (tessera bench; ratio to main)"):]
    assert "| q8_0 | decode, batch 64 (tokens/s) | 10,000 | 10,500 | 11,000 | 1.050 | 1.100 |" in engine


def test_steps_and_engine_labels_pick_a_subset(tmp_path):
    carry = tmp_path / "carry"
    carry.mkdir()
    files = {}
    for label, tps in (("main", "10000"), ("a", "11000"), ("b", "12000")):
        files[f"{label}/tessera"] = FAKE_TESSERA.replace("TPS", tps)
        files[f"{label}/dequant_gemm_cuda_test"] = FAKE_TEST.replace("NPASS", "3").replace("NFAIL", "0")
    pack(carry / "bins.tar.xz", files)
    env = dict(os.environ, OUT=str(tmp_path / "out"), VARIANTS_DIR=str(tmp_path / "variants"), ENGINE_TYPES="q8_0",
               DONOR="/nonexistent.gguf", ENGINE_LABELS="main b", STEPS="engine")
    r = subprocess.run(["bash", str(SCRIPT), str(carry)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = (tmp_path / "out" / "summary.md").read_text().splitlines()
    assert "| q8_0 | decode, batch 64 (tokens/s) | 10,000 | 12,000 | 1.200 |" in summary
    assert not any(l.startswith("| main |") for l in summary)  # STEPS=engine: no tests
