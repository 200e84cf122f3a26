"""End-to-end tests of `tessera serve` on the default model, using only the standard library:
OpenAI response shapes (streaming and not), greedy parity with `tessera run`, stop strings,
validation (400s in the OpenAI error shape), limits (413/431/429), API keys, client disconnects,
Prometheus metrics and a clean SIGTERM drain."""
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import run_tessera

CTX = 512
API_KEY = "test-key-0123456789"


class Server:
    def __init__(self, binary, model, *extra):
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--ctx", str(CTX), *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        assert self.port, "server did not start:\n" + "".join(self.log)
        self.model_id = os.path.basename(model)[: -len(".gguf")]
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        for _ in range(200):
            if self.request("GET", "/ready", key=API_KEY)[0] == 200:
                break
            time.sleep(0.05)

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.log.append(line.decode("utf-8", "replace"))

    def connect(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, key=None, headers=None):
        conn = self.connect()
        h = dict(headers or {})
        if key:
            h["Authorization"] = f"Bearer {key}"
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(tessera_bin, model_path):
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
        f.write("# test keys\n\nother-key\n" + API_KEY + "\n")
        key_file = f.name
    # One running sequence: the queue tests below need a request that waits behind another.
    s = Server(tessera_bin, model_path, "--api-key-file", key_file, "--max-queue", "1", "--read-timeout", "1",
               "--max-running", "1")
    yield s
    s.stop()
    os.unlink(key_file)
    assert s.proc.returncode == 0, "".join(s.log)


def call(server, path, body, **kw):
    status, headers, data = server.request("POST", path, body, key=API_KEY, **kw)
    return status, headers, data


def post_json(server, path, body):
    status, _, data = call(server, path, body)
    assert status == 200, data
    return json.loads(data)


def read_sse(resp):
    """Yields decoded JSON events (or '[DONE]') from an SSE response; checks strict UTF-8."""
    while True:
        line = resp.readline()
        if not line:
            return
        line.decode("utf-8")  # raises if a chunk split a character
        line = line.strip()
        if not line:
            continue
        assert line.startswith(b"data: "), line
        payload = line[len(b"data: "):]
        yield "[DONE]" if payload == b"[DONE]" else json.loads(payload)


def stream(server, path, body):
    conn = server.connect()
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.getheader("Content-Type").startswith("text/event-stream")
    events = list(read_sse(resp))
    conn.close()
    return events


def check_usage(u):
    assert u["prompt_tokens"] > 0 and u["completion_tokens"] >= 0
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


def test_models_ready_health(server):
    status, _, data = server.request("GET", "/v1/models", key=API_KEY)
    assert status == 200
    models = json.loads(data)
    assert models["object"] == "list" and models["data"][0]["id"] == server.model_id
    assert server.request("GET", "/ready", key=API_KEY)[0] == 200
    status, _, data = server.request("GET", "/health")  # no key needed
    assert status == 200 and json.loads(data)["status"] == "ok"


