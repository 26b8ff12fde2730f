"""How a job's objective becomes its kind: the fields as the job gave them (``Draft``), checked by
the kind they make (``Objective.refuse``, ``refuse_slo``, ``refuse_measure``) and built, so the
loader (``config.job``) and the replay harness parse keys and choose no kind themselves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.core.level import make as make_level
from orchestrator.core.objectives import kinds  # noqa: F401 - registers the kinds Draft.kind chooses among
from orchestrator.core.objectives.protocol import Kind, Measure, Objective, Refused, kind_of
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.slo import Targets


def shares(levels: tuple[int, ...], weights: Mapping[int, float] | None) -> dict[int, float] | None:
    """A traffic mix's weights (level -> share, each > 0) normalized to sum 1; None where none were given
    (a plan, or one level). ``Refused`` where a level has none: a mix weighs every level."""
    if weights is None:
        return None
    missing = [lv for lv in levels if lv not in weights]
    if missing:
        raise Refused("weights", f"gives no weight to level(s) {', '.join(map(str, missing))}; weigh every level "
                                 "of the objective, or drop weights for a plan per level")
    total = sum(weights[lv] for lv in levels)
    return {lv: weights[lv] / total for lv in levels}


@dataclass(frozen=True)
class Draft:
    """The job's objective as given, before its kind is settled: the concurrencies, the context axis,
    a traffic mix's weights (level -> share; None: none given), goodput's search (``goodput``: the
    most streams; ``rate``: by request rate), the keys the job named (``given``) and its preset word."""

    concurrency: tuple[int, ...] = (1,)
    context: tuple[int, ...] = ()
    weights: Mapping[int, float] | None = None
    goodput: int | None = None
    rate: RateAxis | None = None
    given: frozenset[str] = field(default_factory=frozenset)
    preset: str | None = None

    @property
    def levels(self) -> tuple[int, ...]:
        """The levels the fields name (``Objective.levels``)."""
        if not self.context:
            return self.concurrency
        return tuple(make_level(c, ctx) for ctx in self.context for c in self.concurrency)

    @property
    def kind(self) -> Kind:
        """The kind the fields make, once it has refused what it does not answer (``Refused``)."""
        chosen = kind_of(self)
        chosen.refuse(self)
        return chosen

    def build(self, slo: Targets | None = None, measure: Measure | None = None) -> Objective:
        """The objective of these fields, the job's ``slo`` and ``measure``; ``Refused`` where its kind
        needs targets the job lacks, or does not answer in ``measure``."""
        chosen, measure = self.kind, measure or Measure()
        chosen.refuse_slo(slo)
        chosen.refuse_measure(measure)
        return Objective(concurrency=self.concurrency, weights=shares(self.levels, self.weights),
                         context=self.context, goodput=self.goodput, slo=slo, preset=self.preset, measure=measure,
                         rate=self.rate)
