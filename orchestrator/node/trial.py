"""One trial's whole lifecycle, in one place: launch, ready, warm-up, benchmark,
correctness outputs, NCCL verification, teardown; where its start-up time went
(``node.startup``: the ``startup_phases`` record, on every trial that spawned a server).

``run_trial(spec)`` never raises for anything the server does: every outcome becomes a
``TrialResult`` (COMPLETE, FAIL with a kind from the closed list, or PRUNED). It runs
inside a Ray actor on the node that owns the GPUs, or in-process for ``bench``. Warnings
logged while it runs (a process group that survived SIGKILL, ...) go into the result's
``warnings``: an actor's log records reach no handler of the driver. Each step is reported
to ``on_phase`` as it begins (``node.phases``: the start-up phases read from the server's
log as it writes it, then warming up, measuring, the correctness check, stopping).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from orchestrator.backends import get_backend_class
from orchestrator.config.prompts import estimated_tokens
from orchestrator.core import capacity, nccl
from orchestrator.core.errors import StorageWriteError, is_file_write_failure
from orchestrator.core.launch import cache_locations, exit_text, server_environment
from orchestrator.core.logs import capture_warnings
from orchestrator.core.measurement import HostLoad, Measurement, RegimeMark
from orchestrator.core.objectives import Measure
from orchestrator.core.records import COMPLETE, PRUNED, Config, FailureKind, TrialResult
from orchestrator.node import client, gpus, phases, startup
from orchestrator.node.hostload import HostSampler
from orchestrator.node.hwprobe import memory_bandwidth, node_info
from orchestrator.node.measure import PACE_FACTOR, Benchmark, measure, with_host
from orchestrator.node.open_loop import measure_rates
from orchestrator.node.preflight import resolve
from orchestrator.node.server import (
    PortTaken,
    ReadyTimeout,
    ServerExited,
    ServerFailed,
    ServerProcess,
    ServerRegistry,
    ServerStalled,
    SpawnFailed,
    free_port,
)
from orchestrator.node.spec import BenchPlan, TrialSpec

# Candidates per generated token in the correctness capture (the pick and its runner-up).
NEAR_TIE_CANDIDATES = 2
BENCHMARK_PHASE = "benchmark"  # where a stream that stopped was (``startup_phases.stalled_in``)
EXIT_GRACE_S = 2.0  # how long a server whose stream broke is given to finish exiting, to say it exited


def run_trial(spec: TrialSpec, cancel: threading.Event | None = None,
              on_server: Callable[[ServerProcess | None], None] | None = None,
              on_phase: phases.PhaseSink | None = None) -> TrialResult:
    """Run one trial; ``cancel`` set from another thread ends it as interrupted; each phase
    is reported to ``on_phase`` (a sink that fails loses the report, never the trial)."""
    logged: list[str] = []
    report = phases.PhaseReporter(spec.number, on_phase, rounds=spec.bench.repeats)
    with capture_warnings(logged):
        result = _run_trial(spec, cancel or threading.Event(), on_server, report)
    result.warnings.extend(w for w in logged if w not in result.warnings)
    result.phases = report.trail()
    return result


def _run_trial(spec: TrialSpec, cancel: threading.Event, on_server: Callable[[ServerProcess | None], None] | None,
               report: phases.PhaseReporter) -> TrialResult:
    report.phase(phases.LAUNCHING)
    started = time.time()
    timing: dict[str, float] = {}
    node = node_info()
    backend = get_backend_class(spec.server.backend_kind)(dict(spec.server.backend_settings), spec.server.job_file)
    if spec.measure_bandwidth:
        measured = memory_bandwidth(backend.device())
        node["memory_bandwidth_bytes_s"] = measured["bytes_s"]
        node["memory_bandwidth_load"] = measured["load"]
        node["memory_device"] = backend.device()
    log_path = spec.log_path
    proc, launch, env = prepare_server(backend, spec.config, spec.server.host, dict(spec.server.env), log_path,
                                       spec.registry_dir, on_output=report.server_output)
    port = launch.port
    common: dict[str, Any] = dict(started_at=started, node=node, timing=timing)

    def finish(result: TrialResult, stalled_in: str | None = None) -> TrialResult:
        spawned = proc.started_at is not None
        ended_s = time.monotonic() - proc.started_at if spawned else None  # type: ignore[operator]
        ended_on_its_own = proc.exited() if spawned else None  # before the teardown: how it ended (outcome reads it)
        if ended_on_its_own is not None:
            result.signals = dataclasses.replace(result.signals, server_exit_code=ended_on_its_own)
        report.phase(phases.STOPPING)
        timing["teardown_s"] = proc.stop(spec.server.teardown_grace_s)
        if on_server:
            on_server(None)
        log_text = _read(log_path)
        result.log_tail = _tail(log_text, 60)
        if spawned:  # where the start-up's time went (spawn -> first line -> ready, the engine's phases)
            result.startup_phases = startup.parse(log_text, first_line_s=proc.first_output_s,
                                                  ready_s=timing.get("launch_s"),
                                                  ended_s=None if "launch_s" in timing else ended_s)
            if stalled_in is not None:
                result.startup_phases["stalled_in"] = stalled_in
            # the engines' caches it ran with: the node's, the same for every trial (core.launch)
            result.startup_phases["caches"] = cache_locations({**os.environ, **env})
            # what the engine changed beyond the config (vLLM's V1 model runner for n-gram speculation)
            result.warnings.extend(n for n in startup.notices(log_text) if n not in result.warnings)
        result.nccl = nccl.parse_log(log_text)
        requested = {k: v for k, v in env.items() if k.startswith("NCCL_") and not k.startswith("NCCL_DEBUG")}
        if result.nccl.get("version") or (backend.device() == "cuda" and node.get("gpus")
                                          and backend.gpus_per_trial(spec.config) > 1):
            # NCCL ran (or should have): did it take what was asked? (gloo on CPU has no NCCL)
            result.warnings.extend(nccl.verify_applied(requested, result.nccl))
        # the engine may turn the requested all-reduce path off and only log it (vLLM, SGLang)
        result.warnings.extend(backend.allreduce_warnings(spec.config, log_text))
        # a value the engine turned off (whatever asked for it), with what it ran instead: readers show both
        fallbacks = backend.engine_fallbacks(spec.config, log_text)
        result.server.update(argv=launch.argv, env=env, port=port, log=str(log_path),
                             **server_identity(backend, launch, env), **({"fallbacks": fallbacks} if fallbacks else {}))
        if spec.device_check:
            ok, why = gpus.usable()
            result.signals = dataclasses.replace(result.signals, gpus_usable=ok)
            if not ok:
                result.warnings.append(f"GPUs not usable after teardown: {why}")
        result.ended_at = time.time()
        timing["total_s"] = result.ended_at - started
        return result

    def failed(kind: str, reason: str, stalled_in: str | None = None, got: Benchmark | None = None,
               host: HostLoad | None = None) -> TrialResult:
        refused = nccl.classify_failure(_read(log_path)) == FailureKind.NCCL_INVALID
        if kind in (FailureKind.START_CRASH, FailureKind.BENCH_ERROR, FailureKind.HANG) and refused:
            kind, reason = FailureKind.NCCL_INVALID, f"NCCL refused a setting: {reason}"
        # what the finished levels measured stays on the record (fast at 1, failed at 10), and how
        # busy the host was (a timeout on a busy host is not the config's: ``core.outcome.busy_host``)
        kept = got.measurement if got is not None and (got.measurement.levels or got.measurement.host) else None
        if kept is None and host is not None:
            kept = Measurement(host=host)
        return finish(TrialResult.failed(spec.config, kind, reason, measurement=kept, **common), stalled_in)

    if spec.device_check:  # never start on GPUs that something else holds: not the config's fault
        held = gpus.foreign_use(gpus.visible_devices(), {os.getpid()})
        if held:
            result = TrialResult.failed(spec.config, FailureKind.ENV_ERROR,
                                        "the trial's GPUs are not free: " + "; ".join(held), **common)
            result.ended_at = time.time()
            return result
    try:
        t0 = time.monotonic()
        record = proc.start()
        if on_server:
            on_server(proc)
        if cancel.is_set():  # cancelled between the spawn and the line above: nobody could stop it yet
            return failed(FailureKind.INTERRUPTED, "stopped by the user as its server was spawned")

        server_info = asdict(record)
        starting = HostSampler(record.pgid)  # how busy the host is as it starts (a slow start may be the neighbours')
        limit_s = spec.server.startup_timeout_s
        try:
            proc.wait_ready(limit_s, stall_s=spec.server.stall_s)
            # healthy is not yet serving: a 503 (warming up) waits, within what is left of the start-up budget
            proc.wait_serving(limit_s - (time.monotonic() - t0))
        except ServerStalled as exc:
            if cancel.is_set():
                return failed(FailureKind.INTERRUPTED, "stopped by the user during start-up")
            phase = startup.last_phase(_read(log_path))
            load = starting.finish()
            return failed(FailureKind.HANG, f"stalled in {phase}: {exc} (timeouts.stall; its process tree was alive)"
                          f"{_busy_text(load)}", stalled_in=phase, host=load)
        except ServerFailed as exc:
            if cancel.is_set():
                return failed(FailureKind.INTERRUPTED, "stopped by the user during start-up")
            return failed(FailureKind.START_CRASH, f"{exc.reason} (before the server was ready)")
        except ServerExited as exc:
            if cancel.is_set():
                return failed(FailureKind.INTERRUPTED, "stopped by the user during start-up")
            foreign = proc.foreign_listener()  # it died because another process holds its port
            if foreign is not None:
                return failed(FailureKind.ENV_ERROR, str(PortTaken(launch.host, port, foreign)))
            return failed(FailureKind.START_CRASH, f"server exited with code {exc.returncode} before it was ready")
        except ReadyTimeout as exc:
            if cancel.is_set():
                return failed(FailureKind.INTERRUPTED, "stopped by the user during start-up")
            load = starting.finish()
            return failed(FailureKind.START_TIMEOUT,
                          f"not ready after {limit_s:.0f}s ({spec.server.startup_basis}): {exc.why}{_busy_text(load)}",
                          host=load)
        except PortTaken as exc:  # another process answers on the port: not the config's fault
            return failed(FailureKind.ENV_ERROR, str(exc))
        timing["launch_s"] = time.monotonic() - t0
        if cancel.is_set():
            return failed(FailureKind.INTERRUPTED, "stopped by the user")

        # warm-up, then rounds over the prompts at every level (the objective's, then the outcome
        # constraints'); a first round below the prune threshold at every level ends it (node.measure);
        # the host's load beside it (a busy host's timeout is not the config's)
        plan = spec.bench
        if plan.kind.searches_load:  # where the engine changes regime: the capacity search probes there
            plan = replace(plan, marks=regime_marks(backend, spec.config, _read(log_path), plan))
        report.phase(phases.WARMING_UP)
        benchmarking = HostSampler(record.pgid)
        deadline = time.monotonic() + plan.timeout_s
        got = with_host(measure_rates(launch.base_url, launch.model_name, plan, deadline=deadline,
                                      metrics_url=launch.metrics_url, progress=report.measuring_rate)
                        if plan.kind.open_loop else
                        measure(launch.base_url, launch.model_name, plan, deadline=deadline,
                                metrics_url=launch.metrics_url, prune_below=spec.prune_below,
                                progress=report.measuring),
                        benchmarking.finish())
        if not got.ok:  # the time it ran is still the benchmark's (the report's timeline draws it so)
            if got.measurement.warmup_s:
                timing["warmup_s"] = got.measurement.warmup_s
            if got.measurement.bench_s:
                timing["bench_s"] = got.measurement.bench_s
            if cancel.is_set():
                return failed(FailureKind.INTERRUPTED, "stopped by the user during the benchmark", got=got)
            return _bench_failure(failed, proc, got)
        pruned = got.pruned
        timing["warmup_s"] = got.measurement.warmup_s
        timing["bench_s"] = got.measurement.bench_s
        metrics: dict[str, Any] = {}
        warnings = list(got.warnings)

        # correctness outputs (compared by the driver against the golden reference), also of a
        # pruned trial: a config that is wrong is reported wrong (and banned), not merely slow
        t0 = time.monotonic()
        outputs: dict[str, Any] = {}
        if spec.check.prompts:
            report.phase(phases.CHECKING)
            outputs = capture_outputs(launch.base_url, launch.model_name, spec, spec.check.reference_texts)
            if outputs.get("error"):
                return _bench_failure(failed, proc, got, outputs["error"])
            if spec.check.reference_texts is None:  # this is the reference: capture twice to calibrate
                second = capture_outputs(launch.base_url, launch.model_name, spec, outputs["texts"])
                if second.get("error"):
                    return _bench_failure(failed, proc, got, second["error"])
                outputs = {"reference": True, "first": outputs, "second": second}
        timing["check_s"] = time.monotonic() - t0
        try:  # what was measured was this server: the port is still its tree's
            proc.raise_if_port_taken()
        except PortTaken as exc:
            return failed(FailureKind.ENV_ERROR, f"{exc}, found after the benchmark")
        outcome = PRUNED if pruned else COMPLETE
        reason = None
        if pruned:
            reason = _pruned_reason(got.first_round(plan), spec.prune_below or {}, metrics, plan.measure)
        result = TrialResult(outcome=outcome, config=spec.config, value=got.value, metrics=metrics,
                             measurement=got.measurement, outputs=outputs, server=server_info, warnings=warnings,
                             failure_reason=reason, **common)
        return finish(result)
    except Exception as exc:  # noqa: BLE001 - a trial never takes the actor down
        full = write_failure(exc, Path(spec.log_dir).parent)
        if full is not None:  # the study's folder refused a write (disk full): the driver stops the study
            result = failed(FailureKind.ENV_ERROR, full.where)
            result.signals = dataclasses.replace(result.signals, write_failed=full.to_dict())
            return result
        if isinstance(exc, SpawnFailed):  # the command or its interpreter is missing here: not the config's fault
            return failed(FailureKind.ENV_ERROR,
                          f"{exc} (on {node.get('hostname')}: is the server installed on this node?)")
        return failed(FailureKind.BENCH_ERROR, f"{type(exc).__name__}: {exc}")


def server_identity(backend, launch, env: dict[str, str]) -> dict[str, str | None]:
    """Which server this trial ran: the command as it resolved on this node and the release
    the backend reports (where the server is found is not part of a study's identity, so
    each trial keeps it: ``Backend.identity_settings``)."""
    command = launch.argv[0] if launch.argv else None
    return {"command": resolve(command, {**os.environ, **env}) if command else None, "version": backend.version()}


def write_failure(exc: BaseException, folder: Path) -> StorageWriteError | None:
    """The failed write into the study's folder behind ``exc`` (its cause chain), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StorageWriteError):
            return seen
        if isinstance(seen, OSError) and is_file_write_failure(seen):
            return StorageWriteError(Path(seen.filename).parent if isinstance(seen.filename, str) else folder, seen)
        seen = seen.__cause__ or seen.__context__
    return None


