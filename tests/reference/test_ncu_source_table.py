"""bench/cuda/ncu_source_table.py on a small CSV shaped like ncu's source-counter page."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cuda" / "ncu_source_table.py"
HEADER = ['Address', 'Source', 'Warp Stall Sampling (All Samples)', 'Instructions Executed',
          'stall_long_sb', 'stall_wait', 'stall_long_sb (Not Issued)']


def write_csv(path, rows):
    quote = lambda cells: ",".join(f'"{c}"' for c in cells)
    lines = ["==PROF== Connected to process 1", "the program's own output", quote(HEADER)]
    lines += [quote(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def run(path, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), str(path), *extra], capture_output=True, text=True)


def test_groups_by_execution_count_and_ranks_stalls(tmp_path):
    rows = [
        ["0x10", "LDC R1, c[0x0][0x28]", "2", "100", "0", "2", "0"],        # once per warp
        ["0x20", "LDGSTS.E.128 [R4], desc[UR8][R2.64]", "5", "1,000", "5", "0", "9"],  # per iteration
        ["0x30", "HMMA.16816.F32 R4, R8, R12, R4", "40", "1,000", "10", "30", "0"],
        ["0x40", "FMUL R1, R1, R2", "3", "400", "0", "3", "0"],          # a branch some take
        ["0x50", "EXIT", "0", "0", "0", "0", "0"],                       # never executed
    ]
    csv_path = tmp_path / "src.csv"
    write_csv(csv_path, rows)
    r = run(csv_path, "--top", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "5 SASS instructions, 2,500 warp instructions executed, 50 stall samples" in out
    # 1000 x 2 instructions = 2000 of 2500 executed (80 %), 45 of 50 samples (90 %)
    assert "| 1,000 | 2 | 2,000 | 80.0 | 45 | 90.0 |" in out
    assert "| 400 | 1 | 400 | 16.0 | 3 | 6.0 |" in out
    assert "| 100 | 1 | 100 | 4.0 | 2 | 4.0 |" in out
    top = out.split("Top 2 instructions")[1].splitlines()[2:4]
    assert "HMMA" in top[0] and "wait" in top[0]       # 40 samples, mostly stall_wait
    assert "LDGSTS" in top[1] and "long_sb" in top[1]  # the (Not Issued) column is not a reason


def test_rejects_a_file_without_the_table(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("==PROF== no kernel matched\n")
    r = run(bad)
    assert r.returncode != 0 and "no source-counter table" in r.stderr
