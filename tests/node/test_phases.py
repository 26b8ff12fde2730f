"""What a trial reports while it runs (node/phases.py): the start-up phases its server's own
log names, as it writes them (the same words ``node.startup`` gives a finished log), then
warming up, every level with its requests done of the total, the correctness check and the
teardown; a sink that fails loses the report, never the trial."""

from __future__ import annotations

import sys

import pytest

from conftest import FAKE_OPENAI
from orchestrator.core.records import COMPLETE
from orchestrator.node import phases, startup
from orchestrator.node.spec import BenchPlan, CheckPlan, ServerPlan, TrialSpec
from orchestrator.node.trial import run_trial

VLLM_START = [
    "(APIServer pid=1) INFO 12-01 20:57:53 [api_utils.py:345] vLLM API server version 0.26.0",
    "(EngineCore pid=2) INFO 12-01 20:58:24 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config",
    "(EngineCore pid=2) INFO 12-01 20:58:26 [gpu_model_runner.py:1] Starting to load model /m",
    "(EngineCore pid=2) INFO 12-01 20:58:40 [backends.py:1] Compiling a graph for dynamic shape takes 9 s",
    "(EngineCore pid=2) INFO 12-01 20:59:01 [gpu_model_runner.py:2] Capturing CUDA graphs (decode, FULL)",
]


def test_the_log_fed_line_by_line_names_the_phases_the_whole_log_does():
    tracker = startup.PhaseTracker()
    seen = [tracker.phase]
    for i, line in enumerate(VLLM_START):
        tracker.feed([line])
        seen.append(tracker.phase)
        assert tracker.phase == startup.last_phase("\n".join(VLLM_START[:i + 1]))
    assert seen == ["process start", "start-up", "engine init", "weights", "torch.compile", "graph capture"]


def test_the_reporter_says_each_phase_and_survives_its_sink():
    said: list[phases.TrialPhase] = []
    reporter = phases.PhaseReporter(7, said.append)
    reporter.phase(phases.LAUNCHING)
    reporter.server_output(VLLM_START[:3])  # one batch (a reader that came late): each phase in it is said
    reporter.phase(phases.WARMING_UP)
    reporter.server_output(VLLM_START[3:])  # the server's lines after it is ready are no phase
    reporter.measuring(1, 0, 16)
    reporter.measuring(1, 5, 16)
    started = ["starting", "starting: engine init", "starting: weights"]
    assert [p.text() for p in said] == ["launching", *started, "warming up",
                                        "measuring level 1: 0/16 requests", "measuring level 1: 5/16 requests"]
    over: list[phases.TrialPhase] = []
    rounds = phases.PhaseReporter(7, over.append, rounds=3)
    for done in (0, 8, 0, 3):  # two rounds of 8 begun at level 1: 8 + 3 of the 3 x 8 planned
        rounds.measuring(1, done, 8)
    assert over[-1].text() == "measuring level 1: 11/24 requests"
    assert said[-1].key == said[-2].key and said[-1].since == said[-2].since  # a request done is no new phase
    assert all(p.number == 7 and p.trial_started == said[0].trial_started for p in said)
    # each report carries every phase entered so far (a poll that comes late still says them all)
    entered = ["launching", *started, "warming up", "measuring level 1: 0/16 requests"]
    assert [text for text, _ in said[-1].trail] == entered
    assert [text for text, _ in reporter.trail()] == entered
    assert [at for _, at in reporter.trail()] == sorted(at for _, at in reporter.trail())

    ready: list[phases.TrialPhase] = []
    refserver = phases.PhaseReporter(9, ready.append)
    refserver.phase(phases.LAUNCHING)
    refserver.server_output(["[refserver rank0] starting tiny"])
    refserver.server_output(["[refserver rank0] weights built in 1.0s"])
    refserver.server_output(["[refserver rank0] ready on http://127.0.0.1:1"])  # no phase of its own
    assert [p.text() for p in ready] == ["launching", "starting: NCCL init and weights",
                                         "starting: graph capture and warm-up"]
    late: list[phases.TrialPhase] = []  # the same lines read in one batch by a watcher a busy box delayed
    batched = phases.PhaseReporter(9, late.append)
    batched.phase(phases.LAUNCHING)
    batched.server_output(["[refserver rank0] starting tiny", "[refserver rank0] weights built in 1.0s",
                           "[refserver rank0] ready on http://127.0.0.1:1"])
    assert [p.text() for p in late] == [p.text() for p in ready]
    assert [text for text, _ in batched.trail()] == [p.text() for p in ready]

    def broken(_phase):
        raise ConnectionError("the relay is gone")

    lost = phases.PhaseReporter(8, broken)
    lost.phase(phases.LAUNCHING)  # no exception: a lost update never fails a trial
    lost.server_output(VLLM_START)
    assert lost.current is not None and lost.current.text() == "starting: graph capture"