def _pruned_reason(first: dict[int, float | None], thresholds, metrics: dict[str, Any], measure: Measure) -> str:
    """Why a trial stopped after its first round (the thresholds kept in its metrics, as worths)."""
    metrics["pruned_below"] = next(iter(thresholds.values()), None)  # the first level's, as progress reads it
    metrics["pruned_below_levels"] = {str(k): v for k, v in thresholds.items()}
    parts = [measure.below(first[k], v, k) + (f" at concurrency {k}" if k > 1 else "")  # type: ignore[arg-type]
             for k, v in thresholds.items() if first.get(k) is not None]
    return (f"first round below the pruning threshold at every level ({'; '.join(parts)}; a fraction of the best "
            "so far)")


def _bench_failure(failed, proc: ServerProcess, got: Benchmark, error: str | None = None) -> TrialResult:
    """The failure of a benchmark (``error``: a later step's, else the benchmark's own), with what
    its finished levels measured and, for a timeout, how busy the host was."""
    from_bench = error is None
    error = error or got.error or "benchmark failed"
    if proc.fatal:
        return failed(FailureKind.BENCH_ERROR, f"{proc.fatal} during the benchmark ({error})", got=got)
    waited = from_bench and (got.stalled or got.timed_out)  # it was alive when the stream stopped
    returncode = proc.exited(within_s=0.0 if waited else EXIT_GRACE_S)
    if returncode is not None:  # what ended the stream: the server exited (a clean exit 0 too)
        return failed(FailureKind.BENCH_ERROR, f"server exited during the benchmark ({exit_text(returncode)}): "
                      f"{error}", got=got)
    if from_bench and got.stalled:
        return failed(FailureKind.HANG, f"a stream of the benchmark stopped: {error} (timeouts.stall; the server "
                      "was alive)", stalled_in=BENCHMARK_PHASE, got=got)
    if from_bench and got.timed_out:
        limit = (f" within its {got.limit_s:.0f}s limit (the larger of timeouts.bench and {PACE_FACTOR:g}x what "
                 "its own pace predicted)") if got.limit_s else ""
        return failed(FailureKind.BENCH_TIMEOUT, f"benchmark did not finish{limit}: {error}"
                      f"{_busy_text(got.measurement.host)}", got=got)
    return failed(FailureKind.BENCH_ERROR, error, got=got)


