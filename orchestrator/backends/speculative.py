"""Speculative decoding as neutral parameters: what each one means, the rules every backend
shares, and what cannot matter. How a server spells them is the backend's (vLLM: one
``--speculative-config`` JSON; SGLang: ``--speculative-algorithm`` and its count flags).

=================================  ==========================================================
``speculative.method``             ``none`` (no speculative flag at all: the baseline's), or a
                                   method as the release names it: ``ngram``, ``mtp``,
                                   ``eagle``, ``eagle3``, ``draft_model`` and the release's
                                   others (``Methods``, per release)
``speculative.num_tokens``         tokens drafted per step, >= 1; required with a method
``speculative.model``              the draft: a checkpoint directory or Hub id; required by the
                                   methods that need one (``draft_model``, ``eagle``, ...),
                                   optional for ``mtp`` (the target's own MTP layers), dropped
                                   where it cannot matter (``ngram``)
``speculative.prompt_lookup_max``  the n-gram window (``ngram``-like methods only), >= 1
``speculative.prompt_lookup_min``  its lower end, <= ``prompt_lookup_max``
=================================  ==========================================================

Greedy speculative decoding is lossless by design: the target model verifies every drafted
token, so the correctness gate applies unchanged (near-ties allowed) and a speculative config
whose text differs beyond them is ``wrong-output`` like any other. What speculation is worth
depends on the text (an n-gram drafter copies from the context): decode is measured over the
prompt set, and the trial records the server's own acceptance counters.

Every refusal is one ``ConfigRejected`` keyed by the parameter, at validate time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.flags import did_you_mean
from orchestrator.core.errors import ConfigRejected, brief

METHOD = "speculative.method"
NUM_TOKENS = "speculative.num_tokens"
MODEL = "speculative.model"
LOOKUP_MAX = "speculative.prompt_lookup_max"
LOOKUP_MIN = "speculative.prompt_lookup_min"
PARAMS = (METHOD, NUM_TOKENS, MODEL, LOOKUP_MAX, LOOKUP_MIN)
NONE = "none"
# the methods every serving backend understands by these names (vLLM's own; SGLang maps them)
NEUTRAL_METHODS = ("ngram", "mtp", "eagle", "eagle3", "draft_model")


@dataclass(frozen=True)
class Methods:
    """What one release can do with speculation.

    ``names``: its methods as it names them (``none`` aside); ``model_free``: those that need
    no draft model (they may still take one, as ``mtp`` does); ``ignore_model``: those for
    which a draft model cannot matter; ``lookup``: those that take the n-gram window;
    ``release``: the release in messages ("vLLM 0.26.0"); ``source``: where ``names`` was
    read (``doctor`` prints it); ``assumed``: True when the release's own list is unknown and
    the neutral set is assumed.
    """

    names: tuple[str, ...]
    model_free: frozenset[str]
    ignore_model: frozenset[str]
    lookup: frozenset[str]
    release: str
    source: str
    assumed: bool = False

    def needs_model(self, method: str) -> bool:
        return method not in self.model_free


@dataclass(frozen=True)
class Speculation:
    """A config's speculative decoding, only what can matter (``of``)."""

    method: str
    num_tokens: int
    model: str | None = None
    lookup_max: int | None = None
    lookup_min: int | None = None


MODEL_SPECIFIC = "_mtp"  # a release's MTP heads for one model family each (deepseek_mtp, qwen3_next_mtp, ...)


def allowed_text(names: tuple[str, ...] | list[str]) -> str:
    """The methods a release accepts, in one short line: the general ones by name, the
    model-specific MTP heads (dozens in recent vLLM releases) counted, with two examples."""
    general = [n for n in names if not n.endswith(MODEL_SPECIFIC)]
    specific = [n for n in names if n.endswith(MODEL_SPECIFIC)]
    text = ", ".join([NONE, *general])
    if len(specific) > 2:
        return (f"{text}, and {len(specific)} model-specific MTP heads named <model>{MODEL_SPECIFIC} (e.g. "
                f"{specific[0]}, {specific[-1]})")
    return ", ".join([text, *specific])


