"""The default model in Tessera against llama.cpp (llama-cpp-python) on the same GGUF:
teacher-forced next-token distributions and greedy continuations."""
import os
import re
import tempfile

import numpy as np
import pytest

from conftest import llama_cpp_avx512, run_tessera

TEXTS = [
    # prose
    "The history of astronomy is long and rich. Ancient civilizations watched the night sky and "
    "recorded the motions of the Sun, the Moon and the planets. The Babylonians kept careful "
    "tables of eclipses, while Greek thinkers such as Aristarchus and Hipparchus proposed "
    "geometric models of the heavens. Centuries later, Copernicus placed the Sun at the centre "
    "of the known universe, Kepler described elliptical orbits, and Galileo turned a telescope "
    "toward Jupiter and discovered four of its moons. Newton then explained all of these motions "
    "with a single law of gravitation, and astronomy became a precise, predictive science. In the "
    "twentieth century, Hubble measured the distances to other galaxies and found that the "
    "universe is expanding, a discovery that reshaped our picture of the cosmos.",
    # code
    "def merge_sort(values):\n    \"\"\"Sorts a list with merge sort and returns a new list.\"\"\"\n"
    "    if len(values) <= 1:\n        return list(values)\n    middle = len(values) // 2\n"
    "    left = merge_sort(values[:middle])\n    right = merge_sort(values[middle:])\n"
    "    merged = []\n    i = j = 0\n    while i < len(left) and j < len(right):\n"
    "        if left[i] <= right[j]:\n            merged.append(left[i])\n            i += 1\n"
    "        else:\n            merged.append(right[j])\n            j += 1\n"
    "    merged.extend(left[i:])\n    merged.extend(right[j:])\n    return merged\n\n\n"
    "if __name__ == '__main__':\n    print(merge_sort([5, 3, 9, 1, 4, 8, 2, 7]))\n",
    # chat-formatted conversation with numbers
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nI have 3 apples and buy 12 more, then give away 7. How many apples do I "
    "have? Explain step by step, and then tell me a short fact about apples.<|im_end|>\n"
    "<|im_start|>assistant\nLet's work through it step by step. You start with 3 apples. Buying "
    "12 more gives 3 + 12 = 15 apples. Giving away 7 leaves 15 - 7 = 8 apples. So you have 8 "
    "apples. A short fact: apple trees can live for more than 100 years, and there are over "
    "7,500 known varieties of apples grown around the world.<|im_end|>\n",
]

# Tessera's CPU path reproduces llama.cpp's float operations bit for bit on this model (SiLU's
# exp, RMSNorm and RoPE rounding, the Q4_1 dot and f16 attention accumulation orders; see
# docs/design/llm_cpu_path.md), so every prompt must match: only the output projection's
# summation order still differs (logits within ~1e-5), which can flip a greedy token only at a
# near tie (margin < 0.1 is allowed below).
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):",
    "<|im_start|>user\nWrite a haiku about the moon.<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def llm(llama_cpp, model_path):
    return llama_cpp.Llama(model_path=model_path, n_ctx=1024, logits_all=True, n_threads=os.cpu_count(),
                           verbose=False, seed=0)


def llama_cpp_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float64)


