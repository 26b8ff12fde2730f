"""The reference server's engine (engine.py) in-process, on the tiny model at TP=1: continuous
batching admits at most ``max_batch`` requests into KV-cache slots and gives each the tokens it
gets alone; a request stops at its length or at EOS (unless told to ignore it); one whose
client went away frees its slot; echo scoring without generation answers the prompt's
log-probabilities and is done. Requests and their events are the ones the HTTP layer uses."""

from __future__ import annotations

import threading

import pytest

from orchestrator.refserver.presets import BOS_ID, EOS_ID, PRESETS
from orchestrator.refserver.request import Request

torch = pytest.importorskip("torch")

from orchestrator.refserver.engine import Channel, Engine  # noqa: E402
from orchestrator.refserver.model import ShardedLlama  # noqa: E402

MAX_BATCH = 2
PROMPTS = [[BOS_ID, *b"The quick brown fox"], [BOS_ID, *b"Once upon a time"], [BOS_ID, *b"a"],
           [BOS_ID, *b"Tensor parallel decode, step by step:"]]


def model() -> ShardedLlama:
    return ShardedLlama(PRESETS["tiny"], tp=1, rank=0, device=torch.device("cpu"), dtype=torch.float32, seed=0,
                        max_slots=MAX_BATCH, max_len=128, all_reduce=lambda x: None, with_head=True)


@pytest.fixture(scope="module")
def engine():
    """One engine for the module, its loop in a thread of this process (as rank 0's main thread
    runs it): it serves whatever is submitted and idles when nothing is."""
    torch.set_num_threads(1)
    eng = Engine(model(), None, Channel(None, 1, 64), max_batch=MAX_BATCH)
    eng.warmup()
    threading.Thread(target=eng.loop, name="engine-loop", daemon=True).start()
    return eng


def events(req: Request, timeout_s: float = 60.0) -> list[tuple]:
    """Every event of ``req`` up to its last (a token with a finish reason, done, error)."""
    out = []
    while True:
        event = req.out.get(timeout=timeout_s)
        out.append(event)
        if event[0] in ("done", "error") or (event[0] == "token" and event[3]):
            return out


def tokens(evs: list[tuple]) -> list[int]:
    return [e[1] for e in evs if e[0] == "token"]


def test_batched_requests_get_the_tokens_each_gets_alone(engine):
    alone = []
    for prompt in PROMPTS:
        req = Request(prompt=prompt, max_tokens=12, ignore_eos=True)
        engine.submit(req)
        alone.append(tokens(events(req)))
    before = engine.stats["max_running"]
    reqs = [Request(prompt=p, max_tokens=12, ignore_eos=True) for p in PROMPTS]
    for r in reqs:
        engine.submit(r)
    together = [tokens(events(r)) for r in reqs]
    assert together == alone and all(len(t) == 12 for t in together)
    assert engine.stats["max_running"] == MAX_BATCH >= before  # never more than max_batch at once
    assert sorted(engine.free_slots) == list(range(MAX_BATCH)) and engine.running == []  # every slot back


def test_a_request_stops_at_its_length_or_at_eos(engine):
    req = Request(prompt=PROMPTS[0], max_tokens=3, ignore_eos=True)
    engine.submit(req)
    evs = events(req)
    assert [e[0] for e in evs] == ["token"] * 3 and evs[-1][3] == "length"
    # a seeded request that samples EOS (nearly uniform at temperature 50: greedy never picks it here)
    found = None
    for seed in range(500):
        req = Request(prompt=PROMPTS[1], max_tokens=48, temperature=50.0, seed=seed, ignore_eos=True)
        engine.submit(req)
        sampled = tokens(events(req))
        if EOS_ID in sampled[:-1]:
            found = seed, sampled
            break
    assert found, "no seed in 500 sampled an EOS"
    seed, sampled = found
    assert len(sampled) == 48  # told to ignore EOS: it went on to its length
    req = Request(prompt=PROMPTS[1], max_tokens=48, temperature=50.0, seed=seed)  # the same draw, EOS heeded
    engine.submit(req)
    evs = events(req)
    assert tokens(evs) == sampled[:sampled.index(EOS_ID) + 1] and evs[-1][3] == "stop"


def test_a_request_whose_client_went_away_frees_its_slot(engine):
    gone = Request(prompt=PROMPTS[2], max_tokens=100, ignore_eos=True)
    engine.submit(gone)
    first = gone.out.get(timeout=60)
    assert first[0] == "token"
    gone.cancelled = True  # what the HTTP handler does when the stream's socket closes
    after = Request(prompt=PROMPTS[3], max_tokens=4, ignore_eos=True)
    engine.submit(after)
    assert len(tokens(events(after))) == 4  # served: the cancelled one no longer holds its slot
    assert gone.n_gen < 100 and sorted(engine.free_slots) == list(range(MAX_BATCH))


def test_echo_scoring_answers_the_prompts_logprobs_and_is_done(engine):
    req = Request(prompt=PROMPTS[0], max_tokens=0, logprobs=2, prompt_logprobs=True)
    engine.submit(req)
    (prompt, done) = events(req)
    assert prompt[0] == "prompt" and done == ("done", "length")
    entries = prompt[1]
    assert entries[0] is None and len(entries) == len(PROMPTS[0])  # the first token has nothing before it
    for (token, logprob, top), want in zip(entries[1:], PROMPTS[0][1:]):
        assert token == want and logprob <= 0.0 and len(top) == 2 and top[0][1] >= logprob
