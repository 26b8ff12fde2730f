"""run_trial with real server processes: a trial stopped early for speed still answers the
correctness prompts, so a config that is wrong is reported wrong (and banned), not merely
slow (on a loaded box the demo's garbage config was pruned before its check and the gate
never saw it); a trial that cannot write into its study folder (a full tmpfs) is env-error,
never the config's fault; a server whose echo scores are not its model's passes with a warning (the
reference server's misscored-prompts fault, against its own golden reference); a cancel is never
lost, whenever it comes; a start that runs out of time while other work takes every CPU says how
busy the host was and is not held against the config (issue 38). Where the reference server's
model is not at stake the server is the fake OpenAI server on its command line (tests/wrapped_server.py),
its faults as the fake's flags."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from wrapped_server import fake_settings, fake_wrapper

from conftest import FAKE_OPENAI, mounted_tmpfs
from orchestrator.core import correctness, outcome
from orchestrator.core.records import COMPLETE, FAIL, PRUNED
from orchestrator.node.spec import BenchPlan, CheckPlan, ServerPlan, TrialSpec
from orchestrator.node.trial import run_trial

pytestmark = pytest.mark.slow

PROMPTS = ["The quick brown fox", "Once upon a time"]


def _server(tmp_path, reference: bool = False) -> ServerPlan:
    """The tiny reference server's launch, or (``reference`` false) the fake server's on its command line."""
    kind, settings = ("refserver", {"model": "tiny", "device": "cpu"}) if reference else \
        ("command", fake_settings(fake_wrapper(tmp_path)))
    return ServerPlan(kind, settings, None, {}, startup_timeout_s=60, teardown_grace_s=5)


def _spec(tmp_path, number: int, fault: str, reference_texts=None, prune_below=None,
          reference: bool = False) -> TrialSpec:
    return TrialSpec(number=number, config={"tp_size": 1, "backend.fault": fault},
                     server=_server(tmp_path, reference),
                     bench=BenchPlan(prompts=("Hello",), output_tokens=16, warmup=1, repeats=2, timeout_s=30),
                     check=CheckPlan(prompts=tuple(PROMPTS), tokens=12,
                                     reference_texts=tuple(reference_texts) if reference_texts else None),
                     log_dir=str(tmp_path / "logs"), registry_dir=str(tmp_path / "servers"),
                     prune_below={1: prune_below} if prune_below else None, measure_bandwidth=False)


def _golden(tmp_path, reference: bool):
    ref = run_trial(_spec(tmp_path, 0, "none", reference=reference))
    golden, why = correctness.calibrate(PROMPTS, ref.outputs["first"], ref.outputs["second"])
    assert golden is not None, why
    return golden


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """The golden reference of a healthy reference server, captured once for the module's tests of its scores."""
    return _golden(tmp_path_factory.mktemp("reference"), reference=True)


@pytest.fixture(scope="module")
def fake_golden(tmp_path_factory):
    """The golden reference of a healthy fake server (on the reference server's command line)."""
    return _golden(tmp_path_factory.mktemp("fake-reference"), reference=False)


def test_a_pruned_wrong_config_fails_the_gate(tmp_path, fake_golden, no_leftover_servers):
    golden = fake_golden
    # a threshold no server here reaches: the first repeat prunes the trial
    slow = run_trial(_spec(tmp_path, 1, "garbage", reference_texts=golden.texts, prune_below=1e9))
    assert slow.outcome == PRUNED and slow.outputs, slow.failure_reason
    final = outcome.decide(slow, golden=golden).result
    assert final.outcome == FAIL and final.failure_kind == "wrong-output", final
    # a pruned config whose output is right stays PRUNED
    fine = run_trial(_spec(tmp_path, 2, "none", reference_texts=golden.texts, prune_below=1e9))
    assert outcome.decide(fine, golden=golden).result.outcome == PRUNED


def test_a_server_whose_scores_are_not_its_models_passes_the_gate_with_a_warning(tmp_path, golden,
                                                                                no_leftover_servers):
    # the refserver's misscored-prompts fault scores echo text one position late (its generation is
    # right), as vLLM 0.26.0 with a draft model did on a GPU: same greedy text, scores 26-27 nats off;
    # a model that is wrong fails on both channels (the garbage config of the test above)
    skewed = run_trial(_spec(tmp_path, 1, "misscored-prompts", reference_texts=golden.texts, reference=True))
    final = outcome.decide(skewed, golden=golden).result
    assert final.outcome == COMPLETE, final.failure_reason
    verdict = final.correctness
    assert verdict["text_matches"] == f"{len(PROMPTS)}/{len(PROMPTS)}" and verdict["max_drift"] > golden.tolerance
    assert verdict["disowned_scores"]["prompts"] and any("not its model's" in w for w in final.warnings)