def test_chat_greedy_matches_cli_run(server, tessera_bin, model_path):
    prompt, n = "What is the capital of France?", 24
    body = {"model": server.model_id, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": n, "temperature": 0}
    r = post_json(server, "/v1/chat/completions", body)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    assert r["model"] == server.model_id and isinstance(r["created"], int)
    choice = r["choices"][0]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length")
    check_usage(r["usage"])
    assert r["usage"]["completion_tokens"] <= n
    cli = run_tessera(tessera_bin, "run", "-m", model_path, "--temp", 0, "-n", n, "--chat", prompt)
    assert choice["message"]["content"] == cli.stdout[:-1]  # run adds one newline

    events = stream(server, "/v1/chat/completions",
                    {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == choice["message"]["content"]
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == choice["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == r["usage"]


def test_completion_shapes_and_length(server):
    body = {"model": server.model_id, "prompt": "The capital of France is", "max_tokens": 6,
            "ignore_eos": True}
    r = post_json(server, "/v1/completions", body)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    assert r["choices"][0]["finish_reason"] == "length" and r["choices"][0]["text"]
    assert r["usage"]["completion_tokens"] == 6
    check_usage(r["usage"])
    events = stream(server, "/v1/completions", {**body, "stream": True})
    assert events[-1] == "[DONE]"
    assert all("usage" not in e for e in events[:-1])  # include_usage not asked
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == r["choices"][0]["text"]
    assert events[-2]["choices"][0]["finish_reason"] == "length"


def test_completion_prompt_as_token_ids(server, tessera_bin, model_path):
    """A prompt given as token ids (the OpenAI list-of-integers shape, and a list of one such
    list) generates exactly what the same ids given as text generate; ids outside the vocabulary
    or not integers are 400."""
    text = "The capital of France is"
    out = subprocess.run([tessera_bin, "tokenize", "--ids", model_path, text], capture_output=True,
                         text=True, check=True).stdout
    ids = json.loads(out)
    body = {"model": server.model_id, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    want = post_json(server, "/v1/completions", {**body, "prompt": text})
    assert want["usage"]["prompt_tokens"] == len(ids)
    for prompt in (ids, [ids]):
        got = post_json(server, "/v1/completions", {**body, "prompt": prompt})
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        assert got["usage"] == want["usage"]
    for bad in ([1, 10_000_000], [1, -1], [1, 2.5], [[1], [2]]):
        status, _, data = call(server, "/v1/completions", {**body, "prompt": bad})
        assert status == 400 and len(data) < 4096, (bad, data)
        assert "error" in json.loads(data)


def test_prompt_plus_max_tokens_over_context_finishes_with_length(server):
    prompt = "one two three four five six seven eight nine ten " * 40  # ~400 tokens
    r = post_json(server, "/v1/completions", {"model": server.model_id, "prompt": prompt,
                                              "max_tokens": 400, "ignore_eos": True})
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["total_tokens"] == CTX


def test_prompt_longer_than_context_is_400_with_counts(server):
    status, _, data = call(server, "/v1/completions",
                           {"model": server.model_id, "prompt": "word " * 2000})
    assert status == 400 and len(data) < 4096
    err = json.loads(data)["error"]
    assert str(CTX) in err["message"] and re.search(r"\b20\d\d\b", err["message"]), err
    assert err["code"] == "context_length_exceeded"


def test_stop_strings(server):
    base = {"model": server.model_id, "prompt": "The capital of France is", "max_tokens": 32,
            "ignore_eos": True}
    full = post_json(server, "/v1/completions", base)["choices"][0]["text"]
    words = full.split()
    assert len(words) > 4, full
    stop = words[3]
    for stop_field in (stop, ["zzzz-never", stop]):
        r = post_json(server, "/v1/completions", {**base, "stop": stop_field})
        assert r["choices"][0]["text"] == full[: full.index(stop)]
        assert r["choices"][0]["finish_reason"] == "stop"
    events = stream(server, "/v1/completions", {**base, "stop": stop, "stream": True})
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == full[: full.index(stop)]


def test_seeded_sampling_is_reproducible(server):
    body = {"model": server.model_id, "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": 16, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "min_p": 0.02,
            "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.1, "repetition_penalty": 1.1,
            "no_repeat_ngram_size": 3, "priority": 2, "n": 1}
    a = post_json(server, "/v1/chat/completions", body)["choices"][0]["message"]["content"]
    b = post_json(server, "/v1/chat/completions", body)["choices"][0]["message"]["content"]
    assert a == b
    # The seed must actually drive sampling: other seeds (and greedy) give other text.
    others = {post_json(server, "/v1/chat/completions", {**body, "seed": s})["choices"][0]["message"]["content"]
              for s in (8, 9, 10)}
    greedy = post_json(server, "/v1/chat/completions", {**body, "temperature": 0})["choices"][0]["message"]["content"]
    assert others != {a}
    assert greedy != a or others != {greedy}


def _bad_bodies(model):
    msgs = [{"role": "user", "content": "hi"}]
    chat = {"model": model, "messages": msgs}
    comp = {"model": model, "prompt": "hi"}
    big = "x" * 20000
    return [
        ("/v1/chat/completions", b"{not json", None),
        ("/v1/chat/completions", b"[1, 2]", None),
        ("/v1/chat/completions", b"[" * 5000 + b"]" * 5000, None),
        ("/v1/chat/completions", {"messages": msgs}, "model"),
        ("/v1/chat/completions", {**chat, "model": big}, "model"),
        ("/v1/chat/completions", {**chat, "model": 5}, "model"),
        ("/v1/chat/completions", {"model": model}, "messages"),
        ("/v1/chat/completions", {"model": model, "messages": []}, "messages"),
        ("/v1/chat/completions", {"model": model, "messages": "hi"}, "messages"),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "wizard", "content": "x"}]},
         "messages[0].role"),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": 5}]},
         "messages[0].content"),
        ("/v1/chat/completions", {**chat, "temperature": "hot"}, "temperature"),
        ("/v1/chat/completions", {**chat, "temperature": -1}, "temperature"),
        ("/v1/chat/completions", b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}],'
                                 b' "temperature": NaN}' % model.encode(), None),
        ("/v1/chat/completions", b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}],'
                                 b' "temperature": 1e400}' % model.encode(), None),
        ("/v1/chat/completions", {**chat, "temperature": 1e300}, "temperature"),
        ("/v1/chat/completions", {**chat, "top_p": 0}, "top_p"),
        ("/v1/chat/completions", {**chat, "top_p": 1.5}, "top_p"),
        ("/v1/chat/completions", {**chat, "top_k": 2.5}, "top_k"),
        ("/v1/chat/completions", {**chat, "min_p": -0.1}, "min_p"),
        ("/v1/chat/completions", {**chat, "presence_penalty": 3}, "presence_penalty"),
        ("/v1/chat/completions", {**chat, "frequency_penalty": "x"}, "frequency_penalty"),
        ("/v1/chat/completions", {**chat, "repetition_penalty": 0}, "repetition_penalty"),
        ("/v1/chat/completions", {**chat, "max_tokens": -1}, "max_tokens"),
        ("/v1/chat/completions", {**chat, "max_tokens": 10**30}, "max_tokens"),
        ("/v1/chat/completions", {**chat, "max_tokens": CTX + 1}, "max_tokens"),
        ("/v1/chat/completions", {**chat, "seed": "x"}, "seed"),
        ("/v1/chat/completions", {**chat, "n": 17}, "n"),
        ("/v1/chat/completions", {**chat, "n": 10**6}, "n"),
        ("/v1/chat/completions", {**chat, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ("/v1/chat/completions", {**chat, "stop": [""]}, "stop"),
        ("/v1/chat/completions", {**chat, "stop": [1]}, "stop"),
        ("/v1/chat/completions", {**chat, "stop": big}, "stop"),
        ("/v1/chat/completions", {**chat, "top_logprobs": 2}, "top_logprobs"),
        ("/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/v1/chat/completions", {**chat, "stream": "yes"}, "stream"),
        ("/v1/chat/completions", {**chat, "stream_options": {"include_usage": True}}, "stream_options"),
        ("/v1/chat/completions", {**chat, "priority": "high"}, "priority"),
        ("/v1/chat/completions", {**chat, "no_repeat_ngram_size": -2}, "no_repeat_ngram_size"),
        ("/v1/completions", {"model": model}, "prompt"),
        ("/v1/completions", {**comp, "prompt": [1, 2.5, 3]}, "prompt"),
        ("/v1/completions", {**comp, "prompt": ["a", "b"]}, "prompt"),
        ("/v1/completions", {**comp, "prompt": ""}, "prompt"),
        ("/v1/completions", {**comp, "logprobs": 6}, "logprobs"),
    ]


def test_validation_errors_are_400_in_openai_shape(server):
    for path, body, param in _bad_bodies(server.model_id):
        status, headers, data = call(server, path, body)
        assert status == 400, (body if isinstance(body, bytes) else json.dumps(body))[:200]
        assert len(data) < 4096 and headers["Content-Type"] == "application/json"
        err = json.loads(data)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], err
        assert err["type"] == "invalid_request_error"
        assert err["param"] == param, (param, err)
    # the server still answers normally afterwards
    r = post_json(server, "/v1/completions", {"model": server.model_id, "prompt": "Hi", "max_tokens": 2})
    assert r["choices"][0]["text"] is not None


