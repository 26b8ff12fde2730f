"""The all-reduce probe: one setting timed in fresh gloo processes on CPU, its sweep in size order
with each median's interval; a probe that cannot run is a failed row (kind and reason), not an
exception."""

from __future__ import annotations

import pytest

from orchestrator.driver.allreduce_probe import measure_setting, median_interval


def test_the_medians_interval_from_order_statistics():
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # fewer than 6: the whole range
    lo, hi = median_interval([float(x) for x in range(100)])
    assert lo < 49.5 < hi and (lo, hi) == (40.0, 60.0)


@pytest.mark.slow
def test_a_setting_is_probed_over_its_sizes_and_a_probe_that_cannot_run_is_a_row():
    setting = {"tp_size": 2, "env.NCCL_PROTO": "LL"}
    row = measure_setting(setting, device="cpu", message_bytes=[4096, 1024], env={}, iters=12, full=1)
    assert row.ok and row.setting == setting and row.nbytes == 4096 and len(row.samples_us) == 12
    assert [p.nbytes for p in row.sweep] == [1024, 4096] and not row.graph  # eager on CPU
    assert all(p.interval[1] <= p.latency_us <= p.interval[2] for p in row.sweep)
    failed = measure_setting(setting, device="cuda", message_bytes=4096, env={}, iters=12)  # no CUDA here
    assert not failed.ok and failed.kind and failed.reason and failed.setting == setting
