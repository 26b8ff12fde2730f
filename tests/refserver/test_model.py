"""Reference server parts in-process (no server): presets, tokenizer, model, request parsing.

Tensor parallelism is simulated here with one thread per rank and a barrier all-reduce,
so "TP=2 computes the same greedy tokens as TP=1" is checked in milliseconds; the real
multi-process check is in test_refserver_server.py.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

import pytest

from orchestrator.refserver.presets import BOS_ID, EOS_ID, PRESETS, ModelDims

torch = pytest.importorskip("torch")

from orchestrator.refserver.api import ApiError, App, parse_completion  # noqa: E402
from orchestrator.refserver.cli import BadFlag, Fault, parse_settings  # noqa: E402
from orchestrator.refserver.model import ShardedLlama, fused_choice, kv_buckets  # noqa: E402
from orchestrator.refserver.tokenizer import ByteTokenizer  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The machine is small and shared: OpenMP spinning on 2 threads only slows us down."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- presets -----------------------------------------------------------------------------


def test_presets_module_does_not_import_torch():
    code = ("import sys, orchestrator.refserver.presets as p; "
            "assert 'torch' not in sys.modules; print(sorted(p.PRESETS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['1b', '8b', 'tiny']"


def test_preset_sizes_match_the_llama_models():
    assert PRESETS["1b"].param_count() == pytest.approx(1.236e9, rel=0.01)  # Llama-3.2-1B
    assert PRESETS["8b"].param_count() == pytest.approx(8.03e9, rel=0.01)  # Llama-3-8B
    tiny = PRESETS["tiny"]
    assert tiny.param_count() < 5e6
    assert tiny.allreduces_per_step() == 2 * tiny.layers == 8
    assert (tiny.heads, tiny.kv_heads) == (8, 4)


def test_weight_bytes_counts_layers_and_head_not_the_whole_embedding():
    d = PRESETS["8b"]
    bf16 = d.weight_bytes(2)
    assert bf16 == pytest.approx(2 * (d.param_count() - d.vocab * d.hidden), rel=1e-3)
    assert d.weight_bytes(4) == 2 * bf16
    assert d.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2
    facts = d.model_facts("bfloat16")
    assert facts["bytes_per_token"] == bf16 and facts["allreduces_per_step"] == 64
    assert facts["hidden_size"] == 4096 and facts["dtype_bytes"] == 2


def test_tp_rules():
    tiny = PRESETS["tiny"]
    assert tiny.allowed_tp(8) == [1, 2, 4]
    assert tiny.tp_error(2) is None
    assert "heads" in tiny.tp_error(3)
    assert PRESETS["8b"].allowed_tp(8) == [1, 2, 4, 8]


def test_dims_override_and_validation():
    d = PRESETS["tiny"].with_overrides(layers=2, hidden=None)
    assert isinstance(d, ModelDims) and d.layers == 2 and d.hidden == 256
    assert "--kv-heads" in PRESETS["tiny"].with_overrides(kv_heads=3).dims_error()
    assert "--vocab" in PRESETS["tiny"].with_overrides(vocab=100).dims_error()


# ---- tokenizer ---------------------------------------------------------------------------


def test_tokenizer_round_trips_printable_ascii():
    tok = ByteTokenizer(512)
    text = "".join(chr(c) for c in range(32, 127)) + "\nline two\t."
    ids = tok.encode(text)
    assert ids[0] == BOS_ID and all(i < 256 for i in ids[1:])
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text, add_bos=False)) == text


def test_tokenizer_high_ids_are_printable_and_deterministic():
    tok = ByteTokenizer(128256)
    pieces = [tok.piece(i) for i in range(EOS_ID + 1, 128256, 997)]
    assert all(p.startswith(" ") and p[1:].isalpha() and p.isprintable() for p in pieces)
    assert tok.piece(EOS_ID) == "" and tok.piece(BOS_ID) == ""
    assert ByteTokenizer(128256).piece(300) == tok.piece(300)
    assert tok.piece(7) == "<0x07>"
    with pytest.raises(ValueError):
        tok.piece(128256)


# ---- model -------------------------------------------------------------------------------

DIMS = PRESETS["tiny"]
PROMPT = [BOS_ID, *b"The reference server computes this."]


def make(tp=1, rank=0, all_reduce=None, garbage=False, slots=4):
    return ShardedLlama(DIMS, tp=tp, rank=rank, device=torch.device("cpu"),
                        dtype=torch.float32, seed=0, max_slots=slots, max_len=128,
                        all_reduce=all_reduce or (lambda x: None), with_head=rank == 0,
                        garbage=garbage)


def prefill(m, prompt, slot=0):
    P = len(prompt)
    return m.forward(torch.tensor([prompt]), torch.arange(P).view(1, P),
                     torch.tensor([slot]), P)


def greedy(m, prompt, n=24, slot=0):
    with torch.inference_mode():
        h = prefill(m, prompt, slot)
        toks = [int(m.logits(h[0, -1:]).argmax())] if m.head is not None else [0]
        for _ in range(n - 1):
            pos = len(prompt) + len(toks) - 1
            h = m.forward(torch.tensor([[toks[-1]]]), torch.tensor([[pos]]),
                          torch.tensor([slot]), pos + 1)
            toks.append(int(m.logits(h[:, 0]).argmax()) if m.head is not None else 0)
    return toks


def test_weights_are_deterministic_and_not_degenerate():
    a, b = greedy(make(), PROMPT), greedy(make(), PROMPT)
    assert a == b
    assert len(set(a)) > 8  # not stuck on one token
    assert greedy(make(), PROMPT[:-3]) != a  # depends on its input


def test_prefill_matches_token_by_token_decode():
    m = make()
    toks = greedy(m, PROMPT, n=12)
    full = PROMPT + toks[:-1]
    with torch.inference_mode():
        logits = m.logits(prefill(m, full, slot=1)[0])
    assert logits[len(PROMPT) - 1:].argmax(-1).tolist() == toks


def test_batched_decode_matches_single_requests():
    m = make()
    prompts = [PROMPT, PROMPT[:10], [BOS_ID, *b"another prompt entirely"]]
    singles = [greedy(m, p, n=8, slot=3) for p in prompts]
    with torch.inference_mode():
        T = max(len(p) for p in prompts)
        tokens = torch.zeros((3, T), dtype=torch.long)
        for i, p in enumerate(prompts):
            tokens[i, : len(p)] = torch.tensor(p)
        h = m.forward(tokens, torch.arange(T).expand(3, T).contiguous(),
                      torch.tensor([0, 1, 2]), T)
        idx = torch.tensor([len(p) - 1 for p in prompts])
        seqs = [[t] for t in m.logits(h[torch.arange(3), idx]).argmax(-1).tolist()]
        for _ in range(7):
            pos = torch.tensor([[len(p) + len(s) - 1] for p, s in zip(prompts, seqs)])
            h = m.forward(torch.tensor([[s[-1]] for s in seqs]), pos, torch.tensor([0, 1, 2]),
                          int(pos.max()) + 1)
            for s, t in zip(seqs, m.logits(h[:, 0]).argmax(-1).tolist()):
                s.append(t)
    assert seqs == singles


def simulated_tp(tp, prompt, n=24, garbage=False):
    """Greedy tokens of a TP=tp model: one thread per rank, a barrier all-reduce.

    Rank 0 picks each token and hands it to the other ranks, as the server does.
    """
    barrier = threading.Barrier(tp)
    parts = [None] * tp

    def make_ar(rank):
        def all_reduce(x):
            parts[rank] = x.clone()
            barrier.wait()
            total = parts[0].clone()
            for p in parts[1:]:
                total += p
            barrier.wait()
            x.copy_(total)
        return all_reduce

    models = [make(tp, r, make_ar(r), garbage=garbage) for r in range(tp)]
    inbox = [queue.Queue() for _ in range(tp)]

    def peer(rank):
        m = models[rank]
        with torch.inference_mode():
            prefill(m, prompt)
            for i in range(n - 1):
                pos = len(prompt) + i
                m.forward(torch.tensor([[inbox[rank].get(timeout=30)]]), torch.tensor([[pos]]),
                          torch.tensor([0]), pos + 1)

    threads = [threading.Thread(target=peer, args=(r,), daemon=True) for r in range(1, tp)]
    for t in threads:
        t.start()
    m = models[0]
    with torch.inference_mode():
        toks = [int(m.logits(prefill(m, prompt)[0, -1:]).argmax())]
        for i in range(n - 1):
            for r in range(1, tp):
                inbox[r].put(toks[-1])
            pos = len(prompt) + i
            h = m.forward(torch.tensor([[toks[-1]]]), torch.tensor([[pos]]),
                          torch.tensor([0]), pos + 1)
            toks.append(int(m.logits(h[:, 0]).argmax()))
    for t in threads:
        t.join(timeout=30)
    return toks


@pytest.mark.parametrize("tp", [2, 4])
def test_summation_order_change_keeps_greedy_tokens(tp):
    prompts = [PROMPT, [BOS_ID, *b"Hello"], [BOS_ID, *b"0123456789 abcdefghij"]]
    for p in prompts:
        assert simulated_tp(tp, p) == simulated_tp(1, p)


@pytest.mark.parametrize("tp", [1, 2])
def test_garbage_shard_order_changes_greedy_tokens(tp):
    good = simulated_tp(tp, PROMPT)
    bad = simulated_tp(tp, PROMPT, garbage=True)
    assert good != bad
    assert sum(a != b for a, b in zip(good, bad)) > len(good) // 2


def test_fused_kernels_are_chosen_only_on_cuda(monkeypatch):
    assert fused_choice(torch.device("cpu")) == (False, "torch ops on cpu")
    assert fused_choice(torch.device("cuda"), False) == (False, "forced off")
    monkeypatch.setenv("REFSERVER_FUSED", "0")
    assert fused_choice(torch.device("cuda")) == (False, "REFSERVER_FUSED=0")


def test_cpu_model_does_not_import_triton():
    code = ("import sys, torch; from orchestrator.refserver.model import ShardedLlama; "
            "from orchestrator.refserver.presets import PRESETS; "
            "m = ShardedLlama(PRESETS['tiny'], tp=1, rank=0, device=torch.device('cpu'), "
            "dtype=torch.float32, seed=0, max_slots=1, max_len=8, all_reduce=lambda x: None, "
            "with_head=True); m.forward(torch.tensor([[1]]), torch.tensor([[0]]), "
            "torch.tensor([0]), 1); assert not m.fused; assert 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_kv_buckets():
    assert kv_buckets(4096) == [256, 512, 1024, 2048, 4096]
    assert kv_buckets(1000) == [256, 512, 1000]
    assert kv_buckets(100) == [100]


# ---- flags and requests -------------------------------------------------------------------


def test_fault_parse():
    assert Fault.parse("crash-after:3") == Fault("crash-after", 3)
    assert Fault.parse("slow-start") == Fault("slow-start", 8)
    assert Fault.parse("slow-start:1.5") == Fault("slow-start", 1.5)
    assert Fault.parse("hang-in-decode") == Fault("hang-in-decode", 4)
    assert Fault.parse("garbage") == Fault("garbage", None)
    for bad in ("crash-after", "crash-after:0", "garbage:2", "nope", "slow-start:x"):
        with pytest.raises(BadFlag, match="--fault"):
            Fault.parse(bad)


def test_settings_defaults_and_overrides():
    s = parse_settings(["--model", "tiny", "--tp", "2", "--layers", "2", "--port", "9000"])
    assert (s.tp, s.dims.layers, s.dims.hidden, s.dtype, s.device) == (2, 2, 256, "float32", "cpu")
    assert s.model_name == "tiny" and s.max_batch == 64
    s = parse_settings(["--served-model-name", "m", "--capture-sizes", "8,1,4,64",
                        "--max-batch", "16"])
    assert s.model_name == "m" and s.capture_sizes == (1, 4, 8)


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
