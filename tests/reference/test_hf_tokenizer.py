"""Tessera's tokenizer.json support vs the Hugging Face `tokenizers` package on the tokenizer corpus.

tokenizer.json files are made here, offline:
  * converted from the default model's vocabulary (SmolLM2, byte-level BPE, with the extra
    merges of test_tokenizer.py so pre-tokenizer differences show in the ids) and written with
    the pre-tokenizer pipelines of real model families: SmolLM2 (Digits + ByteLevel regex),
    Llama-3 (Split regex + ByteLevel, ignore_merges, BOS from TemplateProcessing), Qwen2 (Split
    regex + ByteLevel, NFC normalizer) and GPT-2 (ByteLevel only), plus a non-special added
    token;
  * trained by the `tokenizers` package itself (BpeTrainer over the corpus; the package's own
    writer, merges stored as pairs).
Each is loaded by `tokenizers.Tokenizer.from_str` (so the files are valid for the oracle) and
by `tessera tokenize --batch`.

Checked for every valid-UTF-8 sample (Python strings cannot hold the invalid ones), with and
without special tokens added (add_bos) and parsed (HF: encode_special_tokens): identical ids,
and Tessera's decode equals HF's decode(skip_special_tokens=True). The Qwen2 pipeline's NFC
normalizer is checked further on generated text built to exercise it (combining sequences out of
order, Hangul jamo, composition exclusions, singletons, blocked marks)."""
import random
import json
import unicodedata

import pytest

from conftest import _require
from test_tokenizer import SAMPLES, _valid, extend_vocab, tessera_batch

LLAMA3_RX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
             r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
            r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEXTS = [s.decode("utf-8") for s in SAMPLES if _valid(s)]


def need(module):
    try:
        return __import__(module)
    except ImportError:
        _require(False, f"python package {module} is not installed")


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def split(rx):
    return {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}


def template_bos(token, tid):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": token, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": token, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {token: {"id": token, "ids": [tid], "tokens": [token]}}}


STYLES = {
    "smollm": dict(pre={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level(True)]}),
    "llama3": dict(pre={"type": "Sequence", "pretokenizers": [split(LLAMA3_RX), byte_level(False)]},
                   ignore_merges=True, bos="<|im_start|>"),
    "qwen2": dict(pre={"type": "Sequence", "pretokenizers": [split(QWEN2_RX), byte_level(False)]},
                  normalizer={"type": "NFC"}),
    "gpt2": dict(pre=byte_level(True)),
}


def tokenizer_json_from_gguf(gguf_path, style):
    """A tokenizer.json with the GGUF's vocabulary and merges and a real family's pipeline."""
    from gguf import GGUFReader
    src = GGUFReader(gguf_path)
    keys = ["tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"]
    tokens, types, merges = extend_vocab(*(src.fields[k].contents() for k in keys))
    st = STYLES[style]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, (t, ty) in enumerate(zip(tokens, types))
             if ty == 3]
    # A non-special added token (HF splits it out of text whatever encode_special_tokens says).
    added.append({"id": len(tokens), "content": "<tool>", "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": False})
    pp = byte_level(True)
    if "bos" in st:
        pp = {"type": "Sequence", "processors": [byte_level(True),
                                                  template_bos(st["bos"], tokens.index(st["bos"]))]}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": st.get("normalizer"), "pre_tokenizer": st["pre"], "post_processor": pp,
        "decoder": byte_level(True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": st.get("ignore_merges", False),
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ", 1) for m in merges] if style == "gpt2" else merges},
    }


def trained_tokenizer_json():
    """A byte-level BPE trained and written by the tokenizers package."""
    tk = need("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=700, special_tokens=["<s>", "</s>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXTS * 3, trainer)
    tok.post_processor = tk.processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return json.loads(tok.to_str())


@pytest.fixture(scope="module")
def tokenizer_files(model_path, tmp_path_factory):
    need("gguf")
    tmp = tmp_path_factory.mktemp("hf_tok")
    out = {}
    for style in STYLES:
        d = tmp / style
        d.mkdir()
        (d / "tokenizer.json").write_text(json.dumps(tokenizer_json_from_gguf(model_path, style)))
        out[style] = d / "tokenizer.json"
    d = tmp / "trained"
    d.mkdir()
    (d / "tokenizer.json").write_text(json.dumps(trained_tokenizer_json()))
    out["trained"] = d / "tokenizer.json"
    return out


def hf_disagreements(tessera_bin, path, texts, tmp_path, skip=lambda text: False):
    """Tessera (`tessera tokenize --batch`) against the `tokenizers` package on the tokenizer.json
    at `path`, for every text with and without special tokens added (add_bos) and parsed (HF:
    encode_special_tokens): ids, and Tessera's decode against HF's decode(skip_special_tokens).
    Returns (failure descriptions, pairs compared, pairs skipped by `skip`)."""
    tk = need("tokenizers")
    hf = tk.Tokenizer.from_str(path.read_text())
    samples = [t.encode("utf-8") for t in texts]
    failures, compared, skipped = [], 0, 0
    for add_bos in (True, False):
        for special in (True, False):
            rows = tessera_batch(tessera_bin, str(path), samples, add_bos, special, tmp_path)
            hf.encode_special_tokens = not special
            for text, (ids, decoded, _) in zip(texts, rows):
                if skip(text):
                    skipped += 1
                    continue
                compared += 1
                ref = hf.encode(text, add_special_tokens=add_bos).ids
                where = f"{path.parent.name} add_bos={add_bos} special={special} text={text!r}"
                if ids != ref:
                    failures.append(f"ids differ: {where}\n  tessera {ids}\n  hf      {ref}")
                    continue
                want = hf.decode(ids, skip_special_tokens=True).encode("utf-8")
                if decoded != want:
                    failures.append(f"decode differs: {where}\n  tessera {decoded!r}\n  hf {want!r}")
    return failures, compared, skipped