def test_unknown_route_and_method(server):
    status, _, data = server.request("GET", "/v1/nope", key=API_KEY)
    assert status == 404 and "error" in json.loads(data)
    status, headers, data = server.request("GET", "/v1/chat/completions", key=API_KEY)
    assert status == 405 and headers.get("Allow") == "POST"


def test_api_key(server):
    body = {"model": server.model_id, "prompt": "Hi", "max_tokens": 1}
    for key in (None, "wrong-key", API_KEY + "x", API_KEY[:-1]):
        status, headers, data = server.request("POST", "/v1/completions", body, key=key)
        assert status == 401 and json.loads(data)["error"]["code"] == "invalid_api_key"
    assert server.request("GET", "/metrics")[0] == 401
    assert server.request("GET", "/v1/models", key="other-key")[0] == 200
    assert server.request("POST", "/v1/completions", body, key=API_KEY)[0] == 200
    assert server.request("GET", "/health")[0] == 200


def _raw(server, data, read=65536):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(data)
        out = b""
        while b"\r\n\r\n" not in out:
            chunk = s.recv(read)
            if not chunk:
                break
            out += chunk
        return out


def test_size_limits_413_431(server):
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            "Content-Type: application/json\r\n")
    r = _raw(server, (head + "Content-Length: 50000000\r\n\r\n").encode())
    assert r.startswith(b"HTTP/1.1 413"), r[:100]
    r = _raw(server, (head + "X-Big: " + "a" * 40000 + "\r\nContent-Length: 2\r\n\r\n{}").encode())
    assert r.startswith(b"HTTP/1.1 431"), r[:100]
    r = _raw(server, b"THIS IS NOT HTTP\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 400"), r[:100]


