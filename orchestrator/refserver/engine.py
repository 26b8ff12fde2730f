"""Continuous-batching scheduler on rank 0, the step channel to the other ranks, their loop.

Rank 0's engine loop (the main thread) repeats: admit queued requests into free KV-cache
slots (up to ``max_batch`` running), prefill the newly admitted ones (batched, padded),
then run one decode step over every running request. Before each forward it broadcasts
the step's inputs (token ids, positions, slots, attention length) over a CPU group; the
other ranks run the same forward from them (``worker_loop``), so every rank issues the
same collectives in the same order. When idle it broadcasts a no-op every few seconds.

Outputs go to each request's queue as events, consumed by the HTTP handler thread:
``("prompt", entries)`` (echo scoring), ``("token", id, logprob_entry, finish_reason)``,
``("done", finish_reason)`` (nothing generated, e.g. max_tokens=0), ``("error", message)``.
A logprob entry is ``(token_id, logprob, [(id, logprob), ...top k])``.
"""

from __future__ import annotations

import queue
import threading
import time

import torch
import torch.distributed as dist

from orchestrator.refserver.model import GraphRunner, ShardedLlama, run_step
from orchestrator.refserver.presets import BOS_ID, EOS_ID
from orchestrator.refserver.procs import log
from orchestrator.refserver.request import LogprobEntry, Request

OP_NOP, OP_STEP = 0, 1
HEADER = 4
HEARTBEAT_S = 5.0
PREFILL_TOKEN_BUDGET = 4096


class Channel:
    """Rank 0 -> other ranks: one broadcast per step (two when the inputs are large)."""

    def __init__(self, group, world: int, capacity: int):
        self.group, self.world = group, world
        self.capacity = capacity
        self.buf = torch.zeros(HEADER + capacity, dtype=torch.long)

    def send(self, op: int, tokens: torch.Tensor | None = None,
             positions: torch.Tensor | None = None, slots: torch.Tensor | None = None,
             kv_len: int = 0) -> None:
        if self.world == 1:
            return
        if op != OP_STEP:
            self.buf[:HEADER] = torch.tensor([op, 0, 0, 0])
            dist.broadcast(self.buf, src=0, group=self.group)
            return
        assert tokens is not None and positions is not None and slots is not None, "a step needs its tensors"
        B, T = tokens.shape
        payload = torch.cat((tokens.reshape(-1), positions.reshape(-1), slots))
        self.buf[:HEADER] = torch.tensor([op, B, T, kv_len])
        n = payload.numel()
        if n <= self.capacity:
            self.buf[HEADER:HEADER + n] = payload
            dist.broadcast(self.buf, src=0, group=self.group)
        else:
            dist.broadcast(self.buf, src=0, group=self.group)
            dist.broadcast(payload, src=0, group=self.group)

    def recv(self):
        """(op, tokens[B,T], positions[B,T], slots[B], kv_len) on a rank > 0."""
        dist.broadcast(self.buf, src=0, group=self.group)
        op, B, T, kv_len = self.buf[:HEADER].tolist()
        if op != OP_STEP:
            return op, None, None, None, 0
        n = 2 * B * T + B
        if n <= self.capacity:
            payload = self.buf[HEADER:HEADER + n].clone()
        else:
            payload = torch.empty(n, dtype=torch.long)
            dist.broadcast(payload, src=0, group=self.group)
        tokens = payload[: B * T].view(B, T)
        positions = payload[B * T: 2 * B * T].view(B, T)
        slots = payload[2 * B * T:]
        return op, tokens, positions, slots, kv_len


def worker_loop(model: ShardedLlama, graphs: GraphRunner | None, channel: Channel) -> None:
    """Ranks > 0: run every step rank 0 announces, forever (they die with rank 0)."""
    with torch.inference_mode():
        while True:
            op, tokens, positions, slots, kv_len = channel.recv()
            if op == OP_STEP:
                run_step(model, graphs, tokens, positions, slots, kv_len)