@pytest.mark.parametrize("name", list(STYLES) + ["trained"])
def test_tokenizer_json_matches_hf_tokenizers(name, tokenizer_files, tessera_bin, tmp_path):
    failures, n, _ = hf_disagreements(tessera_bin, tokenizer_files[name], TEXTS, tmp_path)
    non_nfc = sum(unicodedata.normalize("NFC", t) != t for t in TEXTS)
    print(f"{name}: {n - len(failures)}/{n} (sample, mode) pairs agree ({non_nfc} samples are "
          f"not in NFC)")
    assert non_nfc > 0, "the corpus should contain text that NFC changes"
    assert not failures, f"{len(failures)} of {n} disagree:\n" + "\n".join(failures[:15])


# Code point pools for text that NFC changes in every way UAX #15 describes; all of them date
# from Unicode 6 or earlier, so the `tokenizers` package's tables and Tessera's agree on them.
NFC_POOLS = [
    [chr(c) for c in range(0x41, 0x7B) if chr(c).isalpha()],          # ASCII letters (starters)
    [chr(c) for c in range(0xC0, 0x180)],                              # precomposed Latin
    [chr(c) for c in range(0x300, 0x370)],                             # combining marks, many classes
    [chr(c) for c in range(0x591, 0x5C8)],                             # Hebrew points (classes 10-26, 220, 230)
    [chr(c) for c in range(0x610, 0x61B)] + [chr(c) for c in range(0x64B, 0x660)],  # Arabic marks
    [chr(c) for c in range(0x1100, 0x1113)] + [chr(c) for c in range(0x1161, 0x1176)]
    + [chr(c) for c in range(0x11A8, 0x11C3)],                         # Hangul jamo L / V / T
    [chr(c) for c in range(0xAC00, 0xD7A4, 97)],                       # Hangul syllables (LV and LVT)
    [chr(c) for c in range(0x958, 0x960)] + [chr(c) for c in range(0x915, 0x93A)] + ["\u093c"],
    [chr(c) for c in range(0xFB1D, 0xFB4F)] + ["\u2adc"],              # composition exclusions
    ["\u212a", "\u212b", "\u2126", "\u0340", "\u0341", "\u0343", "\u0374", "\u037e", "\u0387"],
    [chr(c) for c in range(0x391, 0x3CA)] + ["\u0313", "\u0314", "\u0342", "\u0345"],  # Greek
    [chr(c) for c in range(0x1EA0, 0x1EFA)] + [chr(c) for c in range(0x1F00, 0x1FFD)],  # stacked
    [chr(c) for c in range(0xF900, 0xFA0E)],                           # CJK compatibility singletons
    ["\u0b47", "\u0b3e", "\u0b57", "\u0b56", "\u0dd9", "\u0dcf", "\u0dca", "\u0f71", "\u0f72",
     "\u0f74", "\u0f80", "\u0f40", "\u0fb5"],                       # two-part vowels, Tibetan
    [" ", "  ", "\n", "1", "!", "<|im_start|>"],
]


def nfc_texts(n, seed=0):
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        pools = rng.sample(NFC_POOLS, rng.randint(1, 4))
        texts.append("".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 14))))
    return texts


def test_nfc_normalizer_matches_hf_tokenizers(tokenizer_files, tessera_bin, tmp_path):
    """The Qwen2 pipeline (NFC, Split regex, ByteLevel) on 2000 generated texts, most of them
    changed by NFC."""
    texts = nfc_texts(2000)
    changed = sum(unicodedata.normalize("NFC", t) != t for t in texts)
    assert changed > 1000
    failures, n, _ = hf_disagreements(tessera_bin, tokenizer_files["qwen2"], texts, tmp_path)
    print(f"qwen2 NFC: {n - len(failures)}/{n} pairs agree ({changed} of {len(texts)} texts not in NFC)")
    assert not failures, f"{len(failures)} of {n} disagree:\n" + "\n".join(failures[:10])


def test_unsupported_pipeline_is_named(tokenizer_files, tessera_bin, tmp_path):
    import subprocess
    spec = json.loads(tokenizer_files["gpt2"].read_text())
    spec["pre_tokenizer"] = {"type": "Whitespace"}
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(spec))
    proc = subprocess.run([tessera_bin, "tokenize", str(p), "hi"], capture_output=True)
    assert proc.returncode != 0
    assert "pre-tokenizer 'Whitespace'" in proc.stderr.decode(), proc.stderr