def metrics(server):
    status, headers, data = server.request("GET", "/metrics", key=API_KEY)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    values = {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})? '
                        r'(-?[0-9.eE+-]+|\+Inf|NaN)$')
    for line in data.decode().splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = sample.match(line)
        assert m, f"not Prometheus text: {line!r}"
        values[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return values


def test_metrics_counters_move(server):
    before = metrics(server)
    post_json(server, "/v1/completions", {"model": server.model_id, "prompt": "Hi", "max_tokens": 3,
                                          "ignore_eos": True})
    call(server, "/v1/completions", {"model": 1})
    after = metrics(server)
    assert after['tessera_requests_total{outcome="success"}'] == before['tessera_requests_total{outcome="success"}'] + 1
    assert after['tessera_requests_total{outcome="invalid"}'] == before['tessera_requests_total{outcome="invalid"}'] + 1
    assert after["tessera_generated_tokens_total"] == before["tessera_generated_tokens_total"] + 3
    assert after["tessera_prompt_tokens_total"] > before["tessera_prompt_tokens_total"]
    assert after["tessera_time_to_first_token_seconds_count"] == before["tessera_time_to_first_token_seconds_count"] + 1
    assert after['tessera_time_to_first_token_seconds_bucket{le="+Inf"}'] == after["tessera_time_to_first_token_seconds_count"]
    assert "tessera_queue_depth" in after


def _open_stream(server, body):
    conn = server.connect()
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    return conn, resp


def _wait_for(pred, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_queue_full_429_and_disconnect_cancels(server):
    long_body = {"model": server.model_id, "prompt": "Count:", "max_tokens": 400, "ignore_eos": True,
                 "stream": True}
    m0 = metrics(server)
    cancelled0 = m0['tessera_requests_total{outcome="cancelled"}']
    conn, resp = _open_stream(server, long_body)  # running
    events = read_sse(resp)
    next(events)
    results = {}

    def queued():  # waits in the queue (capacity 1) behind the stream
        results["queued"] = call(server, "/v1/completions",
                                 {"model": server.model_id, "prompt": "Hi", "max_tokens": 2})

    t = threading.Thread(target=queued)
    t.start()
    assert _wait_for(lambda: metrics(server)["tessera_queue_depth"] == 1)
    status, headers, data = call(server, "/v1/completions",
                                 {"model": server.model_id, "prompt": "Hi", "max_tokens": 2})
    assert status == 429 and headers.get("Retry-After") == "1"
    assert json.loads(data)["error"]["code"] == "queue_full"
    # hang up mid-stream: the generation is cancelled and the queued request runs
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    t.join(timeout=20)
    assert results["queued"][0] == 200, results
    assert _wait_for(lambda: metrics(server)['tessera_requests_total{outcome="cancelled"}'] == cancelled0 + 1)
    # gauges are published by the engine thread after its step: eventually 0
    assert _wait_for(lambda: metrics(server)["tessera_requests_running"] == 0)
    m = metrics(server)
    assert m["tessera_requests_running"] == 0 and m["tessera_queue_depth"] == 0
    # the abandoned stream stopped long before its 400 tokens (the queued request made 2)
    generated = m["tessera_generated_tokens_total"] - m0["tessera_generated_tokens_total"]
    assert 2 < generated < 300, generated


def test_sigterm_drains_and_exits_zero(tessera_bin, model_path):
    s = Server(tessera_bin, model_path, "--drain-timeout", "3")
    result = {}

    def client():
        result["r"] = s.request("POST", "/v1/completions",
                                {"model": s.model_id, "prompt": "Hello", "max_tokens": 60, "ignore_eos": True})

    t = threading.Thread(target=client)
    t.start()
    assert _wait_for(lambda: s.request("GET", "/metrics")[2].find(b"tessera_requests_running 1") >= 0, 10)
    start = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=15) == 0, "".join(s.log)
    elapsed = time.time() - start
    assert elapsed < 3 + 3, elapsed  # the drain deadline plus a little
    t.join(timeout=5)
    status, _, data = result["r"]
    r = json.loads(data)
    assert status == 200, r
    # accepted work finishes; only a drain past its deadline cuts it short ("abort")
    if r["choices"][0]["finish_reason"] == "abort":
        assert elapsed >= 3, elapsed
    else:
        assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 60
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2).close()


