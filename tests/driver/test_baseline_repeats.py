"""The baseline repeated on the other nodes: none with one slot or one node; with two nodes, the
node the baseline did not run on repeats it once, pinned there, and the repeat comes back as an
uncounted trial of the baseline's config with its line (real reference servers, a real journal)."""

from __future__ import annotations

import io

import pytest
from loop_parts import loop_state, wait_for

from orchestrator.core.records import COMPLETE, TrialResult
from orchestrator.driver.baseline_repeats import BaselineRepeats
from orchestrator.driver.breaker import Breaker
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import REPEAT_NUMBERS
from orchestrator.driver.progress import Progress
from orchestrator.driver.recorder import Recorder
from orchestrator.study.evidence.history import trial_rows

pytestmark = pytest.mark.slow


class TwoNodes(InProcessExecutor):
    """Trials in this process, on a cluster of two nodes as Ray would name them."""

    def nodes(self):
        return {"node-aaaaaaaa": {}, "node-bbbbbbbb": {}}


def repeats(job, out: io.StringIO) -> BaselineRepeats:
    launcher = Launcher(job)
    recorder = Recorder(job, Progress(job, trials=3, timeout_s=None, out=out), Breaker(0, job.dir.logs, job.path),
                        launcher)
    return BaselineRepeats(launcher, recorder, lambda line: out.write(line + "\n"))


def measured_on(node: str, config: dict) -> TrialResult:
    return TrialResult(outcome=COMPLETE, config=config, value=10.0, node={"node_id": node})


def test_one_slot_or_one_node_repeats_nothing(tmp_path):
    with loop_state(tmp_path, executor_class=TwoNodes) as (job, run):
        again = repeats(job, io.StringIO())
        again.baseline_measured(run, measured_on("node-aaaaaaaa", job.baseline_config()))
        assert again.pending == []  # one slot: the search needs it
    one_host = tmp_path / "one"
    one_host.mkdir()
    with loop_state(one_host, parallel=2) as (job, run):
        again = repeats(job, io.StringIO())
        again.baseline_measured(run, measured_on("this-host", job.baseline_config()))
        again.start(run)
        assert again.pending == [] and run.in_flight == {}


def test_the_other_node_repeats_the_baseline_once_stored_uncounted(tmp_path, no_leftover_servers):
    out = io.StringIO()
    with loop_state(tmp_path, parallel=2, executor_class=TwoNodes) as (job, run):
        again = repeats(job, out)
        again.baseline_measured(run, measured_on("node-aaaaaaaa", job.baseline_config()))
        assert again.pending == ["node-bbbbbbbb"]
        again.start(run)
        [launch] = run.in_flight.values()
        assert (launch.kind, launch.node, launch.number) == ("repeat", "node-bbbbbbbb", REPEAT_NUMBERS + 1)
        assert again.pending == [] and "repeating the baseline on node node-bbb" in out.getvalue()
        again.start(run)
        assert len(run.in_flight) == 1  # once per node
        [(_, result)] = wait_for(run.executor)
        again.back(run, result)
        [row] = trial_rows(run.study)
        assert row.state == COMPLETE and not row.counted and row.config_key == run.policy.baseline_key
        assert row.launch_role == "repeat"  # the baseline on another node, as the report compares nodes
        assert "  baseline repeat on node " in out.getvalue()
