"""Checks `tessera info` against the `gguf` Python package's GGUFReader (an independent GGUF
implementation): header, every metadata value, and every tensor's name, type, shape, byte count
and offset, on the default model and on files written here with gguf.GGUFWriter.

Env: TESSERA_BIN (default ./build/tessera), TESSERA_MODEL (default model path); without the
model the model test is skipped, unless CI is set.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import GGUFValueType as V  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/data/fuzz/gguf_fuzz"
TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64",
              "f64"]
INT_TYPES = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64"}
SHOWN_ELEMENTS = 8  # `info` prints this many array elements


def tessera_bin():
    path = Path(os.environ.get("TESSERA_BIN", "./build/tessera"))
    if not path.is_absolute() and not path.exists():
        path = ROOT / path
    assert path.exists(), f"tessera binary not found at {path}; build it or set TESSERA_BIN"
    return str(path)


def default_model():
    if os.environ.get("TESSERA_MODEL"):
        return Path(os.environ["TESSERA_MODEL"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tessera" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def run_info(path):
    return subprocess.run([tessera_bin(), "info", str(path)], capture_output=True, timeout=120)


# ---- parsing `tessera info` output ----

DEC = json.JSONDecoder()
ELIDED = re.compile(r"\.\.\. \((\d+) bytes\)")


def parse_string(text, i):
    """JSON string at text[i:], optionally followed by '... (N bytes)' when elided.
    Returns (string, full byte length or None, next index)."""
    s, i = DEC.raw_decode(text, i)
    m = ELIDED.match(text, i)
    return (s, int(m.group(1)), m.end()) if m else (s, None, i)


def parse_scalar(t, text):
    if t in INT_TYPES:
        return int(text)
    if t in ("f32", "f64"):
        return float(text)
    if t == "bool":
        assert text in ("true", "false"), text
        return text == "true"
    assert t == "str", t
    s, full, end = parse_string(text, 0)
    assert end == len(text), text
    return (s, full)


def parse_array(et, text):
    """'[e0, e1, ...]' -> list of shown elements (strings as (value, elided length))."""
    assert text.startswith("[") and text.endswith("]"), text
    if et != "str":
        body = text[1:-1]
        items = [x for x in body.split(", ") if x] if body else []
        if items and items[-1] == "...":
            items.pop()
        return [parse_scalar(et, x) for x in items]
    out, i = [], 1
    while text[i] != "]":
        if text.startswith("...", i):
            i += 3
            continue
        s, full, i = parse_string(text, i)
        out.append((s, full))
        if text.startswith(", ", i):
            i += 2
    return out


def parse_info(stdout):
    info = {"kv": {}, "tensors": [], "tokenizer": {}}
    for line in stdout.decode("utf-8").splitlines():
        if not line or line.startswith("["):
            continue
        head, _, rest = line.partition(" ")
        if head == "kv":
            key, t, value = rest.split(" ", 2)
            m = re.fullmatch(r"arr\[(\w+),(\d+)\]", t)
            if m:
                info["kv"][key] = ("arr", m.group(1), int(m.group(2)), parse_array(m.group(1), value))
            else:
                info["kv"][key] = (t, parse_scalar(t, value))
        elif head == "tensor":
            m = re.fullmatch(r"(\S+) (\S+) \[([\d, ]*)\] (\d+) at (\d+)", rest)
            assert m, line
            shape = [int(x) for x in m.group(3).split(", ")] if m.group(3) else []
            info["tensors"].append((m.group(1), m.group(2), shape, int(m.group(4)),
                                    int(m.group(5))))
        elif head == "tokenizer":
            field, _, value = rest.partition(" ")
            info["tokenizer"][field] = value
        elif head == "total":
            m = re.fullmatch(r"(\d+) tensors (\d+) params (\d+) bytes", rest)
            assert m, line
            info["total"] = tuple(int(x) for x in m.groups())
        elif head in ("version", "alignment", "file_size", "data_offset", "kv_count",
                      "tensor_count"):
            info[head] = int(rest)
    return info


# ---- comparison with GGUFReader ----

def same_value(t, expected, got):
    if t == "f32":
        return np.float32(expected) == np.float32(got) or (np.isnan(expected) and np.isnan(got))
    if t == "f64":
        return expected == got or (np.isnan(expected) and np.isnan(got))
    if t == "str":
        s, full = got
        if full is None:
            return s == expected
        return expected.startswith(s) and len(expected.encode()) == full and len(s) < len(expected)
    return expected == got


def check_against_reader(path):
    res = run_info(path)
    assert res.returncode == 0, res.stderr.decode()
    info = parse_info(res.stdout)
    r = gguf.GGUFReader(str(path))

    assert info["version"] == r.fields["GGUF.version"].contents()
    assert info["alignment"] == r.alignment
    assert info["data_offset"] == r.data_offset
    assert info["file_size"] == os.path.getsize(path)

    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert info["kv_count"] == len(fields)
    assert set(info["kv"]) == set(fields)
    for key, f in fields.items():
        got = info["kv"][key]
        t = TYPE_NAMES[f.types[0]]
        assert got[0] == t, key
        if t == "arr":
            et = TYPE_NAMES[f.types[-1]]
            assert got[1] == et, key
            assert got[2] == len(f.data), key
            expected = f.contents(slice(0, SHOWN_ELEMENTS))
            assert len(got[3]) == min(SHOWN_ELEMENTS, len(f.data)), key
            for e, g in zip(expected, got[3]):
                assert same_value(et, e, g), (key, e, g)
        else:
            assert same_value(t, f.contents(), got[1]), (key, f.contents(), got[1])

    assert info["tensor_count"] == len(r.tensors)
    assert len(info["tensors"]) == len(r.tensors)
    for t, (name, tname, shape, nbytes, offset) in zip(r.tensors, info["tensors"]):
        assert name == t.name
        assert tname == t.tensor_type.name, name
        assert shape == [int(d) for d in t.shape], name
        assert nbytes == int(t.n_bytes), name
        assert offset == int(t.data_offset), name
    assert info["total"] == (len(r.tensors), sum(int(t.n_elements) for t in r.tensors),
                             sum(int(t.n_bytes) for t in r.tensors))
    return info, r


# ---- tests ----

def test_default_model():
    path = default_model()
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"default model missing at {path} (run scripts/fetch_model.py)")
        pytest.skip(f"default model not found at {path}")
    info, _ = check_against_reader(path)
    assert len(info["tensors"]) == 272
    assert info["kv"]["llama.block_count"] == ("u32", 30)
    tok = info["tokenizer"]
    assert tok["model"] == '"gpt2"'
    assert tok["vocab_size"] == "49152"
    assert tok["bos_token_id"] == "1" and tok["eos_token_id"] == "2"
    assert tok["chat_template"].startswith("yes")


def write_file(path, alignment=None, tensors=True):
    w = gguf.GGUFWriter(str(path), "testarch")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_name("tiny \"quoted\"\tname \u00e9\u6f22")
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2147483648)
    w.add_float32("t.f32", 1.0e-5)
    w.add_float32("t.f32_inf", float("inf"))
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.empty", "")
    w.add_string("t.long", "x\n" * 200 + "\u00e9" * 10)  # elided by `info`
    w.add_block_count(3)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -1.25])
    w.add_array("t.arr_str", ["a", "", "\u00e9t\u00e9", "x" * 300] + ["t%d" % i for i in range(20)])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_empty", [])
    for sub in (V.UINT8, V.INT8, V.UINT16, V.INT16, V.UINT32, V.UINT64, V.INT64, V.FLOAT64):
        w.add_key_value("t.arr_" + sub.name.lower(), list(range(12)), V.ARRAY, sub_type=sub)
    w.add_key_value("tokenizer.ggml.tokens", ["<s>", "</s>", "a"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("tokenizer.ggml.model", "llama", V.STRING)
    w.add_key_value("tokenizer.ggml.bos_token_id", 0, V.UINT32)
    if tensors:
        rng = np.random.default_rng(0)
        w.add_tensor("f32", rng.uniform(-1, 1, (3, 7)).astype(np.float32))
        w.add_tensor("f16", rng.uniform(-1, 1, (5,)).astype(np.float16))
        w.add_tensor("f64", rng.uniform(-1, 1, (2, 1, 3)).astype(np.float64))
        w.add_tensor("i8", rng.integers(-100, 100, (13,)).astype(np.int8))
        w.add_tensor("i16", rng.integers(-100, 100, (2, 3)).astype(np.int16))
        w.add_tensor("i32", rng.integers(-100, 100, (4,)).astype(np.int32))
        w.add_tensor("i64", rng.integers(-100, 100, (1, 2, 1, 2)).astype(np.int64))
        for qt, rows in ((Q.Q8_0, 3), (Q.Q4_1, 2), (Q.Q2_K, 2), (Q.IQ4_XS, 1), (Q.BF16, 3),
                         (Q.TQ2_0, 1), (Q.MXFP4, 2)):
            block, size = gguf.GGML_QUANT_SIZES[qt]
            row_bytes = (256 // block) * size if block > 1 else 9 * size
            raw = rng.integers(1, 255, (rows, row_bytes)).astype(np.uint8)
            w.add_tensor(qt.name.lower(), raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_writer_file_every_value_type(tmp_path):
    info, _ = check_against_reader(write_file(tmp_path / "types.gguf"))
    assert info["alignment"] == 32
    assert info["kv"]["t.long"][1][1] == len(("x\n" * 200 + "\u00e9" * 10).encode())
    assert info["kv"]["t.u64"] == ("u64", 2**64 - 1)
    assert info["kv"]["t.arr_str"][2] == 24
    types = {name: t for name, t, *_ in info["tensors"]}
    assert types["q2_k"] == "Q2_K" and types["iq4_xs"] == "IQ4_XS" and types["i64"] == "I64"


@pytest.mark.parametrize("alignment", [1, 64, 256])
def test_writer_file_custom_alignment(tmp_path, alignment):
    info, _ = check_against_reader(write_file(tmp_path / "aligned.gguf", alignment=alignment))
    assert info["alignment"] == alignment
    assert info["kv"]["general.alignment"] == ("u32", alignment)
    assert info["data_offset"] % alignment == 0
    assert all((off - info["data_offset"]) % alignment == 0 for *_, off in info["tensors"])


def test_writer_file_without_tensors(tmp_path):
    info, _ = check_against_reader(write_file(tmp_path / "kv_only.gguf", tensors=False))
    assert info["tensors"] == [] and info["total"] == (0, 0, 0)


def test_version_2_file(tmp_path):
    # GGUFWriter writes v3; little-endian v2 differs only in the version field.
    path = write_file(tmp_path / "v2.gguf")
    data = bytearray(path.read_bytes())
    data[4:8] = (2).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    info, _ = check_against_reader(path)
    assert info["version"] == 2


def test_corpus_valid_files_accepted_and_corrupt_files_rejected():
    files = sorted(CORPUS.glob("*.gguf"))
    assert len(files) >= 20
    for f in files:
        res = run_info(f)
        if f.name.startswith("valid_"):
            assert res.returncode == 0, (f.name, res.stderr.decode())
        elif f.name.startswith("fuzz-"):  # fuzzer finds: either outcome, but cleanly
            assert res.returncode in (0, 1), f.name
        else:
            assert res.returncode == 1, f.name
            err = res.stderr.decode()
            assert "tessera info: error:" in err and f.name in err, (f.name, err)
            assert "corrupt data" in err or "unsupported" in err, (f.name, err)


def test_corrupt_file_message_names_the_problem(tmp_path):
    path = write_file(tmp_path / "cut.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:-40])  # past the < 32 bytes of trailing padding, into the data
    res = run_info(path)
    assert res.returncode == 1
    assert re.search(r"tensor '\w+' data \[offset \d+, \d+ bytes\] extends past end of file",
                     res.stderr.decode()), res.stderr.decode()


def test_missing_file():
    res = run_info("/nonexistent/model.gguf")
    assert res.returncode == 1
    assert b"not found" in res.stderr and b"/nonexistent/model.gguf" in res.stderr
