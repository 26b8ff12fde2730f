"""The reference server's HTTP API (api.py): request parsing in-process (every bad request a
400 or 404 naming the field), and a real server process: HTTP shapes, TP=1 vs TP=2,
batching, bad requests, a client that disconnects.

One TP=1 and one TP=2 server (tiny model, max-batch 4) are shared by the server tests.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest
from refserver_helpers import TINY, RefServer, get, greedy, post, stream

from orchestrator.refserver.api import ApiError, App, parse_completion
from orchestrator.refserver.presets import BOS_ID

SERVER, SERVER_TIMEOUT = pytest.mark.slow, pytest.mark.timeout(120)  # the tests of the real server processes

PROMPTS = ["The quick brown fox", "Tensor parallel decode, step by step:", "a"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("refserver-logs")
    common = [*TINY, "--max-batch", "4", "--threads", "1"]
    s1 = RefServer([*common, "--tp", "1"], logs, "tp1")
    s2 = RefServer([*common, "--tp", "2"], logs, "tp2")
    try:
        s1.start()
        s2.start()
        s1.wait_healthy()
        s2.wait_healthy()
        yield s1, s2
    finally:
        s1.stop()
        s2.stop()


@pytest.fixture(scope="module")
def tp1(servers):
    return servers[0]


@SERVER
@SERVER_TIMEOUT
def test_health_models_info(servers):
    s1, s2 = servers
    assert get(s1.port, "/health") == (200, b"")
    status, body = get(s1.port, "/v1/models")
    models = json.loads(body)
    assert status == 200 and models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["object"] == "model"
    info = json.loads(get(s2.port, "/info")[1])
    assert info["tp"] == 2 and info["ready"] and info["dims"]["layers"] == 4
    assert "ready on http://127.0.0.1:" in s1.log()


@SERVER
@SERVER_TIMEOUT
def test_completion_shape(tp1):
    body = greedy(tp1.port, "Hello", n=5)
    assert set(body) >= {"id", "object", "created", "model", "choices", "usage"}
    assert body["object"] == "text_completion" and body["model"] == "tiny"
    assert body["id"].startswith("cmpl-") and isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0 and isinstance(choice["text"], str) and choice["text"]
    assert choice["logprobs"] is None and choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 5, "total_tokens": 11}


@SERVER
@SERVER_TIMEOUT
def test_stream_shape_and_done(tp1):
    n = 6
    events = stream(tp1.port, {"prompt": "Hello", "max_tokens": n, "temperature": 0,
                               "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    chunks, usage = events[:n], events[n]
    assert len(events) == n + 2
    for i, c in enumerate(chunks):
        assert c["object"] == "text_completion" and c["model"] == "tiny"
        assert c["id"] == chunks[0]["id"] and c["usage"] is None
        (choice,) = c["choices"]
        assert choice["index"] == 0 and isinstance(choice["text"], str)
        assert choice["logprobs"] is None
        assert choice["finish_reason"] == ("length" if i == n - 1 else None)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == n
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == greedy(tp1.port, "Hello", n=n)["choices"][0]["text"]
    plain = stream(tp1.port, {"prompt": "Hello", "max_tokens": 2, "temperature": 0})
    assert plain[-1] == "[DONE]" and all(e["choices"] for e in plain[:-1])


@SERVER
@SERVER_TIMEOUT
def test_tp1_and_tp2_give_identical_greedy_text(servers):
    s1, s2 = servers
    long_prompt = "A prompt longer than one step message holds. " * 4  # 2nd broadcast
    for prompt in [*PROMPTS, [256, 1, 2, 3, 300, 400], long_prompt]:
        a = greedy(s1.port, prompt, n=32)["choices"][0]["text"]
        b = greedy(s2.port, prompt, n=32)["choices"][0]["text"]
        assert a == b, prompt


@SERVER
@SERVER_TIMEOUT
def test_echo_logprobs_scores_a_text(servers):
    s1, s2 = servers
    text = "The reference text to score."
    req = {"prompt": text, "max_tokens": 0, "echo": True, "logprobs": 2, "temperature": 0}
    st, b1 = post(s1.port, req)
    assert st == 200, b1
    (choice,) = b1["choices"]
    lp = choice["logprobs"]
    assert choice["text"] == text and b1["usage"]["completion_tokens"] == 0
    n = len(text) + 1  # BOS + bytes
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) and v <= 0 for v in lp["token_logprobs"][1:])
    assert all(isinstance(d, dict) and 2 <= len(d) <= 3 for d in lp["top_logprobs"][1:])
    assert "".join(lp["tokens"]) == text
    assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][-1] == len(text) - 1
    # a summation-order change (TP=2) keeps the scores to float32 rounding
    _, b2 = post(s2.port, req)
    for x, y in zip(lp["token_logprobs"][1:], b2["choices"][0]["logprobs"]["token_logprobs"][1:]):
        assert abs(x - y) < 1e-3
    # max_tokens=1: prompt scores plus one generated token
    _, b3 = post(s1.port, {**req, "max_tokens": 1})
    lp3 = b3["choices"][0]["logprobs"]
    assert len(lp3["tokens"]) == n + 1 and lp3["token_logprobs"][:n] == lp["token_logprobs"]
    assert b3["choices"][0]["text"].startswith(text)


@SERVER
@SERVER_TIMEOUT
def test_logprobs_while_generating_and_streaming(tp1):
    st, body = post(tp1.port, {"prompt": "Hi", "max_tokens": 3, "temperature": 0,
                               "logprobs": 1, "ignore_eos": True})
    lp = body["choices"][0]["logprobs"]
    assert st == 200 and len(lp["tokens"]) == 3 and None not in lp["token_logprobs"]
    events = stream(tp1.port, {"prompt": "Hi", "max_tokens": 3, "temperature": 0,
                               "logprobs": 1, "ignore_eos": True})
    for e in events[:-1]:
        clp = e["choices"][0]["logprobs"]
        assert len(clp["tokens"]) == 1 and len(clp["token_logprobs"]) == 1
    assert [e["choices"][0]["logprobs"]["token_logprobs"][0] for e in events[:-1]] == \
        pytest.approx(lp["token_logprobs"], abs=1e-4)


@SERVER
@SERVER_TIMEOUT
def test_concurrent_requests_are_batched(tp1):
    prompts = [f"request number {i}: " for i in range(8)]
    alone = [greedy(tp1.port, p, n=48)["choices"][0]["text"] for p in prompts[:2]]
    results: dict[int, dict] = {}

    def run(i):
        results[i] = greedy(tp1.port, prompts[i], n=48)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == list(range(8))
    for r in results.values():
        assert r["usage"]["completion_tokens"] == 48
        assert r["choices"][0]["finish_reason"] == "length"
    # batching does not change the greedy output
    assert [results[0]["choices"][0]["text"], results[1]["choices"][0]["text"]] == alone
    stats = json.loads(get(tp1.port, "/info")[1])["stats"]
    assert stats["max_running"] == 4  # --max-batch 4: the other 4 waited in the queue


@SERVER
@SERVER_TIMEOUT
def test_bad_requests_get_400_and_server_keeps_serving(servers):
    for s in servers:
        for raw in (b"{not json", b"[1, 2]", json.dumps({"prompt": "x", "max_tokens": 0}).encode(),
                    json.dumps({"prompt": "x", "max_tokens": "ten"}).encode(),
                    json.dumps({"prompt": {"a": 1}}).encode(),
                    json.dumps({"prompt": "x", "temperature": "hot"}).encode()):
            status, body = post(s.port, raw)
            assert status == 400, (raw, body)
            err = body["error"]
            assert err["code"] == 400 and err["type"] == "BadRequestError" and err["message"]
        assert post(s.port, {"prompt": "x", "model": "nope"})[0] == 404
        assert get(s.port, "/nowhere")[0] == 404
        assert greedy(s.port, "still here", n=3)["usage"]["completion_tokens"] == 3
        assert get(s.port, "/health")[0] == 200


@SERVER
@SERVER_TIMEOUT
def test_sampling_with_a_seed_is_reproducible(tp1):
    req = {"prompt": "Once", "max_tokens": 16, "temperature": 1.0, "seed": 7, "ignore_eos": True}
    a = post(tp1.port, req)[1]["choices"][0]["text"]
    assert post(tp1.port, req)[1]["choices"][0]["text"] == a


@SERVER
@SERVER_TIMEOUT
def test_client_disconnect_mid_stream_frees_the_slot(tp1):
    conn = http.client.HTTPConnection("127.0.0.1", tp1.port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps(
        {"prompt": "bye", "max_tokens": 200, "stream": True, "ignore_eos": True}))
    resp = conn.getresponse()
    resp.fp.readline()
    conn.sock.close()
    conn.close()
    deadline = time.monotonic() + 20
    while json.loads(get(tp1.port, "/info")[1])["stats"]["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(get(tp1.port, "/info")[1])["stats"]["running"] == 0
    for _ in range(4):  # every slot must still be usable
        assert greedy(tp1.port, "after", n=4)["usage"]["completion_tokens"] == 4


@SERVER
@SERVER_TIMEOUT
def test_greedy_capture_returns_each_token_with_its_runner_up(servers):
    """What the correctness gate's near-tie rule reads: the generated pieces, and per piece
    the server's top candidates with the pick first and a runner-up below it."""
    from orchestrator.node import client

    s1, s2 = servers
    got = client.greedy_outputs(f"http://127.0.0.1:{s1.port}", "tiny", PROMPTS[:2], 8, 10, top_logprobs=2)
    for g in got:
        assert g["ok"] and len(g["tokens"]) == len(g["top"]) == 8 and "".join(g["tokens"]) == g["text"]
        for piece, cands in zip(g["tokens"], g["top"]):
            assert len(cands) == 2 and max(cands, key=cands.get) == piece
    # TP=2 (another summation order) picks the same tokens
    other = client.greedy_outputs(f"http://127.0.0.1:{s2.port}", "tiny", PROMPTS[:2], 8, 10, top_logprobs=2)
    assert [g["tokens"] for g in other] == [g["tokens"] for g in got]


