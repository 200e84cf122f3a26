#!/usr/bin/env python3
"""CPU benchmark: the default model in Tessera and in llama.cpp (llama-cpp-python) on the same
cores and the same prompt. Prints prompt and generation tokens/s for both and their ratio, and
writes out/bench_cpu.{json,md}.

usage: bench/llm_cpu_bench.py [--model PATH] [--tessera build/tessera] [--threads N]
                              [--prompt-tokens 128] [--gen-tokens 128] [--repeats 3]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
BASE_TEXT = ("The history of astronomy is long and rich. Ancient civilizations watched the night sky "
             "and recorded the motions of the Sun, the Moon and the planets. ")


def default_model():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("TESSERA_MODEL") or os.path.join(base, "tessera", "SmolLM2-135M-Instruct.Q4_1.gguf")


def make_prompt(llm, n_tokens):
    text = BASE_TEXT
    while len(llm.tokenize(text.encode(), add_bos=False)) < n_tokens:
        text += BASE_TEXT
    ids = llm.tokenize(text.encode(), add_bos=False)[:n_tokens]
    return llm.detokenize(ids).decode("utf-8", errors="ignore")


def bench_tessera(binary, model, prompt, gen, threads):
    proc = subprocess.run([binary, "run", "-m", model, "-n", str(gen), "--temp", "0", "--ignore-eos",
                           "--threads", str(threads), prompt], capture_output=True, text=True, check=True)
    m = re.search(r"prompt: (\d+) tokens, ([\d.]+) tokens/s \| generation: (\d+) tokens, ([\d.]+) tokens/s",
                  proc.stderr)
    if not m:
        raise RuntimeError("could not parse tessera timings:\n" + proc.stderr)
    return {"prompt_tokens": int(m.group(1)), "prompt_tps": float(m.group(2)),
            "gen_tokens": int(m.group(3)), "gen_tps": float(m.group(4))}


def bench_llama_cpp(llm, prompt, gen):
    ids = llm.tokenize(prompt.encode(), add_bos=False)
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    prompt_s = time.perf_counter() - t0
    gen_s = 0.0
    for _ in range(gen):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))  # sampling not timed (favours llama.cpp)
        t0 = time.perf_counter()
        llm.eval([tok])
        gen_s += time.perf_counter() - t0
    return {"prompt_tokens": len(ids), "prompt_tps": len(ids) / prompt_s, "gen_tokens": gen,
            "gen_tps": gen / gen_s}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--tessera", default=str(ROOT / "build" / "tessera"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "out"))
    a = ap.parse_args()

    import llama_cpp
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=1024, n_batch=512, n_threads=a.threads,
                          n_threads_batch=a.threads, verbose=False)
    prompt = make_prompt(llm, a.prompt_tokens)
    runs = {"tessera": [], "llama.cpp": []}
    for i in range(a.repeats):
        print(f"[bench] repeat {i + 1}/{a.repeats}", file=sys.stderr, flush=True)
        runs["tessera"].append(bench_tessera(a.tessera, a.model, prompt, a.gen_tokens, a.threads))
        runs["llama.cpp"].append(bench_llama_cpp(llm, prompt, a.gen_tokens))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("prompt_tps", "gen_tps")} for k, v in runs.items()}
    ratio_gen = med["tessera"]["gen_tps"] / med["llama.cpp"]["gen_tps"]
    ratio_prompt = med["tessera"]["prompt_tps"] / med["llama.cpp"]["prompt_tps"]
    lines = [
        f"# CPU benchmark: {os.path.basename(a.model)}, {a.threads} threads, "
        f"{a.prompt_tokens}-token prompt, {a.gen_tokens} generated tokens, median of {a.repeats}",
        "",
        "| engine | prompt tokens/s | generation tokens/s |",
        "|---|---|---|",
    ]
    for k in ("tessera", "llama.cpp"):
        lines.append(f"| {k} | {med[k]['prompt_tps']:.1f} | {med[k]['gen_tps']:.1f} |")
    lines += ["", f"tessera / llama.cpp: prompt {ratio_prompt:.2f}x, generation {ratio_gen:.2f}x "
                  f"(target: generation >= 0.50x)"]
    report = "\n".join(lines)
    print(report)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "bench_cpu.md"), "w") as f:
        f.write(report + "\n")
    with open(os.path.join(a.out, "bench_cpu.json"), "w") as f:
        json.dump({"runs": runs, "median": med, "ratio_generation": ratio_gen,
                   "ratio_prompt": ratio_prompt, "threads": a.threads}, f, indent=2)


if __name__ == "__main__":
    main()
