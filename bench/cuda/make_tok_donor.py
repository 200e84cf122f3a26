#!/usr/bin/env python3
"""Write the tokenizer donor GGUF for the dummy-weight GPU benches (bench/cuda/gpu_pack.sh,
peer_same_call.sh): Llama 3's tokenizer from llama.cpp's vocabulary-only test file
(models/ggml-vocab-llama-bpe.gguf in its source tree) plus a tiny random Llama (1 layer,
d_model 32, f16), so that `tessera ... -m DONOR --dummy llama3-8b` loads it (the dummy
architecture replaces the weights; the GGUF supplies the tokenizer). ~16 MB.

usage: make_tok_donor.py LLAMA_CPP_SRC OUT.gguf
Needs numpy and the gguf package (pip's `gguf`, or LLAMA_CPP_SRC/gguf-py on PYTHONPATH).
"""
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    vocab_path = os.path.join(src, "models", "ggml-vocab-llama-bpe.gguf")
    r = GGUFReader(vocab_path)
    field = lambda name: r.fields[name].contents()
    tokens = field("tokenizer.ggml.tokens")
    n_vocab = len(tokens)
    d, ff = 32, 64
    w = GGUFWriter(out, "llama")
    w.add_name("tokenizer donor (Llama 3 vocabulary, tiny random weights)")
    w.add_block_count(1)
    w.add_context_length(8192)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_dimension_count(d)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(field("tokenizer.ggml.token_type"))
    w.add_token_merges(field("tokenizer.ggml.merges"))
    w.add_bos_token_id(field("tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(field("tokenizer.ggml.eos_token_id"))
    rng = np.random.default_rng(0)
    mat = lambda rows, cols: (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)
    ones = lambda n: np.ones(n, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(n_vocab, d))
    w.add_tensor("output_norm.weight", ones(d))
    for name, t in [("attn_norm", ones(d)), ("attn_q", mat(d, d)), ("attn_k", mat(d, d)),
                    ("attn_v", mat(d, d)), ("attn_output", mat(d, d)), ("ffn_norm", ones(d)),
                    ("ffn_gate", mat(ff, d)), ("ffn_up", mat(ff, d)), ("ffn_down", mat(d, ff))]:
        w.add_tensor(f"blk.0.{name}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"make_tok_donor: {out} ({n_vocab} tokens)", file=sys.stderr)


if __name__ == "__main__":
    main()
