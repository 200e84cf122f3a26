#!/usr/bin/env python3
"""Closed-loop load generator for `tessera serve` (or any OpenAI-compatible server).

N concurrent clients each send streaming /v1/completions requests back to back until the
request count (or duration) is reached. Prompt and output lengths are drawn from distributions;
clients may hang up mid-stream at random, and may start spread over a ramp-up time. Reports
output and total tokens/s, TTFT / TPOT / ITL p50 and p99, and every failure by kind. Standard
library only, so it runs on bare GPU hosts.

  python3 bench/serve_load.py --url http://127.0.0.1:8080 --clients 32 --requests 128 \
      --prompt-tokens 64:256 --max-tokens 32:128 --disconnect 0.1 --json out/serve_load.json

Lengths are "N" or "LO:HI" (uniform). Prompts are token ids with --token-ids (exact lengths),
else words: two calibration requests first measure
the server tokenizer's tokens per word, so prompt lengths land within a few tokens of the target;
the report uses the server's own usage counts. TTFT is taken at the first chunk with text (with a
dummy model whose vocabulary exceeds the tokenizer's, ids past it carry no text).
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("time people way year day thing man world life hand part child eye woman place work "
         "week case point number group problem fact river cloud stone light sound water field").split()


def parse_range(text):
    lo, _, hi = text.partition(":")
    lo = int(lo)
    hi = int(hi) if hi else lo
    if lo < 0 or hi < lo:
        raise argparse.ArgumentTypeError(f"bad range {text!r}")
    return lo, hi


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.disconnected = 0
        self.failures = {}  # kind -> count
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.ttft, self.tpot, self.itl = [], [], []

    def fail(self, kind):
        with self.lock:
            self.failures[kind] = self.failures.get(kind, 0) + 1


def make_words(rng, n_words):
    # A numbered start keeps prompts distinct (no accidental prefix sharing).
    return f"Request {rng.randrange(1 << 30)}: " + " ".join(rng.choice(WORDS) for _ in range(n_words))


class PromptSize:
    """Words for a prompt of n tokens on the server's tokenizer: tokens = base + per_word * words,
    measured once with two prompts (calibrate); ~1.3 tokens per word until then."""

    def __init__(self):
        self.base, self.per_word = 4.0, 1.3

    def words(self, n_tokens):
        return max(1, round((n_tokens - self.base) / self.per_word))

    def calibrate(self, args, url, model):
        counts = []
        for n_words in (64, 512):
            body = {"model": model, "prompt": make_words(random.Random(n_words), n_words),
                    "max_tokens": 1, "temperature": 0}
            headers = {"Content-Type": "application/json"}
            if args.api_key:
                headers["Authorization"] = f"Bearer {args.api_key}"
            conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=args.timeout)
            try:
                conn.request("POST", "/v1/completions", json.dumps(body), headers)
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    return False
                counts.append(json.loads(data)["usage"]["prompt_tokens"])
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                return False
            finally:
                conn.close()
        self.per_word = (counts[1] - counts[0]) / (512 - 64)
        self.base = counts[0] - 64 * self.per_word
        return self.per_word > 0


def one_request(args, url, model, rng, stats, size):
    n_prompt = rng.randint(*args.prompt_tokens)
    if args.token_ids:  # exact lengths: random ids (the first keeps prompts distinct)
        prompt = [rng.randrange(100, 10000) for _ in range(n_prompt)]
    else:
        prompt = make_words(rng, size.words(n_prompt))
    max_tokens = rng.randint(*args.max_tokens)
    disconnect_after = None
    if rng.random() < args.disconnect:
        disconnect_after = rng.randint(1, max(1, max_tokens // 2))
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0}
    if args.ignore_eos:
        body["ignore_eos"] = True
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=args.timeout)
    start = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            stats.fail(f"http_{resp.status}")
            return
        first = last = None
        chunks = 0
        gaps = []
        usage = None
        finished = False
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                finished = True
                break
            obj = json.loads(data)
            if "error" in obj:
                stats.fail("stream_error")
                return
            if obj.get("usage"):
                usage = obj["usage"]
            for ch in obj.get("choices", []):
                if ch.get("text"):
                    now = time.perf_counter()
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last = now
                    chunks += 1
            if disconnect_after is not None and chunks >= disconnect_after:
                conn.sock.shutdown(2)
                with stats.lock:
                    stats.disconnected += 1
                return
        if not finished or usage is None:
            stats.fail("truncated_stream")
            return
        with stats.lock:
            stats.ok += 1
            stats.prompt_tokens += usage["prompt_tokens"]
            stats.output_tokens += usage["completion_tokens"]
            if first is not None:
                stats.ttft.append(first - start)
                n = usage["completion_tokens"]
                if n > 1:
                    stats.tpot.append((last - first) / (n - 1))
            stats.itl.extend(gaps)
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
        stats.fail(type(e).__name__)
    finally:
        conn.close()


def run(args):
    url = urllib.parse.urlparse(args.url)
    model = args.model
    if not model:
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        conn.request("GET", "/v1/models", headers=headers)
        model = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()
    size = PromptSize()
    if not args.token_ids and not size.calibrate(args, url, model):
        print("serve_load: prompt-length calibration failed; assuming 1.3 tokens per word",
              file=sys.stderr)
    stats = Stats()
    remaining = [args.requests]
    lock = threading.Lock()
    deadline = time.perf_counter() + args.duration if args.duration else None

    def client(i):
        rng = random.Random(args.seed * 1000003 + i)
        if args.ramp_up > 0:  # client i starts at i / clients of the ramp
            time.sleep(args.ramp_up * i / args.clients)
        while True:
            with lock:
                if remaining[0] <= 0 or (deadline and time.perf_counter() > deadline):
                    return
                remaining[0] -= 1
            one_request(args, url, model, rng, stats, size)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    last_report = t0
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        if args.progress and time.perf_counter() - last_report > 5:
            last_report = time.perf_counter()
            print(f"  {time.perf_counter() - t0:6.1f} s: {stats.ok} ok, {stats.disconnected} "
                  f"disconnected, {sum(stats.failures.values())} failed", file=sys.stderr)
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    report = {
        "clients": args.clients,
        "ramp_up_s": args.ramp_up,
        "tokens_per_word": None if args.token_ids else round(size.per_word, 3),
        "requests_ok": stats.ok,
        "requests_disconnected": stats.disconnected,
        "failures": stats.failures,
        "elapsed_s": round(elapsed, 3),
        "prompt_tokens": stats.prompt_tokens,
        "output_tokens": stats.output_tokens,
        "output_tokens_per_s": round(stats.output_tokens / elapsed, 1),
        "total_tokens_per_s": round((stats.output_tokens + stats.prompt_tokens) / elapsed, 1),
        "ttft_ms_p50": ms(percentile(stats.ttft, 50)), "ttft_ms_p99": ms(percentile(stats.ttft, 99)),
        "tpot_ms_p50": ms(percentile(stats.tpot, 50)), "tpot_ms_p99": ms(percentile(stats.tpot, 99)),
        "itl_ms_p50": ms(percentile(stats.itl, 50)), "itl_ms_p99": ms(percentile(stats.itl, 99)),
    }
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--model", default="", help="model id (default: the server's first)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--duration", type=float, default=0, help="stop starting requests after S seconds")
    ap.add_argument("--token-ids", action="store_true",
                    help="send prompts as token ids (ids 100..9999; exact prompt lengths)")
    ap.add_argument("--ramp-up", type=float, default=0,
                    help="start the clients evenly over S seconds instead of all at once")
    ap.add_argument("--prompt-tokens", type=parse_range, default=(64, 256))
    ap.add_argument("--max-tokens", type=parse_range, default=(32, 128))
    ap.add_argument("--disconnect", type=float, default=0.0, help="probability a client hangs up mid-stream")
    ap.add_argument("--ignore-eos", action="store_true", help="generate exactly max_tokens")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="also write the report here")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    report = run(args)
    for k, v in report.items():
        print(f"{k:24s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if not report["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