def test_a_cancel_that_comes_as_the_server_is_spawned_is_not_lost(tmp_path, no_leftover_servers):
    # the executor's cancel_all stops the server it knows of; a cancel between the spawn and the
    # moment the trial hands the server over finds none to stop, so the trial itself must see it
    # there, not after waiting out the start-up timeout on a server that never turns healthy
    # (seen under load: the executor's test waited 120 s for an interrupted trial)
    cancel = threading.Event()
    spec = dataclasses.replace(_spec(tmp_path, 3, "hang-on-start"),
                               server=dataclasses.replace(_spec(tmp_path, 3, "none").server, startup_timeout_s=20))
    result = run_trial(spec, cancel, on_server=lambda server: cancel.set() if server is not None else None)
    assert result.outcome == FAIL and result.failure_kind == "interrupted"
    assert result.failure_reason == "stopped by the user as its server was spawned"  # not after the timeout


def test_a_trial_that_cannot_write_into_the_full_study_folder_is_not_the_configs_fault(tmp_path,
                                                                                     no_leftover_servers):
    """The server's log and record live in the study's folder: a full disk there fails the
    trial as env-error (never banned) with the folder named, and the driver stops on it."""
    disk = tmp_path / "disk"
    with mounted_tmpfs(disk, "64k"):
        (disk / "logs").mkdir()
        (disk / "servers").mkdir()
        with open(disk / "filler", "wb", buffering=0) as fh, pytest.raises(OSError):
            while True:  # the disk is full
                fh.write(b"\0" * 4096)
        spec = TrialSpec(number=0, config={"tp_size": 1},
                         server=_server(tmp_path),
                         bench=BenchPlan(prompts=("Hello",), output_tokens=8, warmup=1, repeats=2, timeout_s=30),
                         log_dir=str(disk / "logs"), registry_dir=str(disk / "servers"), measure_bandwidth=False)
        result = run_trial(spec)
        assert (result.outcome, result.failure_kind) == ("FAIL", "env-error"), result.failure_reason
        assert result.failure_reason.startswith(f"cannot write to {disk}") and "No space left" in result.failure_reason
        final = outcome.decide(result)
        assert final.blameless and not final.counted
        stop = result.signals.write_error
        assert stop is not None and stop.where == result.failure_reason and stop.hint == "free space there"


def test_an_engine_notice_in_the_servers_log_is_in_the_trials_warnings(tmp_path, no_leftover_servers):
    """A server that says what vLLM said with n-gram speculation (it runs another model runner than
    asked): the trial's record carries it, once, whatever else it measured."""
    said = ("0:(APIServer pid=7) WARNING 12-01 21:01:47 [vllm.py:584] Model Runner V2 does not yet support "
            "ngram/ngram_gpu speculative decoding; using the V1 model runner instead.")
    fake = str(Path(__file__).resolve().parents[1] / "fake_openai_server.py")
    argv = ["{python}", fake, "--port", "{port}", "--host", "{host}", "--token-delay", "0.001", "--say-after", said]
    spec = TrialSpec(number=1, config={}, server=ServerPlan("command", {"argv": argv, "model_name": "fake"}, None, {},
                                                            startup_timeout_s=30, teardown_grace_s=5),
                     bench=BenchPlan(prompts=("Hello there",), output_tokens=8, warmup=1, repeats=1, timeout_s=30),
                     log_dir=str(tmp_path / "logs"), registry_dir=str(tmp_path / "servers"), measure_bandwidth=False)
    got = run_trial(spec)
    assert got.outcome == COMPLETE, got.failure_reason
    notices = [w for w in got.warnings if w.startswith("engine notice: ")]
    assert notices == ["engine notice: Model Runner V2 does not yet support ngram/ngram_gpu speculative decoding; "
                       "using the V1 model runner instead."]


SPIN = "while True: pass\n"


def _never_ready(tmp_path) -> TrialSpec:
    argv = ["{python}", str(FAKE_OPENAI), "--port", "{port}", "--model", "fake", "--ready-after", "100000"]
    return TrialSpec(number=1, config={}, server=ServerPlan("command", {"argv": argv, "model_name": "fake"}, None, {},
                                                            startup_timeout_s=4, teardown_grace_s=5),
                     bench=BenchPlan(prompts=("Hello",), output_tokens=8, warmup=0, repeats=1, timeout_s=30),
                     log_dir=str(tmp_path / "logs"), registry_dir=str(tmp_path / "servers"), measure_bandwidth=False)


def test_a_start_timeout_on_a_busy_host_is_not_the_configs_fault(tmp_path, no_leftover_servers):
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
                for _ in range(psutil.cpu_count() or 2)]
    try:
        time.sleep(0.5)  # the spinners' interpreters are up and spinning
        result = run_trial(_never_ready(tmp_path))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert (result.outcome, result.failure_kind) == (FAIL, "start-timeout"), result.failure_reason
    assert result.failure_reason.startswith("not ready after 4s (timeouts.startup): health never answered 200")
    assert "; the host was busy: other work took" in result.failure_reason, result.failure_reason
    host = result.measurement.host
    assert host is not None and host.busy and host.wall_s >= 4
    # blameless even after an earlier timeout of the same config: re-queued, not counted, not banned
    final = outcome.decide(result, earlier_timeouts=1)
    assert (final.counted, final.blameless, final.requeue) == (False, True, True)
    assert outcome.BUSY_HOST_NOTE in final.result.failure_reason


