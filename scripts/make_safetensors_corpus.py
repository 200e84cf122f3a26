#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzz target (tests/data/fuzz/safetensors_fuzz/):
small valid files (one written by the `safetensors` package when it is installed) plus one
hand-made file per corruption class the reader must reject, and a few index files. The files
double as a regression test (ctest safetensors_fuzz_corpus_replay). Inputs found by fuzzing are
added to the same folder by hand (named fuzz-*); this script never deletes them.

    python3 scripts/make_safetensors_corpus.py [OUT_DIR]
"""
import json
import os
import struct
import sys


def st(header, data=b"", pad=True, raw_len=None):
    """File bytes from a header (dict or raw text) and a data section."""
    text = header if isinstance(header, (str, bytes)) else json.dumps(header, separators=(",", ":"))
    text = text.encode() if isinstance(text, str) else text
    if pad:
        text += b" " * (-len(text) % 8)
    n = len(text) if raw_len is None else raw_len
    return struct.pack("<Q", n) + text + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def cases():
    two = {"a": t("F32", [2], 0, 8), "b": t("BF16", [2, 2], 8, 16)}
    yield "valid_two", st(two, bytes(range(16)))
    yield "valid_metadata", st({"__metadata__": {"format": "pt"}, **two}, bytes(range(16)))
    yield "valid_empty", st({})
    yield "valid_unpadded", st({"a": t("F16", [3], 0, 6)}, b"\x01" * 6, pad=False)
    yield "valid_scalar_and_empty", st({"s": t("I64", [], 0, 8), "e": t("F32", [0, 9], 8, 8)},
                                       b"\x02" * 8)
    yield "valid_zero_dim_huge", st({"e": t("U8", [2**62, 0, 2**62], 0, 0)})
    yield "too_small", b"\x01\x00\x00"
    yield "header_past_eof", st({}, raw_len=4096)
    yield "header_huge", st({}, raw_len=2**63 + 5)
    yield "not_object", st("[1,2,3]")
    yield "leading_space", st(" {}")
    yield "bad_json", st('{"a":')
    yield "bad_utf8", st(b'{"\xff\xfe":1}')
    yield "deep", st("{" + '"a":' * 1 + "[" * 64 + "]" * 64 + "}")
    yield "duplicate_name", st('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                               '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8)
    yield "entry_not_object", st({"a": 5})
    yield "missing_dtype", st({"a": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
    yield "unknown_dtype", st({"a": t("Q4_0", [32], 0, 18)}, b"\0" * 18)
    yield "sub_byte_dtype", st({"a": t("F4", [2], 0, 1)}, b"\0")
    yield "shape_negative", st({"a": t("F32", [-1], 0, 4)}, b"\0" * 4)
    yield "shape_float", st({"a": t("F32", [1.5], 0, 4)}, b"\0" * 4)
    yield "shape_string", st({"a": t("F32", ["4"], 0, 4)}, b"\0" * 4)
    yield "too_many_dims", st({"a": t("F32", [1] * 9, 0, 4)}, b"\0" * 4)
    yield "numel_overflow", st({"a": t("U8", [2**32, 2**32], 0, 4)}, b"\0" * 4)
    yield "bytes_overflow", st({"a": t("F64", [2**61], 0, 8)}, b"\0" * 8)
    yield "offsets_arity", st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, b"\0" * 4)
    yield "offsets_reversed", st({"a": t("F32", [0], 4, 0)}, b"\0" * 4)
    yield "offsets_past_end", st({"a": t("F32", [1], 0, 4)}, b"\0" * 2)
    yield "offsets_huge", st({"a": t("F32", [1], 2**64 - 4, 2**64 - 1)}, b"\0" * 4)
    yield "size_mismatch", st({"a": t("F32", [3], 0, 8)}, b"\0" * 8)
    yield "overlap", st({"a": t("F32", [2], 0, 8), "b": t("F32", [1], 4, 8)}, b"\0" * 8)
    yield "aliased", st({"a": t("F32", [1], 0, 4), "b": t("F32", [1], 0, 4)}, b"\0" * 4)
    yield "gap", st({"a": t("F32", [1], 4, 8)}, b"\0" * 8)
    yield "trailing_bytes", st({"a": t("F32", [1], 0, 4)}, b"\0" * 12)
    yield "metadata_not_string", st({"__metadata__": {"k": 1}})
    yield "metadata_not_object", st({"__metadata__": ["k"]})
    yield "index_valid.json", json.dumps({"metadata": {"total_size": 16},
                                          "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                         "b": "model-00002-of-00002.safetensors"}}).encode()
    yield "index_traversal.json", json.dumps({"weight_map": {"a": "../../etc/passwd"}}).encode()
    yield "index_absolute.json", json.dumps({"weight_map": {"a": "/tmp/x.safetensors"}}).encode()
    yield "index_not_string.json", json.dumps({"weight_map": {"a": 3}}).encode()
    yield "index_no_map.json", json.dumps({"metadata": {}}).encode()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "fuzz", "safetensors_fuzz")
    os.makedirs(out, exist_ok=True)
    for name, data in cases():
        path = os.path.join(out, name if name.endswith(".json") else name + ".safetensors")
        with open(path, "wb") as f:
            f.write(data)
    try:  # one file as the reference writer lays it out
        import numpy as np
        from safetensors.numpy import save
        blob = save({"x": np.arange(6, dtype=np.float32).reshape(2, 3),
                     "y": np.ones(4, dtype=np.float16)}, metadata={"format": "np"})
        with open(os.path.join(out, "valid_reference_writer.safetensors"), "wb") as f:
            f.write(blob)
    except ImportError:
        print("safetensors package not installed: reference-writer seed skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