def tessera_logits(tessera_bin, model_path, ids, vocab):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        run_tessera(tessera_bin, "score", "-m", model_path, "--ids", ",".join(map(str, ids)), "--out", out)
        return np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(len(ids), vocab)


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def test_teacher_forced_distributions_match(llama_cpp, llm, tessera_bin, model_path):
    """Top-1 agreement >= 98% and mean KL(llama.cpp || tessera) <= 0.01 over the corpus; against
    an AVX-512 build of llama.cpp, whose float operations Tessera reproduces, top-1 100% and mean
    KL <= 1e-9 (only the output projection's summation order differs). For scale, the same
    numbers between llama.cpp's own batched and token-by-token paths are printed: 8-bit
    activation quantization turns last-bit differences into rounding flips, so llama.cpp's two
    paths disagree at a mean KL of ~0.003."""
    single = llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_batch=1, n_ubatch=1, logits_all=True,
                             verbose=False)
    agree = kls = self_agree = self_kls = 0.0
    total = 0
    for i, text in enumerate(TEXTS):
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        assert len(ids) >= 128, f"text {i} has only {len(ids)} tokens"
        ref = llama_cpp_logits(llm, ids)
        got = tessera_logits(tessera_bin, model_path, ids, ref.shape[1])
        own = llama_cpp_logits(single, ids)
        assert np.isfinite(got).all()
        lp_ref = log_softmax(ref)
        kl = (np.exp(lp_ref) * (lp_ref - log_softmax(got))).sum(-1)
        kl_self = (np.exp(lp_ref) * (lp_ref - log_softmax(own))).sum(-1)
        top1 = (ref.argmax(-1) == got.argmax(-1))
        top1_self = (ref.argmax(-1) == own.argmax(-1))
        print(f"text {i}: {len(ids)} tokens | tessera: top-1 {top1.mean():.4f}, mean KL {kl.mean():.5f} | "
              f"llama.cpp token-by-token: top-1 {top1_self.mean():.4f}, mean KL {kl_self.mean():.5f}")
        agree += top1.sum()
        kls += kl.sum()
        self_agree += top1_self.sum()
        self_kls += kl_self.sum()
        total += len(ids)
    print(f"all {total} positions | tessera: top-1 {agree / total:.4f}, mean KL {kls / total:.5f} | "
          f"llama.cpp token-by-token: top-1 {self_agree / total:.4f}, mean KL {self_kls / total:.5f}")
    assert agree / total >= 0.98
    assert kls / total <= 0.01
    if llama_cpp_avx512(llama_cpp):
        assert agree == total and kls / total <= 1e-9, "the bit-exact CPU path drifted from llama.cpp"


def llama_cpp_greedy(llm, prompt_ids, n):
    """Greedy continuation in llama.cpp (not stopping at EOS); returns (tokens, top-2 margins)."""
    llm.reset()
    llm.eval(prompt_ids)
    tokens, margins = [], []
    for _ in range(n):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top2 = np.sort(logits)[-2:]
        tok = int(logits.argmax())
        tokens.append(tok)
        margins.append(top2[1] - top2[0])
        llm.eval([tok])
    return tokens, margins


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_continuation_matches(llama_cpp, llm, tessera_bin, model_path, prompt):
    prompt_ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    ref_tokens, margins = llama_cpp_greedy(llm, prompt_ids, 64)
    proc = run_tessera(tessera_bin, "run", "-m", model_path, "-n", 64, "--temp", 0, "--ignore-eos",
                       "--print-token-ids", prompt)
    m = re.search(r"token ids:([ 0-9]*)", proc.stderr)
    assert m, proc.stderr
    got = [int(t) for t in m.group(1).split()]
    # Both sides continue past end-of-generation tokens (--ignore-eos), so all 64 are compared.
    n = len(ref_tokens)
    first_diff = next((i for i in range(n) if i >= len(got) or got[i] != ref_tokens[i]), None)
    if first_diff is not None and margins[first_diff] >= 0.1 and not llama_cpp_avx512(llama_cpp):
        pytest.xfail("llama.cpp here is not an AVX-512 build, whose float operations Tessera reproduces: "
                     "last-bit differences remain and compound (docs/design/llm_cpu_path.md)")
    if first_diff is not None:
        assert margins[first_diff] < 0.1, (
            f"greedy tokens diverge at step {first_diff} where llama.cpp's top-2 margin is "
            f"{margins[first_diff]:.3f} (>= 0.1): llama.cpp {ref_tokens[first_diff:first_diff+5]} vs "
            f"tessera {got[first_diff:first_diff+5]}")
