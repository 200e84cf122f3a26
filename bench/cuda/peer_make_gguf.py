#!/usr/bin/env python3
"""Write a Llama-3-8B-shaped GGUF with random weights of one type, for timing peers (llama.cpp)
against Tessera's dummy-weight decode bench (bench/cuda/llama_decode_bench.cu) on the same shape.

usage: peer_make_gguf.py OUT.gguf TYPE [--tiny]
  TYPE: bf16 | f16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k | q5_k | q6_k
        (every projection and the output head; the token embedding too, except Q8_0 for the K types; norms f32)
  --tiny: 2 layers, d 256 (a quick format check, e.g. with llama-cpp-python on a CPU)

Values: every quant bit pattern random, f16 block scales finite with the magnitudes Tessera's
dummy weights use (weights of standard deviation ~1/sqrt(4096)), bf16/f16 uniform of that size.
No tokenizer: tokenizer.ggml.model = "none" with llama.vocab_size dummy tokens (llama.cpp's
llama-bench feeds random token ids). To be fast, data comes from a 64 MiB pool of whole blocks,
tiled per tensor (tensors repeat data; the timing of a matrix-vector product does not depend on
that). Needs numpy and the gguf package (pip's `gguf`, or llama.cpp's gguf-py on PYTHONPATH).
"""
import sys
import time

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

TYPES = {"bf16": Q.BF16, "f16": Q.F16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1,
         "q5_0": Q.Q5_0, "q5_1": Q.Q5_1, "q4_k": Q.Q4_K, "q5_k": Q.Q5_K, "q6_k": Q.Q6_K}
# (elements, bytes) per block; byte offsets of the f16 fields -> magnitude at k = 4096
BLOCK = {Q.Q8_0: (32, 34), Q.Q4_0: (32, 18), Q.Q4_1: (32, 20), Q.Q5_0: (32, 22), Q.Q5_1: (32, 24),
         Q.Q4_K: (256, 144), Q.Q5_K: (256, 176), Q.Q6_K: (256, 210)}
RK = 1 / 64.0  # 1 / sqrt(4096)
F16_FIELDS = {Q.Q8_0: [(0, RK / 77)], Q.Q4_0: [(0, RK / 4.83)], Q.Q4_1: [(0, RK / 9.7), (2, 4 * RK / 9.7)],
              Q.Q5_0: [(0, RK / 9.25)], Q.Q5_1: [(0, RK / 18.5), (2, 8 * RK / 18.5)],
              Q.Q4_K: [(0, RK / 190), (2, RK / 190)], Q.Q5_K: [(0, RK / 380), (2, RK / 380)],
              Q.Q6_K: [(208, RK / 1370)]}
POOL_BYTES = 64 << 20


def make_pool(rng, qtype):
    if qtype in (Q.BF16, Q.F16):
        a = np.sqrt(3.0) * RK
        f = rng.uniform(-a, a, size=POOL_BYTES // 2).astype(np.float32)
        if qtype == Q.F16:
            return f.astype(np.float16).view(np.uint8)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    _, bs = BLOCK[qtype]
    nb = POOL_BYTES // bs
    pool = rng.integers(0, 256, size=(nb, bs), dtype=np.uint8)
    for off, mag in F16_FIELDS[qtype]:
        sign = np.where(rng.integers(0, 2, size=nb) == 1, -1.0, 1.0)
        d = (sign * mag * rng.uniform(0.5, 1.5, size=nb)).astype(np.float16)
        pool[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
    return pool.reshape(-1)


def tensor_bytes(pool, qtype, rows, cols, shift):
    if qtype in (Q.BF16, Q.F16):
        row_bytes = cols * 2
        unit = 2
    else:
        be, bs = BLOCK[qtype]
        assert cols % be == 0, (cols, qtype)
        row_bytes = cols // be * bs
        unit = bs
    n = rows * row_bytes
    start = (shift * 7919 % (len(pool) // unit)) * unit  # whole-block offset: tensors differ
    src = np.roll(pool, -start) if start else pool
    reps = -(-n // len(src))
    return np.tile(src, reps)[:n].reshape(rows, row_bytes)


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in TYPES:
        sys.exit(__doc__)
    path, tname = sys.argv[1], sys.argv[2]
    tiny = "--tiny" in sys.argv[3:]
    qtype = TYPES[tname]
    if tiny:
        n_layers, d, n_heads, n_kv, d_ff, vocab = 2, 256, 4, 2, 768, 1000
    else:
        n_layers, d, n_heads, n_kv, d_ff, vocab = 32, 4096, 32, 8, 14336, 128256
    hd = d // n_heads
    t0 = time.time()
    rng = np.random.default_rng(2026)
    pool = make_pool(rng, qtype)
    embd_type = Q.Q8_0 if qtype in (Q.Q4_K, Q.Q6_K) else qtype
    embd_pool = make_pool(rng, embd_type) if embd_type != qtype else pool
    w = GGUFWriter(path, "llama")
    w.add_name(f"dummy-llama3-8b-{tname}" if not tiny else f"dummy-tiny-{tname}")
    w.add_context_length(8192)
    w.add_embedding_length(d)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(d_ff)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_string("tokenizer.ggml.model", "none")
    shift = 0

    def add(name, rows, cols, qt=qtype, p=pool):
        nonlocal shift
        shift += 1
        data = tensor_bytes(p, qt, rows, cols, shift)
        if qt in (Q.BF16, Q.F16):
            w.add_tensor(name, data.view(np.uint16 if qt == Q.BF16 else np.float16).reshape(rows, cols),
                         raw_dtype=qt)
        else:
            w.add_tensor(name, data, raw_dtype=qt)

    def add_norm(name):
        w.add_tensor(name, rng.uniform(0.9, 1.1, size=d).astype(np.float32))

    add("token_embd.weight", vocab, d, embd_type, embd_pool)
    add_norm("output_norm.weight")
    add("output.weight", vocab, d)
    for i in range(n_layers):
        p = f"blk.{i}."
        add_norm(p + "attn_norm.weight")
        add(p + "attn_q.weight", n_heads * hd, d)
        add(p + "attn_k.weight", n_kv * hd, d)
        add(p + "attn_v.weight", n_kv * hd, d)
        add(p + "attn_output.weight", d, n_heads * hd)
        add_norm(p + "ffn_norm.weight")
        add(p + "ffn_gate.weight", d_ff, d)
        add(p + "ffn_up.weight", d_ff, d)
        add(p + "ffn_down.weight", d, d_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({tname}) in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
