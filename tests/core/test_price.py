"""What serving costs at a throughput (core/price.py): $ per million output tokens and tok/s per GPU,
a GPU's hour or a node's shared by its GPUs, so two TP=4 replicas and one TP=8 server compare on one box."""

from __future__ import annotations

import pytest

from orchestrator.core.price import Cost, Priced, Pricing, money, per_million


def test_dollars_per_million_output_tokens():
    assert per_million(2.5, 19037.0) == pytest.approx(2.5 / (19037 * 3600) * 1e6)  # $0.0365
    assert per_million(2.5, 0.0) is None and per_million(2.5, None) is None  # nothing served: no price
    assert money(0.036478) == "$0.0365" and money(1.25) == "$1.25" and money(1234.5) == "$1234"


def test_a_config_pays_for_the_gpus_it_occupies_and_a_nodes_hour_is_shared_by_its_gpus():
    assert Cost(gpu_hour=2.5).hourly(4, 8) == 10.0 and Cost(gpu_hour=2.5).hourly(8, 8) == 20.0
    assert Cost(node_hour=20.0).hourly(4, 8) == 10.0 and Cost(node_hour=20.0).hourly(8, 8) == 20.0
    assert Cost(node_hour=3.0).hourly(1, 0) == 3.0  # a CPU job: the config pays the node
    tp4, tp8 = Priced(Cost(gpu_hour=2.5), 4, 10000.0), Priced(Cost(gpu_hour=2.5), 8, 16000.0)
    assert tp4.per_gpu == 2500.0 and tp8.per_gpu == 2000.0  # one TP=4 replica serves more per GPU
    assert tp4.dollars(8) < tp8.dollars(8)  # and so costs less per token, though TP=8 serves more
    assert tp4.describe(8) == "$0.278 per million output tokens at $2.5 a GPU-hour, 2500 tok/s per GPU (4 GPUs)"
    assert tp4.to_record(8)["dollars_per_million_tokens"] == pytest.approx(10 / (10000 * 3600) * 1e6)
    assert Priced(Cost(node_hour=3.0), 0, 100.0).describe(0) == \
        "$8.33 per million output tokens at $3 a node-hour"  # no GPU: no tok/s per GPU
    priced = Pricing(Cost(gpu_hour=1.0), 8, lambda config: int(config["tp_size"])).price({"tp_size": 2}, 50.0)
    assert priced.gpus == 2 and priced.per_gpu == 25.0
