"""bench/cuda/mmq_ab_table.py on two labels' runs shaped like mmq_bench --dequant-gemm's table."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cuda" / "mmq_ab_table.py"
HEAD = ("| type | shape | rows | floor us | dequant_gemm us | % of floor | bf16 copy + cuBLASLt us | "
        "speed-up | cuBLASLt on bf16 weights us |\n|---|---|---|---|---|---|---|---|---|\n")


def table(rows):
    return HEAD + "".join(f"| {t} | {shape} | {m} | 1.00 | {us:.2f} | 10.0% | 9.00 | 1.00x | 8.00 |\n"
                          for t, shape, m, us in rows)


def run(path):
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True)


def test_means_over_rounds_and_ratios_to_the_first_label(tmp_path):
    runs = [("old", 1, 40.0, 10.0), ("new", 1, 30.0, 12.0), ("old", 2, 44.0, 10.0), ("new", 2, 32.0, 12.0)]
    text = "ceilings: copy 4237 GB/s\n"
    for label, r, gate_up_us, o_us in runs:
        text += f"== {label} round {r}\n" + table([("Q4_0", "gate|up 28672x4096", 128, gate_up_us),
                                                   ("Q4_0", "o 4096x4096", 64, o_us)])
    path = tmp_path / "dg_ab.txt"
    path.write_text(text)
    r = run(path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "| type | shape | rows | old us | new us | new / old |"
    # gate|up: old mean 42, new mean 31 -> 31 / 42 = 0.738; o: 10 -> 12 = 1.2
    assert "| Q4_0 | gate|up | 128 | 42.00 | 31.00 | 0.738 |" in lines
    assert "| Q4_0 | o | 64 | 10.00 | 12.00 | 1.200 |" in lines


def test_a_label_missing_a_shape_shows_a_dash(tmp_path):
    text = ("== a round 1\n" + table([("Q8_0", "down 4096x14336", 32, 20.0)]) +
            "== b round 1\n" + "dg_ab: /tmp/b failed (rc 1)\n")
    path = tmp_path / "dg_ab.txt"
    path.write_text(text)
    r = run(path)
    assert r.returncode == 0, r.stderr
    assert "| Q8_0 | down | 32 | 20.00 | - | - |" in r.stdout.splitlines()


def test_no_runs_is_an_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("nothing here\n")
    r = run(path)
    assert r.returncode != 0
    assert "no runs found" in r.stderr
