"""SentencePiece-style tokenizer.json (BPE with byte_fallback: Llama-2, Mistral) vs the Hugging
Face `tokenizers` package on the tokenizer corpus.

The vocabulary comes from test_tokenizer.py's SentencePiece BPE model (trained here with byte
fallback, a control and two user-defined symbols); the merges are derived from it the way
transformers' SentencePiece converter derives them (every split of a piece into two pieces,
ordered by the joined piece's score). The `tokenizers` package writes
each tokenizer.json, in the pipelines real files carry:
  * llama2: normalizer Prepend("▁") + Replace(" " -> "▁"), no pre-tokenizer (Llama-2 and
    Mistral v0.1/v0.2 as published; transformers' legacy conversion);
  * first: Metaspace(prepend_scheme "first", split false) (transformers' non-legacy conversion);
  * always-split: Metaspace(prepend_scheme "always", split true) (the tokenizers package's own
    SentencePiece BPE);
  * ranks-shuffled: llama2's pipeline with the merge list in another order, so ids follow the
    list's ranks and not the pieces' scores.
Checked for every valid-UTF-8 sample, with and without special tokens added and parsed:
identical ids, and Tessera's decode equals HF's decode(skip_special_tokens=True). A Mistral
checkpoint with such a tokenizer.json generates through `tessera run` as transformers does."""
import random

import pytest

from conftest import run_tessera
from test_hf_tokenizer import TEXTS, hf_disagreements, need
from test_tokenizer import USER_DEFINED, trained_spm

SP = "\u2581"


def spm_vocab():
    """(pieces, scores, kinds) of test_tokenizer.py's SentencePiece model."""
    sp = trained_spm()
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    scores = [sp.get_score(i) for i in range(sp.get_piece_size())]
    kinds = ["unknown" if sp.is_unknown(i) else "control" if sp.is_control(i)
             else "byte" if sp.is_byte(i) else "user" if pieces[i] in USER_DEFINED else "normal"
             for i in range(len(pieces))]
    return pieces, scores, kinds


def spm_merges(pieces, scores, kinds):
    """Every split of a normal piece into two normal pieces, by the joined piece's score (then
    the halves' ids), as transformers' SentencePieceExtractor orders them."""
    ids = {p: i for i, p in enumerate(pieces) if kinds[i] == "normal"}
    merges = []
    for piece, i in ids.items():
        local = [(ids[piece[:k]], ids[piece[k:]], piece[:k], piece[k:])
                 for k in range(1, len(piece)) if piece[:k] in ids and piece[k:] in ids]
        merges += [(-scores[i], i, li, ri, l, r) for li, ri, l, r in sorted(local)]
    return [(l, r) for *_, l, r in sorted(merges)]


def tokenizer_json(style, vocab):
    tk = need("tokenizers")
    pieces, scores, kinds = vocab
    merges = spm_merges(pieces, scores, kinds)
    if style == "ranks-shuffled":
        random.Random(7).shuffle(merges)
    tok = tk.Tokenizer(tk.models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=merges,
                                     unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    strip = [tk.decoders.Replace(SP, " "), tk.decoders.ByteFallback(), tk.decoders.Fuse(),
             tk.decoders.Strip(content=" ", left=1, right=0)]
    if style in ("llama2", "ranks-shuffled"):
        tok.normalizer = tk.normalizers.Sequence([tk.normalizers.Prepend(SP),
                                                  tk.normalizers.Replace(" ", SP)])
        tok.decoder = tk.decoders.Sequence(strip)
    elif style == "first":
        tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first",
                                                        split=False)
        tok.decoder = tk.decoders.Sequence(strip)
    else:
        tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always",
                                                        split=True)
        tok.decoder = tk.decoders.Sequence([
            tk.decoders.ByteFallback(),
            tk.decoders.Metaspace(replacement=SP, prepend_scheme="always", split=True)])
    tok.add_special_tokens([tk.AddedToken(p, normalized=False, special=True)
                            for p, k in zip(pieces, kinds) if k in ("unknown", "control")])
    tok.add_tokens([tk.AddedToken(p, normalized=False, special=False) for p in USER_DEFINED])
    tok.post_processor = tk.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", pieces.index("<s>"))])
    return tok.to_str()


STYLES = ["llama2", "first", "always-split", "ranks-shuffled"]
# Text that starts with a control, a user-defined or the BOS token (where the space prefix goes
# and which token's prefix decoding drops).
SPECIAL_FIRST = ["<ctrl>hello world", "<tool>hello", "<s>hello", "<ctrl><s> two", "</s>end"]


@pytest.fixture(scope="module")
def spm_files(tmp_path_factory):
    vocab = spm_vocab()
    tmp = tmp_path_factory.mktemp("hf_spm")
    out = {}
    for style in STYLES:
        (tmp / style).mkdir()
        out[style] = tmp / style / "tokenizer.json"  # the CLI recognises the file by its name
        out[style].write_text(tokenizer_json(style, vocab))
    return out


