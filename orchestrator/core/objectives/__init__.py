"""The objective as a type: what a study tunes for, asked instead of branched on.

``protocol``: ``Objective`` (the protocol every reader calls: values told and their directions, a
launch's worth at a level, units, words, description, identity) and ``Measure`` (what one level of
one launch is worth: throughput by default); ``kinds``: one class per kind (one level, a plan, a
weighted mix, goodput over concurrency or by request rate); ``minimize``: the lowest latency
percentile at a level (minimize); ``per_gpu``: throughput per GPU the config occupies; ``build``: the
job's fields (``Draft``) checked by the kind they make and built. ``config.job`` builds the object
from the job through it.
"""

from orchestrator.core.objectives.build import Draft, shares
from orchestrator.core.objectives.kinds import Goodput, Mix, Plan, RateGoodput, Single
from orchestrator.core.objectives.minimize import Latency
from orchestrator.core.objectives.per_gpu import PerGpu
from orchestrator.core.objectives.protocol import HEADLINE, MAXIMIZE, MINIMIZE, Measure, Objective, Refused, measure_of

DEFAULT = Objective()

__all__ = ["DEFAULT", "HEADLINE", "MAXIMIZE", "MINIMIZE", "Draft", "Goodput", "Latency", "Measure", "Mix",
           "Objective", "PerGpu", "Plan", "RateGoodput", "Refused", "Single", "measure_of", "shares"]
