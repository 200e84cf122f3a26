"""Tessera's tokenizers vs llama.cpp (llama-cpp-python) on a corpus of hostile text.

Vocabularies: the default model (SmolLM2, byte-level BPE, pre "smollm"), the same vocabulary
re-labelled with other pre-tokenizers ("llama-bpe", "qwen2", "gpt-2", none -> "default"), and a
SentencePiece model trained here with byte fallback and converted to tokenizer.ggml.* metadata.
Each is written as a vocab-only GGUF that llama.cpp loads with vocab_only=True.

Checked for every sample, with and without BOS and special-token parsing:
  * token ids are identical;
  * Tokenizer::decode equals llama.cpp's detokenization (see expected_decode for the exact rule);
  * the streaming decoder equals the concatenated pieces decoded as UTF-8 with U+FFFD
    replacement (Python's decoder follows the same maximal-subpart rule)."""
import ctypes
import io
import pathlib
import subprocess

import pytest

from conftest import _require


def need(module):
    """Imports an optional reference package: skipped when missing, a failure in CI."""
    try:
        return __import__(module)
    except ImportError:
        _require(False, f"python package {module} is not installed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "reference" / "data" / "tokenizer_corpus.txt"

# Invalid or unusual UTF-8 (bytes, so it cannot live in the text corpus). Code points above
# U+10FFFF (e.g. b"\xf4\x90\x80\x80") are left out: llama.cpp aborts the process on them.
INVALID_UTF8 = [
    b"\xff",
    b"abc\xfe\xffdef",
    b"\xc3",
    b"\xc3(",
    b"caf\xe9 latin-1",
    b"\xe2\x82",
    b"\xe2\x82(x",
    b"\xf0\x9f\x98",
    b"\xf0\x9f\x98 cut emoji",
    b"\x80\x80\x80 stray continuation",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\x80 overlong nul \xc1\xbf",
    b"\xe0\x80\xaf overlong slash",
    b"\xf8\x88\x80\x80\x80 five-byte form",
    b"ok \xf0\x9f\x98\x80 then \xf0\x9f bad",
    b"<|im_start|>\xff<|im_end|>",
    b" \xc3\xa9\xcc",
]


def unescape(line):
    out, i = [], 0
    while i < len(line):
        c = line[i]
        if c != "\\" or i + 1 == len(line):
            out.append(c)
            i += 1
            continue
        e = line[i + 1]
        simple = {"n": "\n", "t": "\t", "r": "\r", "s": " ", "\\": "\\", "e": ""}
        if e in simple:
            out.append(simple[e])
            i += 2
        elif e in "uUx":
            n = {"u": 4, "U": 8, "x": 2}[e]
            out.append(chr(int(line[i + 2:i + 2 + n], 16)))
            i += 2 + n
        else:
            out.append(c)
            i += 1
    return "".join(out)


def load_corpus():
    samples = []
    for line in CORPUS.read_text(encoding="utf-8").split("\n"):
        if line.startswith("#") or line == "":
            continue
        samples.append(unescape(line).encode("utf-8"))
    return samples + INVALID_UTF8


SAMPLES = load_corpus()


def minimal_llama_writer(path):
    from gguf import GGUFWriter
    w = GGUFWriter(str(path), "llama")
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    return w


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Low-priority merges appended to the default model's vocabulary so that the pre-tokenizers'
# differences show in the ids: digit groups (smollm/qwen2 split every digit, llama-bpe keeps up
# to three, gpt-2 any run with a leading space), upper-case contractions (llama-bpe and qwen2
# are case-insensitive), punctuation followed by a newline and tab-newline runs.
EXTRA_MERGES = ["1 2", "12 3", "4 5", "45 6", "7 8", "78 9", "123 4", "Ġ 1", "Ġ1 2", "Ġ 4",
                "' M", "' S", "' D", "' T", ". Ċ", "! Ċ", "ĉ Ċ", ": Ċ", "Ġ ĉ", ", Ġ"]


def extend_vocab(tokens, types, merges):
    tokens, types, merges = list(tokens), list(types), list(merges)
    known, known_merges = set(tokens), set(merges)
    for m in EXTRA_MERGES:
        a, b = m.split(" ")
        if a not in known or m in known_merges:
            continue
        if a + b not in known:
            tokens.append(a + b)
            types.append(1)
            known.add(a + b)
        merges.append(m)
        known_merges.add(m)
    return tokens, types, merges


def copy_tokenizer_fields(src_path, w, *, pre, drop=(), extend=False):
    from gguf import GGUFReader, GGUFValueType
    src = GGUFReader(src_path)
    extended = {}
    if extend:
        keys = ["tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"]
        extended = dict(zip(keys, extend_vocab(*(src.fields[k].contents() for k in keys))))
    for key, f in src.fields.items():
        if not key.startswith("tokenizer.") or key in drop or key == "tokenizer.ggml.pre":
            continue
        val = extended.get(key, f.contents())
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            w.add_array(key, val)
        elif t == GGUFValueType.STRING:
            w.add_string(key, val)
        elif t == GGUFValueType.BOOL:
            w.add_bool(key, val)
        else:
            w.add_uint32(key, int(val))
    if pre is not None:
        w.add_string("tokenizer.ggml.pre", pre)


def training_text():
    """Deterministic multilingual training text for the SentencePiece model."""
    import inspect
    import json
    import textwrap
    parts = [inspect.getsource(json), inspect.getsource(textwrap)]
    parts += [s.decode("utf-8") for s in SAMPLES if b"\\" not in s and _valid(s)]
    return "\n".join(parts).split("\n")


def _valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


USER_DEFINED = ["<|user|>", "<tool>"]


def trained_spm():
    """A SentencePiece BPE model trained on training_text() with byte fallback, the USER_DEFINED
    symbols and one control symbol, <ctrl> (also the vocabulary of test_hf_spm_tokenizer.py)."""
    spm = need("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()), model_writer=model, vocab_size=1200,
        model_type="bpe", byte_fallback=True, character_coverage=0.999, split_digits=True,
        allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", user_defined_symbols=USER_DEFINED,
        control_symbols=["<ctrl>"], max_sentence_length=100000, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def write_spm_gguf(path, *, add_space_prefix=None, add_bos=None):
    sp = trained_spm()
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        tokens.append(piece)
        scores.append(sp.get_score(i))
        # llama.cpp token types, as its converter assigns them from the SentencePiece model
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        elif piece in USER_DEFINED:
            types.append(4)
        else:
            types.append(1)
    w = minimal_llama_writer(path)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    finish(w)
    return str(path)


@pytest.fixture(scope="module")
def vocabularies(model_path, tmp_path_factory):
    need("gguf")
    tmp = tmp_path_factory.mktemp("vocab")
    out = {"smollm": model_path}
    for pre in ["smollm", "llama-bpe", "qwen2", "gpt-2", None]:
        name = "smollm-ext" if pre == "smollm" else pre or "default"
        path = tmp / f"bpe-{name}.gguf"
        w = minimal_llama_writer(path)
        # llama-bpe: no add_bos_token key, so the pre-tokenizer's default (BOS on) is used
        drop = ("tokenizer.chat_template",) + (
            ("tokenizer.ggml.add_bos_token",) if pre == "llama-bpe" else ())
        copy_tokenizer_fields(model_path, w, pre=pre, drop=drop, extend=True)
        finish(w)
        out[name] = str(path)
    out["spm"] = write_spm_gguf(tmp / "spm.gguf")
    out["spm-noprefix"] = write_spm_gguf(tmp / "spm-noprefix.gguf", add_space_prefix=False,
                                         add_bos=False)
    return out


class LlamaVocab:
    def __init__(self, llama_cpp, path):
        self.lib = llama_cpp
        self.llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        self.vocab = self.llm._model.vocab
        self.bos = self.llm.token_bos()

    def tokenize(self, text, add_bos, special):
        return self.llm.tokenize(text, add_bos=add_bos, special=special)

    def piece(self, tok):
        buf = ctypes.create_string_buffer(256)
        n = self.lib.llama_token_to_piece(self.vocab, tok, buf, 256, 0, False)
        assert 0 <= n <= 256
        return buf.raw[:n]

    def detokenize(self, ids):
        arr = (self.lib.llama_token * max(1, len(ids)))(*ids)
        size = 64 + 16 * len(ids)
        buf = ctypes.create_string_buffer(size)
        n = self.lib.llama_detokenize(self.vocab, arr, len(ids), buf, size, False, False)
        assert 0 <= n <= size
        return buf.raw[:n]


def expected_decode(lv, name, ids):
    """llama.cpp's detokenization as Tessera defines decode():
    byte-level BPE: the concatenated pieces (llama_detokenize also applies clean_spaces for the
    gpt-2/llama-bpe/default families, a lossy English-specific clean-up Tessera leaves out);
    SentencePiece with add_space_prefix: starting with BOS, llama-cpp-python's Llama.detokenize
    (drops the inserted space after BOS); otherwise, and without add_space_prefix (where the
    Python wrapper would drop a real space), llama_detokenize."""
    if not name.startswith("spm"):
        return b"".join(lv.piece(t) for t in ids)
    if ids and ids[0] == lv.bos and name != "spm-noprefix":
        return lv.llm.detokenize(ids)
    return lv.detokenize(ids)


def tessera_batch(binary, model, samples, add_bos, special, tmp_path):
    batch = tmp_path / "batch.bin"
    batch.write_bytes(b"\0".join(samples))
    args = [binary, "tokenize", model, "--batch", str(batch)]
    if not add_bos:
        args.append("--no-bos")
    if not special:
        args.append("--no-special")
    proc = subprocess.run(args, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    rows = []
    for line in proc.stdout.decode().split("\n")[:-1]:
        ids, dec, streamed = line.split("\t")
        ids = [int(x) for x in ids.strip("[]").split(",") if x.strip()]
        rows.append((ids, bytes.fromhex(dec), bytes.fromhex(streamed)))
    assert len(rows) == len(samples)
    return rows


VOCABS = ["smollm", "smollm-ext", "llama-bpe", "qwen2", "gpt-2", "default", "spm", "spm-noprefix"]


@pytest.mark.parametrize("name", VOCABS)
def test_corpus_matches_llama_cpp(name, vocabularies, tessera_bin, llama_cpp, tmp_path):
    assert not any(b"\x00" in s for s in SAMPLES)  # NUL separates batch records
    lv = LlamaVocab(llama_cpp, vocabularies[name])
    failures = []
    n = 0
    for add_bos in (True, False):
        for special in (True, False):
            rows = tessera_batch(tessera_bin, vocabularies[name], SAMPLES, add_bos, special,
                                 tmp_path)
            for text, (ids, decoded, streamed) in zip(SAMPLES, rows):
                n += 1
                ref = lv.tokenize(text, add_bos, special)
                where = f"{name} add_bos={add_bos} special={special} text={text!r}"
                if ids != ref:
                    failures.append(f"ids differ: {where}\n  tessera {ids}\n  llama   {ref}")
                    continue
                want = expected_decode(lv, name, ids)
                if decoded != want:
                    failures.append(f"decode differs: {where}\n  tessera {decoded!r}\n"
                                    f"  llama   {want!r}")
                pieces = b"".join(lv.piece(t) for t in ids)
                want_stream = pieces.decode("utf-8", errors="replace").encode("utf-8")
                if streamed != want_stream:
                    failures.append(f"stream differs: {where}\n  tessera {streamed!r}\n"
                                    f"  want    {want_stream!r}")
    print(f"{name}: {n - len(failures)}/{n} (sample, mode) pairs agree")
    assert not failures, f"{len(failures)} of {n} disagree:\n" + "\n".join(failures[:15])


@pytest.mark.parametrize("name", ["smollm", "qwen2", "spm"])
def test_round_trip_of_valid_text(name, vocabularies, tessera_bin, tmp_path):
    """decode(encode(s)) == s for valid UTF-8 without special-token text."""
    texts = [s for s in SAMPLES if _valid(s) and b"<" not in s]
    rows = tessera_batch(tessera_bin, vocabularies[name], texts, True, False, tmp_path)
    bad = [(t, d) for t, (_, d, _) in zip(texts, rows) if d != t]
    assert not bad, bad[:5]


def test_unknown_pre_tokenizer_is_rejected(model_path, tessera_bin, tmp_path):
    path = tmp_path / "bad-pre.gguf"
    w = minimal_llama_writer(path)
    copy_tokenizer_fields(model_path, w, pre="no-such-pre", drop=("tokenizer.chat_template",))
    finish(w)
    proc = subprocess.run([tessera_bin, "tokenize", str(path), "hi"], capture_output=True)
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "no-such-pre" in err and "llama-bpe" in err and "smollm" in err, err


def test_cli_lists_pieces(model_path, tessera_bin):
    proc = subprocess.run([tessera_bin, "tokenize", model_path, "Hi\tthere\n<|im_end|>"],
                          capture_output=True, check=True)
    lines = proc.stdout.decode().split("\n")[:-1]
    assert lines[-1] == "2\t<|im_end|>"
    assert any(line.endswith("\t\\n") for line in lines), lines
    proc = subprocess.run([tessera_bin, "tokenize", "--ids", "--no-special", model_path,
                           "<|im_end|>"], capture_output=True, check=True)
    ids = proc.stdout.decode().strip()
    assert ids.startswith("[") and ids.endswith("]") and "2," not in ids
