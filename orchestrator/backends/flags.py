"""``backend.<flag>`` params and pass-through arguments checked against one server
release's flags, and spelled for that release.

A ``backend.<flag>`` param becomes ``--flag-with-dashes``: ``True`` is the bare flag,
``False`` is the flag's negative spelling where the release has one (``--no-x``,
vLLM's ``--enable-x``/``--disable-x`` pairs) and is omitted otherwise, ``None`` is
omitted, a list-valued flag takes ``"1,2,4"`` or ``"1 2 4"`` as separate words, anything
else is ``--flag value``.

With a flag table (``known_flags``: the installed release's own parser, else the
bundled table of the release) a flag the release lacks, a deprecated spelling, a value
for a switch, a boolean for a valued flag, or a value outside the flag's choices (where
the table records them: ``--load-format gguf`` for a vLLM without GGUF) is refused, in a
``backend.<flag>`` param and in pass-through arguments alike. Without one (a release with no
table and none installed) only the backend's ``Spelling`` rules (spellings verified per
release) are enforced and other flags pass unchecked.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.known_flags import FlagTable
from orchestrator.core.errors import ConfigRejected, brief

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Spelling:
    """How releases ``since`` (inclusive) to ``until`` (exclusive) spell one setting:
    ``words`` (flags, each a switch or followed by the value), or None when those releases
    cannot express it, with ``why``."""

    since: Version | None
    until: Version | None
    words: tuple[str, ...] | None
    why: str = ""

    def covers(self, version: Version) -> bool:
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)


def spelling_for(rules: list[Spelling], version: Version) -> Spelling:
    for rule in rules:
        if rule.covers(version):
            return rule
    return rules[-1]


def vstr(version: Version | None) -> str:
    return ".".join(map(str, version)) if version else "?"


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def did_you_mean(word: str, options) -> str:
    near = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {brief(near[0])}?)" if near else ""


class FlagChecker:
    """Checks and renders flags for one server release.

    ``table``: the release's flags, or None (lenient). ``version``: the release, or None
    when unknown (then ``assumed``, the newest bundled release, decides spellings).
    ``managed``: flags the backend sets itself from neutral params (an extra argument or a
    ``backend.<flag>`` param naming one would silently override the tuned value).
    ``spellings``: ``{param name: [Spelling, ...]}`` for settings whose spelling depends
    on the release (every alias of one setting maps to the same rules).
    """

    def __init__(self, table: FlagTable | None, version: Version | None, assumed: Version,
                 managed: dict[str, str], spellings: dict[str, list[Spelling]], server: str):
        self.table = table
        self.version = version
        self.effective = version or assumed
        self.managed = managed
        self.spellings = spellings
        self.server = server

    @property
    def release(self) -> str:
        return f"{self.server} {vstr(self.effective)}" + ("" if self.version else " (assumed)")

    def problem(self, flag: str, value: Any = True, *, for_extra: bool = False) -> str | None:
        """Why ``flag`` (with ``value``) cannot be given to this release, or None."""
        if flag in self.managed:
            return f"{flag} is set by the tuner from {self.managed[flag]}; tune or fix that instead"
        table = self.table
        if table is None:
            return None
        if not table.knows(flag):
            return f"{flag} is not a flag of {self.release}{did_you_mean(flag, table.flags)}"
        info = table.flags.get(flag)
        positive = table.flags.get(table.negatives.get(flag, ""))
        if info is None and positive is not None and positive.deprecated:
            return f"{flag} is deprecated in {self.release}"
        if info is not None and info.deprecated:
            instead = f"; use {info.replacement}" if info.replacement else ""
            return f"{flag} is deprecated in {self.release}{instead}"
        if for_extra or info is None:
            return None
        if info.kind == "switch" and not isinstance(value, bool) and value is not None:
            return f"{flag} is a switch in {self.release}: give true or false, not {brief(value)}"
        if info.kind != "switch" and isinstance(value, bool):
            return f"{flag} takes a value in {self.release}, not {brief(value)}"
        return self.choice_problem(flag, value)

    def choice_problem(self, flag: str, value: Any) -> str | None:
        """Why ``value`` is not one the release accepts for ``flag`` (its recorded choices), or None."""
        info = self.table.flags.get(flag) if self.table is not None else None
        if info is None or info.choices is None or value is None or isinstance(value, bool):
            return None
        if isinstance(value, (list, tuple)):
            values = [str(v) for v in value]
        elif info.kind == "list":
            values = [t for t in re.split(r"[,\s]+", str(value)) if t]
        else:
            values = [str(value)]
        for one in values:
            if one not in info.choices:
                return (f"{flag} {brief(one)} is not a value {self.release} accepts; allowed: "
                        f"{', '.join(info.choices)}")
        return None

    def render(self, flag: str, value: Any) -> list[str]:
        """argv words for one flag and value (see the module docstring)."""
        if value is None:
            return []
        info = self.table.flags.get(flag) if self.table is not None else None
        if isinstance(value, bool):
            if value:
                return [flag]
            return [info.negative] if info is not None and info.negative else []
        if isinstance(value, (list, tuple)):
            return [flag, *map(str, value)]
        if info is not None and info.kind == "list":
            return [flag, *(t for t in re.split(r"[,\s]+", str(value)) if t)]
        return [flag, str(value)]

    def words_for(self, rules: list[Spelling], value: Any = True) -> list[str]:
        """The words of the release's spelling of one setting (none when it has none)."""
        words: list[str] = []
        for word in spelling_for(rules, self.effective).words or ():
            words += self.render(word, value)
        return words

    def param_words(self, name: str, value: Any, job_file: str | None) -> list[str]:
        """Check and render one ``backend.<name>`` param; ConfigRejected when this release
        cannot take it."""
        key = f"backend.{name}"
        rules = self.spellings.get(name)
        if rules is not None:
            rule = spelling_for(rules, self.effective)
            if rule.words is None:
                raise ConfigRejected(f"{self.release} cannot express {key}: {rule.why}", file=job_file, key=key)
            return self.words_for(rules, value)
        flag = flag_of(name)
        problem = self.problem(flag, value)
        if problem:
            raise ConfigRejected(problem, file=job_file, key=key)
        return self.render(flag, value)

    def extra_problem(self, args: list[str]) -> str | None:
        """Why pass-through arguments cannot go to this release, or None."""
        for i, arg in enumerate(args):
            if not arg.startswith("-") or arg[1:2].isdigit():
                continue
            if not arg.startswith("--"):  # short aliases (-tp 8) are checked only against managed flags
                if arg.split("=", 1)[0].split(".", 1)[0] in self.managed:
                    return f"{brief(arg)}: {self.problem(arg.split('=', 1)[0].split('.', 1)[0])}"
                continue
            flag = arg.split("=", 1)[0].split(".", 1)[0]  # vLLM's --compilation-config.mode=3 is --compilation-config
            problem = self.problem(flag, for_extra=True)
            if not problem and flag == arg.split("=", 1)[0]:
                value = arg.split("=", 1)[1] if "=" in arg else self._next_value(flag, args[i + 1:])
                problem = self.choice_problem(flag, value)
            if problem:
                return f"{brief(arg)}: {problem}"
        return None

    def _next_value(self, flag: str, rest: list[str]) -> str | None:
        """The value after a valued flag in pass-through arguments (``--load-format gguf``)."""
        info = self.table.flags.get(flag) if self.table is not None else None
        if info is None or info.kind != "value" or not rest or rest[0].startswith("--"):
            return None
        return rest[0]