APP = App(model_name="tiny", vocab=512, max_len=64, info={})


@pytest.mark.parametrize("body, status, needle", [
    ([1, 2], 400, "JSON object"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": -1, "echo": True}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": True}, 400, "max_tokens"),
    ({"prompt": 5}, 400, "prompt"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": [1, 600]}, 400, "vocab"),
    ({"prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream"),
    ({"prompt": "x", "logprobs": 50}, 400, "logprobs"),
    ({"prompt": "x", "n": 2}, 400, "n must be 1"),
    ({"prompt": "x", "stream_options": {"include_usage": 1}}, 400, "include_usage"),
    ({"prompt": "x", "max_tokens": 100}, 400, "maximum context length"),
    ({"prompt": "x", "model": "other"}, 404, "does not exist"),
])
def test_bad_requests(body, status, needle):
    with pytest.raises(ApiError) as info:
        parse_completion(body, APP)
    assert info.value.status == status and needle in info.value.message


def test_good_requests():
    req, opts = parse_completion({"prompt": "Hi", "max_tokens": 3, "temperature": 0,
                                  "model": "tiny", "unknown_field": {"x": 1}}, APP)
    assert req.prompt == [BOS_ID, 72, 105] and req.max_tokens == 3 and not opts["stream"]
    req, opts = parse_completion({"prompt": [5, 6], "max_tokens": 0, "echo": True,
                                  "logprobs": 1}, APP)
    assert req.prompt == [5, 6] and req.prompt_logprobs and opts["echo"]
    req, _ = parse_completion({"prompt": ["Hi"]}, APP)
    assert req.max_tokens == 16 and req.temperature == 1.0
    json.dumps(opts)