class Engine:
    """Scheduler + sampler on rank 0 (see module docstring)."""

    def __init__(self, model: ShardedLlama, graphs: GraphRunner | None, channel: Channel, *,
                 max_batch: int, hang_after: int | None = None, misscore_prompts: bool = False):
        self.model, self.graphs, self.channel = model, graphs, channel
        # fault misscored-prompts: echo scoring reads each prompt token's log-probability one
        # position late (a reporting bug: generation stays right), as a server whose scoring
        # pass is not the model that generates (vLLM 0.26.0 with a draft model) looks
        self.misscore_prompts = misscore_prompts
        self.max_batch = max_batch
        self.max_len = model.max_len
        self.hang_after = hang_after
        self.inbox: queue.Queue[Request] = queue.Queue()
        self.free_slots = list(range(max_batch - 1, -1, -1))
        self.running: list[Request] = []
        self.ready = threading.Event()
        self.stats = {"steps": 0, "prefill_steps": 0, "decode_steps": 0, "max_running": 0,
                      "generated_tokens": 0, "finished_requests": 0, "queued": 0,
                      "running": 0}

    # ---- called from HTTP threads -----------------------------------------------------
    def submit(self, req: Request) -> None:
        self.inbox.put(req)

    # ---- the loop (main thread of rank 0) ---------------------------------------------
    def warmup(self) -> None:
        """One prefill and one decode step through every rank (scratch slot)."""
        slot = self.model.scratch_slot
        with torch.inference_mode():
            tokens = torch.tensor([[BOS_ID, 72, 105]])
            positions = torch.arange(3).view(1, 3)
            slots = torch.tensor([slot])
            self._forward(tokens, positions, slots, 3)
            self._forward(torch.tensor([[33]]), torch.tensor([[3]]), slots, 4)
            if self.model.device.type == "cuda":
                torch.cuda.synchronize()

    def loop(self) -> None:
        with torch.inference_mode():
            while True:
                new = self._admit()
                if new:
                    self._prefill_all(new)
                if self.running:
                    self._decode()

    def _admit(self) -> list[Request]:
        new: list[Request] = []
        while len(self.running) + len(new) < self.max_batch:
            idle = not self.running and not new
            try:
                req = self.inbox.get(timeout=HEARTBEAT_S) if idle else self.inbox.get_nowait()
            except queue.Empty:
                if idle:
                    self.channel.send(OP_NOP)
                    continue
                break
            if not req.cancelled:
                new.append(req)
        self.stats["queued"] = self.inbox.qsize()
        return new

    def _forward(self, tokens, positions, slots, kv_len) -> torch.Tensor:
        self.channel.send(OP_STEP, tokens, positions, slots, kv_len)
        self.stats["steps"] += 1
        return run_step(self.model, self.graphs, tokens, positions, slots, kv_len)

    def _prefill_all(self, new: list[Request]) -> None:
        chunk: list[Request] = []
        longest = 0
        for req in new:
            n = len(req.prompt)
            if chunk and (len(chunk) + 1) * max(longest, n) > PREFILL_TOKEN_BUDGET:
                self._prefill(chunk)
                chunk, longest = [], 0
            chunk.append(req)
            longest = max(longest, n)
        if chunk:
            self._prefill(chunk)

    def _prefill(self, reqs: list[Request]) -> None:
        B = len(reqs)
        T = max(len(r.prompt) for r in reqs)
        tokens = torch.zeros((B, T), dtype=torch.long)
        for i, r in enumerate(reqs):
            tokens[i, : len(r.prompt)] = torch.tensor(r.prompt)
            r.slot = self.free_slots.pop()
            r.ids = list(r.prompt)
            if r.temperature > 0:
                r.gen = torch.Generator()
                r.gen.manual_seed(r.seed if r.seed is not None else time.time_ns() & 0xFFFFFFFF)
        # padded positions beyond a prompt write junk KV that decode overwrites before use
        positions = torch.arange(T).view(1, T).expand(B, T).contiguous()
        slots = torch.tensor([r.slot for r in reqs])
        hidden = self._forward(tokens, positions, slots, T)
        self.stats["prefill_steps"] += 1
        self.running.extend(reqs)
        self.stats["running"] = len(self.running)
        self.stats["max_running"] = max(self.stats["max_running"], len(self.running))
        last = torch.tensor([len(r.prompt) - 1 for r in reqs], device=hidden.device)
        logits = self.model.logits(hidden[torch.arange(B, device=hidden.device), last])
        for i, r in enumerate(reqs):
            if r.prompt_logprobs:
                r.out.put(("prompt", self._prompt_entries(r, hidden[i, : len(r.prompt)])))
        gen_rows = [i for i, r in enumerate(reqs) if r.max_tokens > 0]
        for r in reqs:
            if r.max_tokens == 0:
                self._retire(r)
                r.out.put(("done", "length"))
        if gen_rows:
            self._sample_and_emit([reqs[i] for i in gen_rows], logits[gen_rows])

    def _decode(self) -> None:
        for r in [r for r in self.running if r.cancelled]:
            self._retire(r)
        if not self.running:
            return
        reqs = list(self.running)
        tokens = torch.tensor([[r.ids[-1]] for r in reqs])
        positions = torch.tensor([[len(r.ids) - 1] for r in reqs])
        slots = torch.tensor([r.slot for r in reqs])
        kv_len = int(positions.max()) + 1
        hidden = self._forward(tokens, positions, slots, kv_len)
        self.stats["decode_steps"] += 1
        self._sample_and_emit(reqs, self.model.logits(hidden[:, 0]))

    # ---- sampling and outputs ---------------------------------------------------------
    def _prompt_entries(self, r: Request, hidden: torch.Tensor) -> list[LogprobEntry | None]:
        lsm = torch.log_softmax(self.model.logits(hidden), dim=-1).cpu()
        entries: list[LogprobEntry | None] = [None]
        k = r.logprobs or 0
        late = 1 if self.misscore_prompts else 0
        for t in range(1, len(r.prompt)):
            entries.append(_entry(lsm[t - 1 + late], r.prompt[t], k))
        return entries

    def _sample_and_emit(self, reqs: list[Request], logits: torch.Tensor) -> None:
        chosen = logits.argmax(dim=-1).tolist()
        for i, r in enumerate(reqs):
            if r.temperature > 0:
                probs = torch.softmax(logits[i].cpu() / r.temperature, dim=-1)
                chosen[i] = int(torch.multinomial(probs, 1, generator=r.gen))
        lp_rows = [i for i, r in enumerate(reqs) if r.logprobs is not None]
        lsm = {}
        if lp_rows:
            rows = torch.log_softmax(logits[lp_rows], dim=-1).cpu()
            lsm = dict(zip(lp_rows, rows, strict=True))
        hang = False
        for i, r in enumerate(reqs):
            tok = chosen[i]
            entry = _entry(lsm[i], tok, r.logprobs or 0) if i in lsm else None  # in lsm: logprobs asked for
            r.ids.append(tok)
            r.n_gen += 1
            finish = None
            if tok == EOS_ID and not r.ignore_eos:
                finish = "stop"
            elif r.n_gen >= r.max_tokens:
                finish = "length"
            r.out.put(("token", tok, entry, finish))
            self.stats["generated_tokens"] += 1
            if finish:
                self._retire(r)
            elif self.hang_after is not None and r.n_gen >= self.hang_after:
                hang = True
        if hang:
            log(f"fault hang-in-decode: stopping all decoding after {self.hang_after} tokens")
            threading.Event().wait()  # forever: streams stall, /health stays 200

    def _retire(self, r: Request) -> None:
        if r in self.running:
            self.running.remove(r)
            self.stats["running"] = len(self.running)
        if r.slot >= 0:
            self.free_slots.append(r.slot)
            r.slot = -1
        self.stats["finished_requests"] += 1

    def fail_all(self, message: str) -> None:
        """Tell every waiting client that the engine died."""
        for r in self.running:
            r.out.put(("error", message))
        while True:
            try:
                self.inbox.get_nowait().out.put(("error", message))
            except queue.Empty:
                break


def _entry(row: torch.Tensor, token: int, k: int) -> LogprobEntry:
    top: list[tuple[int, float]] = []
    if k > 0:
        values, indices = torch.topk(row, k)
        top = list(zip(indices.tolist(), values.tolist(), strict=True))
    return token, float(row[token]), top