def _read_all(sock):
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_http10_stream_expect_continue_and_model_route(server):
    body = json.dumps({"model": server.model_id, "prompt": "Hi", "max_tokens": 3, "ignore_eos": True,
                       "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.0\r\nAuthorization: Bearer " + API_KEY.encode() +
                  b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        raw = _read_all(s)  # close-delimited: no chunked encoding for HTTP/1.0
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
    assert payload.endswith(b"data: [DONE]\n\n") and payload.count(b"data: ") == 5
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " +
                  API_KEY.encode() + b"\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        assert _read_all(s).startswith(b"HTTP/1.1 200")
    status, _, data = server.request("GET", "/v1/models/" + server.model_id, key=API_KEY)
    assert status == 200 and json.loads(data)["id"] == server.model_id
    assert server.request("GET", "/v1/models/other", key=API_KEY)[0] == 404


def test_read_timeout_408(server):
    start = time.time()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert _read_all(s).startswith(b"HTTP/1.1 408")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        assert _read_all(s) == b""  # an idle connection is closed without a response
    assert time.time() - start < 10


def test_stream_never_splits_utf8(server):
    # Byte-level BPE spells CJK text and emoji with several tokens per character; a piece that
    # ended mid-character would come out as U+FFFD in its own event.
    body = {"model": server.model_id, "prompt": "日本語の文章: 東京は日本の首都です。🙂 次の文:", "max_tokens": 24,
            "ignore_eos": True}
    whole = post_json(server, "/v1/completions", body)["choices"][0]["text"]
    events = stream(server, "/v1/completions", {**body, "stream": True})
    pieces = [e["choices"][0]["text"] for e in events[:-1]]
    assert "".join(pieces) == whole
    # max_tokens may cut the last character short; its bytes are flushed (and replaced) at the end
    assert "\ufffd" not in whole.rstrip("\ufffd")
    assert all("\ufffd" not in p for p in pieces[:-2]), pieces
    assert any(ord(ch) > 0x7F for ch in whole), whole  # the check exercised multi-byte text


def test_n_choices_each_equal_a_single_request_with_seed_plus_index(server):
    base = {"model": server.model_id, "prompt": "A list of animals:", "max_tokens": 12,
            "temperature": 0.9, "seed": 41}
    r = post_json(server, "/v1/completions", {**base, "n": 3})
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    for i, c in enumerate(r["choices"]):
        alone = post_json(server, "/v1/completions", {**base, "seed": 41 + i})
        assert c["text"] == alone["choices"][0]["text"]
        assert c["finish_reason"] == alone["choices"][0]["finish_reason"]
    assert len({c["text"] for c in r["choices"]}) > 1  # different seeds, different samples
    assert r["usage"]["completion_tokens"] <= 36 and r["usage"]["prompt_tokens"] > 0
    # Streaming: every choice ends with its own finish_reason, usage sums the choices.
    events = stream(server, "/v1/chat/completions",
                    {"model": server.model_id, "messages": [{"role": "user", "content": "Hi"}],
                     "max_tokens": 5, "n": 2, "stream": True, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    finished = {c["index"] for e in events[:-1] for c in e["choices"] if c["finish_reason"]}
    assert finished == {0, 1}
    assert events[-2]["usage"]["completion_tokens"] <= 10


def _logsumexp(xs):
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def test_completion_logprobs_match_llama_cpp(server, model_path, llama_cpp):
    body = {"model": server.model_id, "prompt": "The capital of France is", "max_tokens": 6,
            "temperature": 0, "logprobs": 3}
    r = post_json(server, "/v1/completions", body)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 6
    assert "".join(lp["tokens"]) == r["choices"][0]["text"]
    assert lp["text_offset"][0] == 0
    for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert v <= 0 and len(top) == 3
        assert abs(max(top.values()) - v) < 1e-5  # greedy picks the most likely token
    # Independent reference: llama.cpp's log-softmax of the same positions.
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=256, logits_all=True, verbose=False)
    ids = llm.tokenize(body["prompt"].encode())
    gen = []
    for i in range(3):
        llm.reset()
        llm.eval(ids + gen)
        row = [float(x) for x in llm.scores[len(ids) + len(gen) - 1]]
        lse = _logsumexp(row)
        best = max(range(len(row)), key=row.__getitem__)
        want = row[best] - lse
        assert abs(lp["token_logprobs"][i] - want) < 0.15, (i, lp["token_logprobs"][i], want)
        assert llm.detokenize([best]).decode("utf-8", "replace") == lp["tokens"][i]
        gen.append(best)


def test_chat_logprobs_shape(server):
    r = post_json(server, "/v1/chat/completions",
                  {"model": server.model_id, "messages": [{"role": "user", "content": "Say hi"}],
                   "max_tokens": 4, "logprobs": True, "top_logprobs": 2})
    content = r["choices"][0]["logprobs"]["content"]
    assert 1 <= len(content) <= 4
    for e in content:
        assert e["logprob"] <= 0 and bytes(e["bytes"]).decode("utf-8", "replace") == e["token"]
        assert len(e["top_logprobs"]) == 2
        assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
    # Streamed logprobs arrive with the text they belong to.
    events = stream(server, "/v1/chat/completions",
                    {"model": server.model_id, "messages": [{"role": "user", "content": "Say hi"}],
                     "max_tokens": 4, "logprobs": True, "stream": True})
    streamed = [e for ev in events[:-1] for c in ev["choices"] if c.get("logprobs")
                for e in c["logprobs"]["content"]]
    assert [e["token"] for e in streamed] == [e["token"] for e in content]
