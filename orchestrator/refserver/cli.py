"""Command line of the reference server: flags, validation, start-up of rank 0 and the others.

Bad input (unknown preset, a TP that does not divide the heads, a port in use,
``--graph-capture`` on CPU, a malformed flag) exits 2 with one line on stderr naming the
flag and the allowed values, before any rank is spawned. A failure while running exits 1.

Start-up of rank 0: validate, bind the HTTP port (answers 503 from then on), spawn the
other ranks, import torch, join the process group, build the weights (and CUDA graphs),
run a warm-up step through all ranks, log ``ready on http://HOST:PORT``, serve.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta

from orchestrator.refserver import procs
from orchestrator.refserver.presets import DTYPE_BYTES, PRESETS, ModelDims
from orchestrator.refserver.procs import log

FAULTS = ("crash-on-start", "hang-on-start", "hang-in-decode", "garbage", "slow-start",
          "crash-after", "misscored-prompts")
FAULT_DEFAULT_N = {"hang-in-decode": 4, "slow-start": 8}  # tokens before the hang / seconds
FAULT_NEEDS_N = ("crash-after",)
DEFAULT_CAPTURE_SIZES = "1,2,4,8"
NCCL_INIT_TIMEOUT = timedelta(minutes=10)  # torch's own for an NCCL group: how long ranks wait to meet


class BadFlag(Exception):
    """One line for the user: ``--flag: what is wrong; allowed: ...``."""


@dataclass(frozen=True)
class Fault:
    kind: str
    n: float | None = None

    @classmethod
    def parse(cls, text: str) -> Fault:
        kind, _, arg = text.partition(":")
        if kind not in FAULTS:
            raise BadFlag(f"--fault: unknown kind {kind!r}; allowed: {', '.join(FAULTS)} "
                          "(hang-in-decode[:TOKENS], slow-start[:SECONDS], crash-after:N)")
        if not arg:
            if kind in FAULT_NEEDS_N:
                raise BadFlag(f"--fault: {kind} needs a count, e.g. {kind}:3")
            return cls(kind, FAULT_DEFAULT_N.get(kind))
        if kind not in FAULT_DEFAULT_N and kind not in FAULT_NEEDS_N:
            raise BadFlag(f"--fault: {kind} takes no argument, got {text!r}")
        try:
            n = float(arg) if kind == "slow-start" else int(arg)
        except ValueError:
            n = -1
        if n < (0 if kind == "slow-start" else 1):
            what = "seconds >= 0" if kind == "slow-start" else "an integer >= 1"
            raise BadFlag(f"--fault: {kind} needs {what}, got {arg!r}")
        return cls(kind, n)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage otherwise)
        raise BadFlag(message.replace("argument ", "", 1))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m orchestrator.refserver",
                description="Reference tensor-parallel decode server (OpenAI-compatible).")
    p.add_argument("--model", default="tiny", help=f"preset: {', '.join(PRESETS)}")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (ranks)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--graph-capture", action="store_true",
                   help="capture decode steps in CUDA graphs (cuda only)")
    p.add_argument("--capture-sizes", default=DEFAULT_CAPTURE_SIZES,
                   help="batch sizes to capture, comma-separated")
    p.add_argument("--max-batch", type=int, default=None,
                   help="most requests decoded together; KV-cache slots (default 64)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="prompt + output tokens per request (default 2048)")
    p.add_argument("--fault", default=None, help=f"inject a fault: {', '.join(FAULTS)}")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads per rank (default: (cpus - 1) / tp, at least 1)")
    p.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default=None,
                   help="default float32 on cpu, bfloat16 on cuda")
    p.add_argument("--served-model-name", default=None, help="model id (default: the preset)")
    for flag in ("layers", "hidden", "heads", "kv-heads", "ffn", "vocab"):
        p.add_argument(f"--{flag}", type=int, default=None, help=f"override the preset's {flag}")
    # internal: set by rank 0 for the ranks it spawns
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--master-port", type=int, default=0, help=argparse.SUPPRESS)
    return p


@dataclass(frozen=True)
class Settings:
    dims: ModelDims
    model_name: str
    tp: int
    device: str
    host: str
    port: int
    graph_capture: bool
    capture_sizes: tuple[int, ...]
    max_batch: int
    max_model_len: int
    fault: Fault | None
    seed: int
    threads: int
    dtype: str
    rank: int
    master_port: int

    def info(self) -> dict:
        return {"model": self.model_name, "dims": self.dims.as_dict(), "tp": self.tp,
                "device": self.device, "dtype": self.dtype, "graph_capture": self.graph_capture,
                "capture_sizes": list(self.capture_sizes) if self.graph_capture else [],
                "max_batch": self.max_batch, "max_model_len": self.max_model_len,
                "threads": self.threads, "seed": self.seed,
                "fault": None if self.fault is None else
                f"{self.fault.kind}" + ("" if self.fault.n is None else f":{self.fault.n:g}"),
                "pid": os.getpid(), "pgid": os.getpgid(0),
                "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}


def parse_settings(argv: list[str]) -> Settings:
    """Flags -> validated settings, or BadFlag (one line). Imports no torch."""
    a = build_parser().parse_args(argv)
    if a.model not in PRESETS:
        raise BadFlag(f"--model: unknown preset {a.model!r}; allowed: {', '.join(PRESETS)}")
    dims = PRESETS[a.model].with_overrides(
        layers=a.layers, hidden=a.hidden, heads=a.heads, kv_heads=a.kv_heads, ffn=a.ffn,
        vocab=a.vocab)
    err = dims.dims_error()
    if err:
        raise BadFlag(err)
    tp_err = dims.tp_error(a.tp)
    if tp_err:
        allowed = ", ".join(str(t) for t in dims.allowed_tp(16))
        raise BadFlag(f"--tp: {tp_err}; allowed: {allowed}")
    if a.graph_capture and a.device != "cuda":
        raise BadFlag("--graph-capture: CUDA graphs need --device cuda; allowed with "
                      "--device cpu: leave --graph-capture off")
    try:
        sizes = tuple(sorted({int(s) for s in a.capture_sizes.split(",") if s.strip()}))
    except ValueError:
        sizes = ()
    if not sizes or sizes[0] < 1:
        raise BadFlag(f"--capture-sizes: {a.capture_sizes!r} is not a comma-separated list "
                      "of positive integers; allowed: e.g. 1,2,4,8")
    if not 0 < a.port < 65536:
        raise BadFlag(f"--port: {a.port} is out of range; allowed: 1-65535")
    gpu = a.device == "cuda"
    max_batch = a.max_batch if a.max_batch is not None else 64
    if max_batch < 1:
        raise BadFlag(f"--max-batch: must be >= 1, got {max_batch}")
    max_len = a.max_model_len if a.max_model_len is not None else 2048  # the decode prompts are up to ~1500
    if max_len < 2:
        raise BadFlag(f"--max-model-len: must be >= 2, got {max_len}")
    sizes = tuple(s for s in sizes if s <= max_batch) or (max_batch,)
    fault = Fault.parse(a.fault) if a.fault else None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # one core is left for the HTTP thread and a local client: OpenMP barriers collapse
    # (20x slower measured on 2 cores) when its threads have to wait for a timeslice
    threads = a.threads if a.threads is not None else max(1, ((cpus or 1) - 1) // a.tp)
    if threads < 1:
        raise BadFlag(f"--threads: must be >= 1, got {threads}")
    dtype = a.dtype or ("bfloat16" if gpu else "float32")
    return Settings(dims=dims, model_name=a.served_model_name or a.model, tp=a.tp,
                    device=a.device, host=a.host, port=a.port, graph_capture=a.graph_capture,
                    capture_sizes=sizes, max_batch=max_batch, max_model_len=max_len,
                    fault=fault, seed=a.seed, threads=threads, dtype=dtype, rank=a.rank,
                    master_port=a.master_port)


def check_cuda(s: Settings) -> None:
    """BadFlag unless enough CUDA devices are visible (imports torch)."""
    import torch  # heavy: imported only where a measurement runs on the device

    if not torch.cuda.is_available():
        raise BadFlag("--device: cuda is not available here; allowed: cpu")
    n = torch.cuda.device_count()
    if n < s.tp:
        raise BadFlag(f"--tp: {s.tp} needs {s.tp} GPUs, {n} visible; allowed: 1-{n}")


# ---- the ranks ------------------------------------------------------------------------------

def build_rank(s: Settings, rank: int, master_port: int, listen_fd: int | None = None):
    """Join the process group, build this rank's shard (+ CUDA graphs) and the step channel.
    Rank 0's rendezvous store serves on ``listen_fd`` (``procs.loopback_listener``), the
    others connect to it on 127.0.0.1."""
    import torch  # heavy: imported only where a measurement runs on the device
    import torch.distributed as dist  # heavy: imported only where a measurement runs on the device

    from orchestrator.refserver.engine import Channel
    from orchestrator.refserver.model import DTYPES, GraphRunner, ShardedLlama

    torch.set_num_threads(s.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    world = s.tp
    ctrl = None

    def store(timeout: timedelta):
        return dist.TCPStore("127.0.0.1", master_port, world, is_master=rank == 0, timeout=timeout,
                             master_listen_fd=listen_fd if rank == 0 else None)

    if s.device == "cpu":
        device = torch.device("cpu")
        if world > 1:
            dist.init_process_group("gloo", store=store(timedelta(hours=24)), rank=rank, world_size=world,
                                    timeout=timedelta(hours=24))
            ctrl = dist.group.WORLD
    else:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        # NCCL even at world size 1, so NCCL initialises (and logs) as in real servers
        dist.init_process_group("nccl", store=store(NCCL_INIT_TIMEOUT), rank=rank, world_size=world,
                                device_id=device)
        ctrl = dist.new_group(backend="gloo", timeout=timedelta(hours=24)) if world > 1 else None
        probe = torch.ones(1, device=device)
        dist.all_reduce(probe)
        torch.cuda.synchronize()
        if rank == 0:
            log(f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} via torch "
                f"{torch.__version__}, world size {world}")

    if world > 1:  # NCCL on CUDA, gloo on CPU; at world size 1 there is nothing to reduce
        def all_reduce(x):
            dist.all_reduce(x)
    else:
        def all_reduce(x):
            return None

    t0 = time.monotonic()
    model = ShardedLlama(s.dims, tp=world, rank=rank, device=device, dtype=DTYPES[s.dtype],
                         seed=s.seed, max_slots=s.max_batch, max_len=s.max_model_len,
                         all_reduce=all_reduce, with_head=rank == 0,
                         garbage=s.fault is not None and s.fault.kind == "garbage")
    if rank == 0:
        kv_gib = (s.max_batch + 1) * s.max_model_len * s.dims.kv_bytes_per_token(
            DTYPE_BYTES[s.dtype]) / world / 2**30
        log(f"weights built in {time.monotonic() - t0:.3f}s ({s.dims.param_count() / 1e6:.1f}M "
            f"params, {s.dtype}, tp={world}, threads={s.threads}); KV cache {kv_gib:.2f} GiB "
            f"per rank ({s.max_batch} slots x {s.max_model_len} tokens); fused kernels "
            f"{'on' if model.fused else 'off'} ({model.fused_why})")
    graphs = None
    if s.graph_capture:
        t0 = time.monotonic()
        graphs = GraphRunner(model, list(s.capture_sizes))
        graphs.capture()
        if rank == 0:
            log(f"captured {len(graphs.graphs)} CUDA graphs (batch sizes {graphs.sizes}, "
                f"kv lengths {graphs.buckets}) in {time.monotonic() - t0:.3f}s")
    channel = Channel(ctrl, world, capacity=3 * max(s.max_batch, 64))
    return model, graphs, channel


def run_worker(s: Settings) -> int:
    from orchestrator.refserver.engine import worker_loop

    try:
        model, graphs, channel = build_rank(s, s.rank, s.master_port)
        worker_loop(model, graphs, channel)
    except BaseException:  # noqa: BLE001 - any end of a worker rank is printed; the process exits below
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    return 0


def serve(s: Settings, argv: list[str]) -> int:
    from orchestrator.refserver.api import App, Server

    if s.device == "cuda":
        check_cuda(s)
    ranks = procs.Ranks()
    app = App(model_name=s.model_name, vocab=s.dims.vocab, max_len=s.max_model_len,
              info=s.info(), on_crash=lambda msg: ranks.exit(1, msg),
              crash_after=int(s.fault.n or 0) if s.fault and s.fault.kind == "crash-after" else None)
    try:
        server = Server(s.host, s.port, app)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise BadFlag(f"--port: {s.host}:{s.port} is already in use; allowed: a free "
                          "port") from None
        if exc.errno == errno.EACCES:
            raise BadFlag(f"--port: {s.port} needs privileges; allowed: a free port in "
                          "1024-65535") from None
        raise BadFlag(f"--host: cannot listen on {s.host}:{s.port} ({exc.strerror or exc}); "
                      "allowed: a local address such as 127.0.0.1 or 0.0.0.0") from None
    rendezvous = procs.loopback_listener() if (s.tp > 1 or s.device == "cuda") else None
    master_port = rendezvous.getsockname()[1] if rendezvous is not None else 0
    procs.meet_on_loopback()
    ranks.spawn(argv, s.tp, master_port)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    ranks.watch()
    log(f"starting {s.model_name}: tp={s.tp} device={s.device} dtype={s.dtype} "
        f"max_batch={s.max_batch} graph_capture={s.graph_capture} pid={os.getpid()} "
        f"pgid={os.getpgid(0)}" + (f" fault={s.fault.kind}" if s.fault else ""))
    if s.fault and s.fault.kind == "crash-on-start":
        time.sleep(0.5)
        ranks.exit(1, "fault crash-on-start: exiting before ready")
    try:
        from orchestrator.refserver.engine import Engine

        model, graphs, channel = build_rank(s, 0, master_port,
                                            rendezvous.fileno() if rendezvous is not None else None)
        hang_after = int(s.fault.n or 0) if s.fault and s.fault.kind == "hang-in-decode" else None
        engine = Engine(model, graphs, channel, max_batch=s.max_batch, hang_after=hang_after,
                        misscore_prompts=bool(s.fault and s.fault.kind == "misscored-prompts"))
        engine.warmup()
        app.engine = engine
    except BaseException:  # noqa: BLE001 - any start-up failure ends every rank with one line
        traceback.print_exc()
        ranks.exit(1, "start-up failed")
    if s.fault and s.fault.kind == "hang-on-start":
        log("fault hang-on-start: never becoming ready")
        threading.Event().wait()
    if s.fault and s.fault.kind == "slow-start":
        log(f"fault slow-start: ready in {s.fault.n:g}s more")
        time.sleep(float(s.fault.n or 0))
    engine.ready.set()
    host = f"[{s.host}]" if ":" in s.host else s.host
    log(f"ready on http://{host}:{s.port}")
    try:
        engine.loop()
    except BaseException as exc:  # noqa: BLE001 - a failed engine fails its requests, then every rank exits
        traceback.print_exc()
        engine.fail_all(f"engine failed: {exc}")
        ranks.exit(1, f"engine failed: {exc}")
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    procs.default_signals()
    try:
        s = parse_settings(argv)
        if s.rank > 0:
            return run_worker(s)
        os.environ.pop(procs.PARENT_ENV, None)
        return serve(s, argv)
    except BadFlag as exc:
        sys.stderr.write(f"refserver: error: {exc}\n")
        sys.stderr.flush()
        return 2
