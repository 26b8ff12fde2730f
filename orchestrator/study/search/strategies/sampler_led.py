"""The search an Optuna sampler leads (TPE, GP, random, grid, brute force, NSGA-II): the sampler
proposes, and the policy picks where a sampler's own rule is weak.

- start-up: while a model-based sampler would still be drawing its random start-up trials
  (``startup``: the count it was built with, ``samplers.startup_trials``), the policy picks them,
  each the config most different from everything measured (``startup_order="diverse"``,
  ``picks.most_diverse``), so every parameter is seen at several levels early. Random draws over
  the raw parameter product over-sample configs that normalize onto few rows (every value of a
  parameter that does not matter there, e.g. NCCL_* at TP=1) and can repeat a level while another
  is never tried; on small tables that made TPE lose to plain random search. With "diverse" (and
  start-up sized to the space) the default beat or tied random search on every replay table
  (docs/benchmarks.md, "Search efficiency"). ``"sampler"``: the sampler's own draws;
- a plan (one objective per level) after the start-up: every other launch is the unmeasured
  config nearest to one level's best so far, the levels in turn (``plan_step="levels"``); the
  sampler proposes the others. Each level's best is a local search of its own: one parameter
  changed from the best at that level is where the next best there usually is; Optuna's
  multi-objective TPE alone spreads its draws over the whole front (docs/benchmarks.md,
  "Plans"). ``"sampler"``: the sampler proposes every launch;
- the fill, when the sampler re-proposes a measured config (or one that cannot run): an
  unmeasured config closest (fewest differing parameters) to the best so far (``fill="neighbor"``,
  from the best of every level for a plan), or uniform among the unmeasured ones
  (``"random"``: with the random sampler, plain random search without replacement). "neighbor"
  needed fewer launches on the replay tables (docs/benchmarks.md, "Search efficiency");
- launch cost in these picks only, never in a sampler's proposal: among candidates a rule ranks
  equal, those the pre-screen's prior puts last are left out while others remain, and with
  ``cost_aware`` (the default) the one with the most expected decode per expected second of
  launch is taken (``picks.most_worth_launching``): on the motivating table with GLM-5-like
  start-up costs it reached within 2% of the best in fewer hours and launches than ties broken
  at random (docs/benchmarks.md, "Hours to the best"); ``cost_aware=False``: ties by the RNG.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.study.search.strategies import picks
from orchestrator.study.search.strategies.base import Pick, View
from orchestrator.study.storage import objective as objectives

FILLS = ("random", "neighbor")
DEFAULT_FILL = "neighbor"
STARTUP_ORDERS = ("diverse", "sampler")
DEFAULT_STARTUP_ORDER = "diverse"
PLAN_STEPS = ("levels", "sampler")
DEFAULT_PLAN_STEP = "levels"
DEFAULT_COST_AWARE = True


@dataclass(frozen=True)
class SamplerLed:
    """The sampler proposes; the policy picks the start-up, a plan's level steps and the fill
    (module docstring). ValueError for an option outside its allowed values."""

    name: str = "tpe"
    startup: int = 0
    startup_order: str = DEFAULT_STARTUP_ORDER
    fill: str = DEFAULT_FILL
    plan_step: str = DEFAULT_PLAN_STEP
    cost_aware: bool = DEFAULT_COST_AWARE

    def __post_init__(self) -> None:
        for option, value, allowed in (("fill", self.fill, FILLS), ("plan_step", self.plan_step, PLAN_STEPS),
                                       ("startup_order", self.startup_order, STARTUP_ORDERS)):
            if value not in allowed:
                raise ValueError(f"{option} must be one of {', '.join(allowed)}, not {value!r}")
        if self.startup < 0:
            raise ValueError(f"startup must be >= 0, not {self.startup}")

    def pick(self, view: View) -> Pick | None:
        if self.startup_order == "diverse" and view.launched < self.startup:
            return Pick(picks.most_diverse(view, view.not_late(view.remaining), cost_aware=self.cost_aware), "startup")
        if view.objective.value_per_level and self.plan_step == "levels":
            return self._level_step(view)
        return None

    def _level_step(self, view: View) -> Pick | None:
        """A plan's even steps after the start-up: the config nearest to one level's best so far."""
        step = view.launched - max(self.startup, 1)
        if step < 0 or step % 2:
            return None
        levels = objectives.levels(view.objective)
        best = picks.best_of_level(view, levels[(step // 2) % len(levels)])
        if best is None:
            return None
        return Pick(picks.nearest(view, view.not_late(view.remaining), [best], cost_aware=self.cost_aware), "fill")

    def instead(self, view: View) -> str:
        if self.fill == "neighbor":
            return picks.nearest(view, view.not_late(view.remaining), picks.bests(view), cost_aware=self.cost_aware)
        return view.rng.choice(view.remaining)
