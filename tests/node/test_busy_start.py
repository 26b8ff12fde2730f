"""A start that runs out of time while other work takes the host's CPUs (issue 38): the trial
samples the host while its server starts, so the timeout says how busy the host was and is not
held against the config (re-queued, never banned), however many times it happened. Real
processes: a server that never turns ready, and spinners in their own sessions (other work,
not the server's tree) on every CPU."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from conftest import FAKE_OPENAI
from orchestrator.core import outcome
from orchestrator.core.records import FAIL
from orchestrator.node.spec import BenchPlan, ServerPlan, TrialSpec
from orchestrator.node.trial import run_trial

pytestmark = pytest.mark.slow

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