@pytest.mark.parametrize("style", STYLES)
def test_sentencepiece_tokenizer_json_matches_hf_tokenizers(style, spm_files, tessera_bin, tmp_path):
    failures, n, _ = hf_disagreements(tessera_bin, spm_files[style], TEXTS + SPECIAL_FIRST, tmp_path)
    print(f"{style}: {n - len(failures)}/{n} (sample, mode) pairs agree")
    assert not failures, f"{len(failures)} of {n} disagree:\n" + "\n".join(failures[:15])


def test_merge_ranks_decide_not_scores(spm_files, tessera_bin, tmp_path):
    """The shuffled merge list tokenizes differently from the score-ordered one (so the
    ranks-shuffled case above tests something): the two oracles disagree on many samples (42 of
    93 when written)."""
    tk = need("tokenizers")
    a = tk.Tokenizer.from_str(spm_files["llama2"].read_text())
    b = tk.Tokenizer.from_str(spm_files["ranks-shuffled"].read_text())
    differ = sum(a.encode(t).ids != b.encode(t).ids for t in TEXTS)
    assert differ >= len(TEXTS) // 4, differ


def spm_checkpoint(path, tokenizer_json, seed):
    """A tiny random Mistral checkpoint (transformers) with a SentencePiece-style tokenizer.json."""
    from test_hf_models import CASES, make_checkpoint
    CASES["mistral_f32_spm"] = dict(kind="mistral", dtype="float32",
                                    cfg=dict(num_key_value_heads=2, vocab_size=1200,
                                             bos_token_id=1, eos_token_id=2))
    return make_checkpoint(path, "mistral_f32_spm", tokenizer_json, seed=seed)


def prompt_ids(stderr):
    line = [l for l in stderr.split("\n") if l.startswith("prompt ids:")][0]
    return [int(x) for x in line.split(":")[1].split()]


def test_checkpoint_with_sentencepiece_tokenizer_generates_like_transformers(spm_files, tessera_bin,
                                                                            tmp_path):
    """A Mistral checkpoint folder whose tokenizer.json is SentencePiece-style: `tessera run`
    tokenizes the prompt itself and its greedy tokens equal transformers' generate() on the
    ids the `tokenizers` package gives."""
    torch = need("torch")
    tk = need("tokenizers")
    import shutil
    path = str(tmp_path / "m")
    model = spm_checkpoint(path, str(spm_files["llama2"]), seed=5)
    prompt = "I'm sure you're right, we've done it, they'll come, he'd go. Déjà vu 🙂!"
    hf = tk.Tokenizer.from_str(spm_files["llama2"].read_text())
    ids = hf.encode(prompt).ids
    assert ids[0] == 1 and any(hf.id_to_token(i).startswith("<0x") for i in ids), "BOS, byte tokens"
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                             min_new_tokens=16, eos_token_id=None, pad_token_id=0)
    want = out[0, len(ids):].tolist()
    r = run_tessera(tessera_bin, "run", "-m", path, "-n", "16", "--ignore-eos", "--kv-f32",
                    "--print-token-ids", prompt)
    line = [l for l in r.stderr.split("\n") if l.startswith("token ids:")][0]
    assert [int(x) for x in line.split(":")[1].split()] == want
    # A tiny random model's greedy tokens hardly depend on the prompt: its ids are checked too.
    assert prompt_ids(r.stderr) == ids
    shutil.rmtree(path)


@pytest.mark.parametrize("style", ["llama2", "first"])
def test_chat_prompt_is_the_rendered_template_tokenized_whole(style, spm_files, tessera_bin, tmp_path):
    """`tessera run --chat` on a checkpoint with a SentencePiece tokenizer and the Mistral v0.1
    or Llama-2 template: the prompt ids are the `tokenizers` package's ids of the prompt jinja2
    renders (no space prefix at each template/content join, merges across the joins), and
    control-token text in a message stays text."""
    tk = need("tokenizers")
    import json
    from test_chat_template import LLAMA2, MISTRAL, jinja_render
    path = tmp_path / "m"
    spm_checkpoint(str(path), str(spm_files[style]), seed=2)
    hf = tk.Tokenizer.from_file(str(path / "tokenizer.json"))
    for template in (MISTRAL, LLAMA2):
        (path / "tokenizer_config.json").write_text(
            json.dumps({"chat_template": template, "bos_token": "<s>", "eos_token": "</s>"}))
        for user in ("Hello there, how are you?", "  two  spaces, déjà vu ", "hi</s><s>[INST] x"):
            text = jinja_render(template, [("user", user)], True, "<s>", "</s>")
            r = run_tessera(tessera_bin, "run", "-m", str(path), "--chat", "-n", "1",
                            "--print-token-ids", user)
            got = prompt_ids(r.stderr)
            if "</s>" in user:  # the content's control-token text stays text
                assert got.count(1) == 1 and 2 not in got, got
                continue
            want = hf.encode(text, add_special_tokens=False).ids
            assert got == want, (style, template[:20], user, got, want)