@pytest.mark.timeout(120)
def test_a_trial_reports_every_step_in_order(tmp_path, no_leftover_servers):
    argv = [sys.executable, str(FAKE_OPENAI), "--host", "{host}", "--port", "{port}", "--model", "fake",
            "--token-delay", "0.005", "--ready-after", "1.5", "--say-after", "0.3:[refserver rank0] starting fake",
            "--say-after", "0.8:[refserver rank0] weights built in 0.4s"]
    spec = TrialSpec(number=3, config={"env.KNOB": "a"},
                     server=ServerPlan("command", {"argv": argv, "model_name": "fake", "health_path": "/health"},
                                       None, {}, startup_timeout_s=60, teardown_grace_s=5),
                     bench=BenchPlan(prompts=("one", "two", "three"), output_tokens=8, warmup=1, repeats=2,
                                     timeout_s=30, levels=(1, 2)),
                     check=CheckPlan(prompts=("The quick brown fox",), tokens=4, logprobs=False),
                     log_dir=str(tmp_path / "logs"), registry_dir=str(tmp_path / "servers"), measure_bandwidth=False)
    said: list[phases.TrialPhase] = []
    result = run_trial(spec, on_phase=said.append)
    assert result.outcome == COMPLETE, result.failure_reason
    names = []
    for p in said:
        if not names or names[-1] != p.name:
            names.append(p.name)
    # ("starting" where the watch read the server's first line, which names no phase, alone)
    assert [n for n in names if n != "starting"] == [
        "launching", "starting: NCCL init and weights", "starting: graph capture and warm-up", "warming up",
        "measuring", "correctness check", "stopping"], names
    one = [(p.done, p.total) for p in said if p.level == 1]
    assert one == [(0, 6), (1, 6), (2, 6), (3, 6), (3, 6), (4, 6), (5, 6), (6, 6)], one  # over both rounds
    two = [(p.done, p.total) for p in said if p.level == 2]
    assert two[0] == (0, two[0][1]) and two[-1][0] == two[-1][1] > 0, two  # 2 streams' requests, over both rounds
    second = next(p for p in said if p.level == 1 and p.done == 3 and said.index(p) > said.index(
        next(q for q in said if q.level == 2)))  # level 1's second round, after level 2's first
    assert second.level_s > 0  # the time of its first round is kept: the pace is the level's own
    assert all(p.number == 3 for p in said)
    # the result keeps the trail: each phase entered once, in order, with its time into the trial
    assert [text.split(":")[0] for text, _ in result.phases] == [text.split(":")[0] for text, _ in said[-1].trail]
    assert result.phases[-1][0] == "stopping" and result.phases[0][0] == "launching"
    assert [at for _, at in result.phases] == sorted(at for _, at in result.phases)


def test_a_rate_probe_says_its_rate_and_its_requests_done():
    """By request rate the status line says the rate probed, not a level ("warming up" no longer
    stands for the whole search); each rate is a new phase, a request done is not."""
    said: list[phases.TrialPhase] = []
    reporter = phases.PhaseReporter(3, said.append)
    reporter.phase(phases.WARMING_UP)
    for rate, done in ((15.0, 0), (15.0, 37), (30.0, 0), (22.5, 100)):
        reporter.measuring_rate(rate, done, 100)
    assert [p.text() for p in said] == ["warming up", "measuring 15 req/s: 0/100 requests",
                                        "measuring 15 req/s: 37/100 requests", "measuring 30 req/s: 0/100 requests",
                                        "measuring 22.5 req/s: 100/100 requests"]
    assert said[2].key == said[1].key and said[2].since == said[1].since
    assert len({p.key for p in said[1:]}) == 3
