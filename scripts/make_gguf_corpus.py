#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF fuzz target (tests/data/fuzz/gguf_fuzz/): small valid
v2/v3 files plus one file per corruption class the reader must reject. The files double as a
regression test (ctest gguf_fuzz_corpus_replay). Inputs found by fuzzing are added to the same
folder by hand (named fuzz-*), this script never deletes them.

    python3 scripts/make_gguf_corpus.py [OUT_DIR]
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block size, block bytes), for the types used here.
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_1": (3, 32, 20), "Q8_0": (8, 32, 34),
        "Q2_K": (10, 256, 84), "I8": (24, 1, 1), "BF16": (30, 1, 2),
        "type99": (99, 1, 1)}  # not a ggml type


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(value(etype, x) for x in items)
    return struct.pack(SCALAR_FMT[vtype], v)


def kv(key, vtype, v):
    return gstr(key) + struct.pack("<I", vtype) + value(vtype, v)


def nbytes(type_name, dims):
    _, block, size = GGML[type_name]
    n = dims[0] // block * size
    for d in dims[1:]:
        n *= d
    return n


def gguf(kvs=(), tensors=(), version=3, alignment=32, n_tensors=None, n_kv=None,
         offsets=None, magic=b"GGUF"):
    """kvs: encoded kv blobs. tensors: (name, dims, type name) with packed aligned data."""
    out = magic + struct.pack("<IQQ", version,
                              len(tensors) if n_tensors is None else n_tensors,
                              len(kvs) if n_kv is None else n_kv)
    out += b"".join(kvs)
    offs, at = [], 0
    for i, (_, dims, tname) in enumerate(tensors):
        at = (at + alignment - 1) // alignment * alignment
        offs.append(at if offsets is None or offsets[i] is None else offsets[i])
        at = offs[-1] + nbytes(tname, dims)
    for (name, dims, tname), off in zip(tensors, offs):
        out += gstr(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", GGML[tname][0], off % 2**64)
    out += b"\0" * (-len(out) % alignment)
    data = bytearray()
    for i, ((_, dims, tname), off) in enumerate(zip(tensors, offs)):
        n = nbytes(tname, dims)
        if off + n > 4096:
            continue  # hostile offsets: no data
        if len(data) < off + n:
            data.extend(b"\0" * (off + n - len(data)))
        data[off:off + n] = bytes((i * 31 + k) % 251 for k in range(n))
    return out + bytes(data)


ARCH = [kv("general.architecture", STR, "llama"), kv("general.name", STR, "tiny"),
        kv("llama.block_count", U32, 2), kv("llama.rope.freq_base", F32, 10000.0)]
TOK = [kv("tokenizer.ggml.model", STR, "gpt2"),
       kv("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "</s>", "a", "b"])),
       kv("tokenizer.ggml.token_type", ARR, (I32, [3, 3, 1, 1])),
       kv("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, -1.0, -2.0])),
       kv("tokenizer.ggml.bos_token_id", U32, 0)]
TENSORS = [("token_embd.weight", [64, 4], "Q8_0"), ("output_norm.weight", [64], "F32"),
           ("blk.0.ffn_up.weight", [32, 3], "Q4_1")]
ALL_SCALARS = [kv("u8", U8, 200), kv("i8", I8, -5), kv("u16", U16, 60000), kv("i16", I16, -300),
               kv("u32", U32, 4000000000), kv("i32", I32, -7), kv("f32", F32, 0.5),
               kv("bool", BOOL, True), kv("str", STR, "h\u00e9llo"), kv("u64", U64, 2**64 - 1),
               kv("i64", I64, -2**63), kv("f64", F64, 2.5)]
ALL_ARRAYS = [kv("a_" + str(t), ARR, (t, [1, 0, 1])) for t in (U8, I8, U16, I16, U32, I32, U64,
                                                               I64, BOOL)]
ALL_ARRAYS += [kv("a_f32", ARR, (F32, [1.5, -2.0])), kv("a_f64", ARR, (F64, [3.25])),
               kv("a_str", ARR, (STR, ["x", "", "yz"])), kv("a_empty", ARR, (I32, []))]


def corpus():
    files = {
        "valid_v3_empty": gguf(),
        "valid_v2_empty": gguf(version=2),
        "valid_v3_scalars": gguf(ALL_SCALARS),
        "valid_v3_arrays": gguf(ALL_ARRAYS),
        "valid_v3_model": gguf(ARCH + TOK, TENSORS),
        "valid_v2_model": gguf(ARCH + TOK, TENSORS, version=2),
        "valid_v3_align64": gguf(ARCH + [kv("general.alignment", U32, 64)], TENSORS,
                                 alignment=64),
        "valid_v3_align1": gguf([kv("general.alignment", U32, 1)], TENSORS, alignment=1),
        "valid_v3_other_types": gguf([], [("q2k", [256], "Q2_K"), ("i8", [5, 3], "I8"),
                                          ("bf16", [7], "BF16"), ("f16", [3, 1, 2, 1], "F16"),
                                          ("empty", [32, 0], "Q4_1")]),
    }
    model = files["valid_v3_model"]
    bad = {
        "bad_magic": b"GGUX" + model[4:],
        "too_small": b"GG",
        "truncated_header": model[:14],
        "truncated_in_kv": model[:model.index(b"tokenizer.ggml.tokens") + 30],
        "truncated_in_tensor_info": model[:model.index(b"output_norm.weight") + 5],
        "truncated_data": model[:-1],
        "version0": gguf(ARCH, version=0),
        "version1": gguf(ARCH, version=1),
        "big_endian": gguf(ARCH, version=0x03000000),
        "kv_count_huge": gguf(ARCH, n_kv=2**40),
        "tensor_count_huge": gguf(ARCH, TENSORS, n_tensors=2**32 + 3),
        "key_len_huge": b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**64 - 5) + b"\0" * 16,
        "key_past_eof": b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**20) + b"\0" * 16,
        "string_past_eof": gguf([kv("k", STR, "abc")[:-11] + struct.pack("<Q", 999) + b"abc"]),
        "unknown_value_type": gguf([gstr("k") + struct.pack("<II", 13, 0)]),
        "nested_array": gguf([gstr("k") + struct.pack("<IIQ", ARR, ARR, 1) + value(ARR,
                                                                                    (U8, [1]))]),
        "array_len_huge": gguf([gstr("k") + struct.pack("<IIQ", ARR, F64, 2**61) + b"\0" * 8]),
        "array_past_eof": gguf([gstr("k") + struct.pack("<IIQ", ARR, F64, 2**24) + b"\0" * 8]),
        "string_array_huge": gguf([gstr("k") + struct.pack("<IIQ", ARR, STR, 2**25) + gstr("a")]),
        "duplicate_key": gguf(ARCH + [kv("llama.block_count", U32, 3)]),
        "alignment_not_pow2": gguf([kv("general.alignment", U32, 48)], TENSORS),
        "alignment_zero": gguf([kv("general.alignment", U32, 0)], TENSORS),
        "alignment_wrong_type": gguf([kv("general.alignment", U64, 32)], TENSORS),
        "n_dims_5": gguf([], [("t", [1, 1, 1, 1, 1], "F32")]),
        "dim_negative": gguf([], [("t", [4, 2**64 - 1], "F32")]),
        "numel_overflow": gguf([], [("t", [2**32, 2**32], "F32")]),
        "bytes_overflow": gguf([], [("t", [2**62], "F32")]),
        "block_mismatch": gguf([], [("q", [33, 2], "Q8_0")]),
        "misaligned_offset": gguf([], TENSORS, offsets=[None, 8 * 34 + 4, None]),
        "offset_overflow": gguf([], TENSORS, offsets=[None, 2**64 - 32, None]),
        "overlap": gguf([], TENSORS, offsets=[None, 192, None]),
        "duplicate_tensor": gguf([], TENSORS + [("output_norm.weight", [4], "F32")]),
        "unknown_ggml_type": gguf([], TENSORS + [("x", [4], "type99")]),
    }
    files.update(bad)
    return files


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests/data/fuzz/gguf_fuzz")
    os.makedirs(out, exist_ok=True)
    total = 0
    for name, data in sorted(corpus().items()):
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"wrote {len(corpus())} files, {total} bytes, to {out}")


if __name__ == "__main__":
    main()