def test_a_server_ended_by_a_stop_signal_from_outside_says_so_and_is_not_the_configs_when_the_run_is_stopping(
        tmp_path, no_leftover_servers):
    # a service manager stopping the run signals every process (systemd's control-group kill),
    # the trial's server too: the trial records how its server ended, and the driver, which got
    # the same stop, does not hold the failure against the config
    import signal

    servers: list = []

    def stop_once_measuring(phase) -> None:
        if phase.name == "measuring" and servers and servers[0].proc.returncode is None:
            servers[0].proc.send_signal(signal.SIGTERM)  # the launched process, as the service manager does

    long_bench = BenchPlan(prompts=("Hello",), output_tokens=400, warmup=1, repeats=4, timeout_s=60)
    spec = dataclasses.replace(_spec(tmp_path, 5, "none"), bench=long_bench)
    result = run_trial(spec, on_server=lambda s: servers.append(s) if s is not None else None,
                       on_phase=stop_once_measuring)
    assert (result.outcome, result.failure_kind) == (FAIL, "bench-error"), result.failure_reason
    assert "killed by SIGTERM" in result.failure_reason and result.signals.server_exit_code == -signal.SIGTERM
    assert outcome.ended_by_the_stop(result, 1) == "its server ended (killed by SIGTERM)"
    final = outcome.decide(result, stop_signals=1)  # the run is being stopped: the same stop ended its server
    assert final.result.failure_kind == "interrupted"
    assert final.result.failure_reason.startswith("its server ended (killed by SIGTERM) while the run was being")
    assert (final.counted, final.blameless, final.requeue) == (False, True, True)
    alone = outcome.decide(result)  # no stop under way: a server that ends mid-benchmark is the config's
    assert alone.result.failure_kind == "bench-error" and alone.counted


def test_an_engine_that_shuts_down_cleanly_on_the_stop_is_not_the_configs_either(tmp_path, no_leftover_servers):
    # an engine's front shuts down on SIGTERM and exits 0 a moment later, while its worker, which
    # got the same signal, is gone at once: whichever end the trial sees first (the worker's, or
    # the front's clean exit), the stop's end of a server is not the config's
    import signal

    argv = ["{python}", str(FAKE_OPENAI), "--port", "{port}", "--model", "fake", "--ready-after", "100000",
            "--workers", "1", "--graceful-term", "1.0"]
    spec = dataclasses.replace(_never_ready(tmp_path), server=ServerPlan(
        "command", {"argv": argv, "model_name": "fake"}, None, {}, startup_timeout_s=60, teardown_grace_s=5))

    def stop_every_process(server) -> None:
        if server is None:
            return

        def stop() -> None:
            front = psutil.Process(server.proc.pid)
            for _ in range(300):  # the worker is up (a guard, not a bound)
                workers = front.children(recursive=True)
                if workers:
                    break
                time.sleep(0.05)
            for process in [*workers, front]:
                process.send_signal(signal.SIGTERM)

        threading.Thread(target=stop, daemon=True).start()

    result = run_trial(spec, on_server=stop_every_process)
    assert result.outcome == FAIL and result.failure_kind == "start-crash", result.failure_reason
    final = outcome.decide(result, stop_signals=1)
    assert final.result.failure_kind == "interrupted" and not final.counted and final.blameless
    assert final.result.failure_reason.startswith("its server "), final.result.failure_reason
    assert outcome.decide(result).counted  # the same failure with no stop under way is the config's


def test_a_goodput_trial_probes_where_the_engine_says_it_changes_regime():
    """Issue 47: what the config asks for (its capture sizes), replaced kind by kind by what the engine's
    log says it runs with, and the KV cache's room in requests of the plan's length (characters / 4 of
    the mean prompt, and its output)."""
    from orchestrator.backends.command import CommandBackend
    from orchestrator.node.trial import regime_marks

    backend = CommandBackend({"argv": ["srv", "--port", "{port}", "--sizes", "{capture_sizes}"]})
    plan = BenchPlan(prompts=("x" * 400,), output_tokens=100, goodput=128)
    log = ("(EngineCore_DP0 pid=1) INFO [core.py:1] compilation_config={'max_cudagraph_capture_size': 32}\n"
           "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1] GPU KV cache size: 20,000 tokens\n")
    marks = regime_marks(backend, {"capture_sizes": "1,2,64"}, log, plan)
    assert [(m.streams, m.kind) for m in marks] == [(32, "graphs"), (100, "kv_cache")]  # 20000 / (100 + 100)
    assert [(m.streams, m.kind) for m in regime_marks(backend, {"capture_sizes": "1,2,64"}, "", plan)] == [
        (64, "graphs")]
