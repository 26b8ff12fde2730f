"""How a job's objective becomes its kind (issue 46): the fields as given choose the kind, which
refuses what it does not answer, names the levels its targets may name and builds the objective."""

from __future__ import annotations

import pytest

from orchestrator.core.objectives import (
    Draft,
    Goodput,
    Latency,
    Mix,
    PerGpu,
    Plan,
    RateGoodput,
    Refused,
    Single,
    shares,
)
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.slo import Slo, Targets

TPOT = Targets(every=(Slo.named("tpot_p99", 0.05),))


def test_the_fields_choose_the_kind_and_a_mix_is_normalized():
    assert isinstance(Draft().build(), Single)
    assert isinstance(Draft(concurrency=(1, 64)).build(), Plan)
    mix = Draft(concurrency=(1, 64), weights={1: 3.0, 64: 1.0}).build()
    assert isinstance(mix, Mix) and mix.weights == {1: 0.75, 64: 0.25}
    assert isinstance(Draft(goodput=64).build(TPOT), Goodput)
    assert isinstance(Draft(rate=RateAxis(40)).build(TPOT), RateGoodput)
    assert Draft(concurrency=(1, 64), context=(0, 8192)).levels == Draft(concurrency=(1, 64), context=(0, 8192)).build(
        ).levels
    assert shares((1, 64), None) is None
    with pytest.raises(Refused, match=r"gives no weight to level\(s\) 64") as got:
        Draft(concurrency=(1, 64), weights={1: 1.0}).build()
    assert got.value.key == "weights"


def test_goodput_refuses_levels_context_a_measure_and_no_targets_in_its_own_words():
    with pytest.raises(Refused, match=r"finds its own concurrency \(up to max_concurrency\)") as got:
        Draft(goodput=64, given=frozenset({"goodput", "concurrency"})).build(TPOT)
    assert got.value.key == "goodput"
    with pytest.raises(Refused, match=r"finds its own request rate \(up to max_rate\)"):
        Draft(rate=RateAxis(40), given=frozenset({"goodput", "weights"})).build(TPOT)
    with pytest.raises(Refused, match="searches the request rate at one prompt length") as got:
        Draft(rate=RateAxis(40), context=(8192,)).build(TPOT)
    assert got.value.key == "context"
    with pytest.raises(Refused, match=r"needs the latency targets that bound it: .* \(any of ttft_p50, ") as got:
        Draft(goodput=64).build()
    assert "per request" not in got.value.why
    with pytest.raises(Refused, match="or per request ttft, tpot, e2e with attainment"):
        Draft(rate=RateAxis(40)).build()
    with pytest.raises(Refused, match="give per_gpu with concurrency, not with goodput") as got:
        Draft(goodput=64).build(TPOT, PerGpu())
    assert got.value.key == "per_gpu"
    with pytest.raises(Refused, match="give goodput or minimize, not both") as got:
        Draft(rate=RateAxis(40)).build(TPOT, Latency("tpot_p99"))
    assert got.value.key == "minimize"
    # the levels' kinds answer in any measure
    assert Draft(concurrency=(1, 64)).build(TPOT, Latency("tpot_p99")).minimize == "tpot_p99"


def test_the_kind_names_the_levels_its_targets_may_name():
    draft = Draft(concurrency=(1, 64))
    assert draft.kind.slo_levels(draft, (2, 8)) == (1, 64, 2, 8)  # the objective's and bench's
    assert Goodput.slo_levels(Draft(goodput=32), (2,)) == (32,)  # every load it tries is judged alike
    assert RateGoodput.slo_levels(Draft(rate=RateAxis(40)), (2,)) == ()  # its probes are rates
    assert RateGoodput.per_request_slo and not Goodput.per_request_slo and not Plan.per_request_slo