def method_of(config: Mapping[str, Any]) -> str:
    """The config's method; ``none`` when it sets none (absent or null)."""
    value = config.get(METHOD)
    return NONE if value is None else str(value)


def uses(config: Mapping[str, Any]) -> bool:
    """Whether the config speculates."""
    return method_of(config) != NONE


def given(config: Mapping[str, Any]) -> list[str]:
    """The speculative params a config sets (method ``none`` aside)."""
    return [name for name in PARAMS if name in config and not (name == METHOD and not uses(config))]


def refuse(config: Mapping[str, Any], server: str, job_file: str | None, instead: str = "") -> None:
    """ConfigRejected for a backend without speculative decoding, when the config asks for it."""
    names = given(config)
    if names:
        raise ConfigRejected(f"{server} has no speculative decoding the tuner can set; drop {', '.join(names)}"
                             + (f" ({instead})" if instead else ""), file=job_file, key=names[0])


def check(config: Mapping[str, Any], methods: Methods, job_file: str | None) -> None:
    """Every shared rule (see the module docstring) against ``methods``, the release's."""
    for name in (NUM_TOKENS, LOOKUP_MAX, LOOKUP_MIN):
        if name in config:
            _positive(config, name, job_file)
    if MODEL in config and (not isinstance(config[MODEL], str) or not config[MODEL].strip()):
        raise ConfigRejected(f"{MODEL} must be the draft's checkpoint directory or Hub id, not {brief(config[MODEL])}",
                             file=job_file, key=MODEL)
    raw = config.get(METHOD)
    if raw is not None and (not isinstance(raw, str) or not raw.strip()):
        raise ConfigRejected(f"{METHOD} must be a method name like ngram (or none), not {brief(raw)}",
                             file=job_file, key=METHOD)
    method = method_of(config)
    if method == NONE:
        return
    if method not in methods.names:
        hint = did_you_mean(method, methods.names) or did_you_mean(method.lower(), methods.names)
        raise ConfigRejected(f"{brief(method)} is not a speculative method of {methods.release}{hint}; allowed: "
                             f"{allowed_text(methods.names)}"
                             + (" (assumed: the release's own list is unknown)" if methods.assumed else ""),
                             file=job_file, key=METHOD)
    if NUM_TOKENS not in config:
        raise ConfigRejected(f"{method} needs {NUM_TOKENS} (tokens drafted per step, >= 1)",
                             file=job_file, key=METHOD)
    if methods.needs_model(method) and MODEL not in config:
        raise ConfigRejected(f"{method} needs {MODEL} (the draft: a checkpoint directory or Hub id)",
                             file=job_file, key=METHOD)
    low, high = config.get(LOOKUP_MIN), config.get(LOOKUP_MAX)
    if method in methods.lookup and low is not None and high is not None and low > high:
        raise ConfigRejected(f"{LOOKUP_MIN}={low} is above {LOOKUP_MAX}={high}; the n-gram window needs min <= max",
                             file=job_file, key=LOOKUP_MIN)


def normalize(out: dict[str, Any], methods: Methods) -> None:
    """Drop, in place, what cannot matter: every speculative param without a method (method
    ``none`` is the baseline's server), the draft model of a method that ignores it, the n-gram
    window of a method without one."""
    if not uses(out):
        for name in PARAMS:
            out.pop(name, None)
        return
    method = method_of(out)
    if method in methods.ignore_model:
        out.pop(MODEL, None)
    if method not in methods.lookup:
        out.pop(LOOKUP_MAX, None)
        out.pop(LOOKUP_MIN, None)


def of(config: Mapping[str, Any]) -> Speculation | None:
    """The speculation of a normalized, checked config; None without a method."""
    if not uses(config):
        return None
    return Speculation(method=method_of(config), num_tokens=int(config[NUM_TOKENS]), model=config.get(MODEL),
                       lookup_max=config.get(LOOKUP_MAX), lookup_min=config.get(LOOKUP_MIN))


def _positive(config: Mapping[str, Any], name: str, job_file: str | None) -> None:
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigRejected(f"{name} must be an integer >= 1, not {brief(value)}", file=job_file, key=name)
