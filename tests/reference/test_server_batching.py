"""Continuous batching through `tessera serve` on the default model: 32 concurrent streaming
clients, some of which hang up mid-stream. Afterwards the server is alive, every KV block is
back, and every finished output equals the same request run alone (greedy). The load generator
(bench/serve_load.py) is exercised against the same server."""
import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest

from test_server import Server, read_sse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [
    "The capital of France is", "Write a short poem about autumn.", "def add(a, b):",
    "Once upon a time", "The three laws of motion are", "List three colors:",
    "Why do cats purr?", "1, 1, 2, 3, 5, 8,", "In a distant galaxy,", "Dear diary, today",
    "The best way to learn programming is", "Water boils at",
]


@pytest.fixture(scope="module")
def server(tessera_bin, model_path):
    # A KV cache small enough that 32 clients force preemptions.
    s = Server(tessera_bin, model_path, "--max-queue", "64", "--max-running", "32",
               "--kv-cache-tokens", "512", "--max-step-tokens", "128")
    yield s
    s.stop()
    assert s.proc.returncode == 0, "".join(s.log)


def metrics(server):
    status, _, data = server.request("GET", "/metrics")
    assert status == 200
    values = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def body_for(server, i):
    chat = i % 2 == 1
    text = PROMPTS[i % len(PROMPTS)] + (" Please answer." * (i // len(PROMPTS)))
    b = {"model": server.model_id, "max_tokens": 16 + (i * 5) % 40, "temperature": 0,
         "stream": True, "stream_options": {"include_usage": True}}
    if chat:
        b["messages"] = [{"role": "user", "content": text}]
    else:
        b["prompt"] = text
    return "/v1/chat/completions" if chat else "/v1/completions", b


def stream_text(server, path, body, hang_up_after=None):
    """Returns (text, finish_reason), or None when this client hung up."""
    conn = server.connect(timeout=120)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    text, finish, pieces = "", None, 0
    for ev in read_sse(resp):
        if ev == "[DONE]":
            break
        assert "error" not in ev, ev
        for ch in ev["choices"]:
            piece = ch.get("text") if "text" in ch else ch.get("delta", {}).get("content")
            if piece:
                text += piece
                pieces += 1
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
        if hang_up_after is not None and pieces >= hang_up_after:
            conn.sock.shutdown(2)
            conn.close()
            return None
    conn.close()
    return text, finish


def test_32_concurrent_streams_with_disconnects_match_alone(server):
    n = 32
    rng = random.Random(7)
    hang_up = {i: rng.randint(1, 6) for i in rng.sample(range(n), 8)}
    results, errors = {}, []

    def client(i):
        try:
            path, body = body_for(server, i)
            results[i] = stream_text(server, path, body, hang_up.get(i))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(results) == n

    # Alive, nothing running, every KV block back (cached prefix blocks are free to evict).
    assert server.request("GET", "/health")[0] == 200
    deadline = time.time() + 10
    while time.time() < deadline:
        m = metrics(server)
        if m["tessera_requests_running"] == 0 and m["tessera_kv_blocks_used"] == 0:
            break
        time.sleep(0.05)
    assert m["tessera_requests_running"] == 0 and m["tessera_kv_blocks_used"] == 0, m
    assert m["tessera_preemptions_total"] > 0, "the small KV cache should have forced preemption"

    # Every finished output equals the same request run alone.
    finished = [i for i in range(n) if results[i] is not None]
    # (a client whose output ended before its hang-up point finished normally)
    assert len(finished) >= n - len(hang_up) and all(results[i] is not None for i in range(n) if i not in hang_up)
    for i in finished:
        path, body = body_for(server, i)
        alone = stream_text(server, path, body)
        assert results[i] == alone, f"request {i}: batched {results[i]!r} vs alone {alone!r}"


def test_load_generator_reports_no_failures(server, tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "serve_load.py"), "--url",
         f"http://127.0.0.1:{server.port}", "--clients", "8", "--requests", "16",
         "--prompt-tokens", "8:64", "--max-tokens", "4:16", "--disconnect", "0.25", "--json", str(tmp_path / "report.json")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["failures"] == {}
    assert report["requests_ok"] + report["requests_disconnected"] == 16
    assert report["output_tokens"] > 0 and report["output_tokens_per_s"] > 0
    assert report["ttft_ms_p50"] > 0
    assert server.request("GET", "/health")[0] == 200