def _busy_text(host: HostLoad | None) -> str:
    """'; the host was busy: other work took 1.8 of 2 CPUs (load 4.1)' where it was, else ''."""
    return f"; the host was busy: {host.describe()}" if host is not None and host.busy else ""


def prepare_server(backend, config: Config, host: str, job_env: dict[str, str], log_path: Path,
                   registry_dir: str, on_output: Callable[[list[str]], None] | None = None,
                   ) -> tuple[ServerProcess, Any, dict[str, str]]:
    """A not-yet-started server for a config: free port, env (NCCL start-up logging on), log
    file; ``on_output`` is handed the log's new lines while it runs (``ServerProcess``)."""
    launch = backend.launch_spec(config, host, free_port(host))
    env = server_environment(job_env, launch.env, instrumented=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    proc = ServerProcess(launch, log_path, registry=ServerRegistry(Path(registry_dir)), base_env={**os.environ, **env},
                         watch=backend.watch_rules(), on_output=on_output)
    return proc, launch, env



def capture_outputs(base_url: str, model: str, spec: TrialSpec, score_texts: Sequence[str] | None) -> dict[str, Any]:
    """Greedy texts for the check prompts, and log-probabilities of ``score_texts``."""
    got = client.greedy_outputs(base_url, model, spec.check.prompts, spec.check.tokens, spec.bench.timeout_s,
                               top_logprobs=NEAR_TIE_CANDIDATES if spec.check.logprobs else None)
    if any(not g.get("ok", True) for g in got):
        bad = next(g for g in got if not g.get("ok", True))
        return {"error": f"correctness request failed: {bad.get('error')}"}
    out: dict[str, Any] = {"texts": [g["text"] for g in got]}
    if spec.check.logprobs:  # each generated token and its runner-up: tells a near-tie flip from a wrong model
        out["tokens"] = [g.get("tokens") for g in got]
        out["top"] = [g.get("top") for g in got]
    if spec.check.logprobs:  # the reference scores its own text; a trial scores the reference's
        texts = out["texts"] if score_texts is None else score_texts
        out["logprobs"] = [client.score_continuation(base_url, model, p, t, spec.bench.timeout_s)
                           for p, t in zip(spec.check.prompts, texts)]
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def regime_marks(backend: Any, config: Config, log_text: str, plan: BenchPlan) -> tuple[RegimeMark, ...]:
    """Where this server changes regime as its batch grows (``core.capacity``): what the config asks
    for (``Backend.load_marks``), replaced kind by kind by what the engine's log says it runs with
    (``startup.engine_marks``; the KV cache's room in requests of the plan's mean prompt, as
    characters / 4, and output)."""
    prompts = plan.prompts or ("",)
    per_request = (sum(estimated_tokens(p) for p in prompts) / len(prompts)
                   + sum(plan.tokens_for(i) for i in range(len(prompts))) / len(prompts))
    return capacity.merge_marks(backend.load_marks(config), startup.engine_marks(log_text, per_request))
