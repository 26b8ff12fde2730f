"""The embedded reference server as ncclsweep reads it: the start-up phases and durations its
ranks log (``[refserver rankN] ...``, orchestrator/refserver/cli.py) (``core.engines``)."""

from __future__ import annotations

import re

from orchestrator.core.engines import Engine, Reported, pattern

ENGINE = Engine(
    name="refserver",
    detect=pattern(r"^\[refserver rank\d+\]"),
    markers=(
        ("NCCL init and weights", pattern(r"\] starting ")),
        ("graph capture and warm-up", pattern(r"\] weights built in ")),
        ("ready", pattern(r"\] ready on ")),
    ),
    reported=(
        Reported("weights_s", pattern(r"weights built in ([\d.]+)s")),
        Reported("graph_capture_s", pattern(r"captured \d+ CUDA graphs .* in ([\d.]+)s")),
    ),
    segments=(("weights", ("weights_s",), ()), ("graph capture", ("graph_capture_s",), ())),
    process=re.compile(r"^\[refserver (rank\d+)\]"),
)
