"""A level's identity: a context-0 level is the plain number every record has always held; a
level with a context is its own key everywhere (mappings, records, JSON, pickles)."""

import json
import pickle

import pytest

from orchestrator.core import level
from orchestrator.core.measurement import LevelResult, Measurement


def test_a_context_0_level_is_the_plain_number_and_a_long_one_is_its_own_key():
    assert type(level.make(64)) is int and level.make(64, 0) == 64
    long = level.make(64, 8192)
    assert long != 64 and 64 != long and long != level.make(64, 4096)
    assert {64: "short", long: "long"}[level.make(64, 8192)] == "long"
    assert 64 not in {long: 1}
    assert level.streams(long) == 64 and level.context_of(long) == 8192 and level.context_of(64) == 0
    assert str(long) == "64@8192" and f"{long}" == "64@8192" and f"{long:>9}" == "  64@8192"


def test_levels_sort_by_context_then_concurrency_among_plain_numbers():
    mixed = [level.make(64, 8192), 64, level.make(1, 8192), 1]
    assert [str(lv) for lv in sorted(mixed)] == ["1", "64", "1@8192", "64@8192"]
    assert min(mixed) == 1 and max(mixed) == level.make(64, 8192)


@pytest.mark.parametrize("text, want", [("64", 64), (" 64@8192 ", level.make(64, 8192)), ("64@0", 64), (32, 32)])
def test_parse_reads_every_spelling(text, want):
    got = level.parse(text)
    assert got == want and level.context_of(got) == level.context_of(want)


@pytest.mark.parametrize("bad", ["", "64@", "@8192", "x", "64@-1", 1.5, True, None])
def test_parse_refuses_anything_else(bad):
    with pytest.raises(ValueError, match="not a level"):
        level.parse(bad)


def test_a_long_level_survives_a_record_json_and_a_pickle():
    long = level.make(1, 8192)
    m = Measurement(levels={1: LevelResult(1, samples=(10.0,)), long: LevelResult(long, samples=(4.0,))})
    back = Measurement.from_record(json.loads(json.dumps(m.to_record())))
    assert back is not None and list(back.levels) == [1, long] and back.value_at(long) == 4.0
    assert back.levels[long].unit == "decode tok/s" and back.value_at(1) == 10.0  # level 1 at any context decodes
    assert pickle.loads(pickle.dumps(long)) == long and level.context_of(pickle.loads(pickle.dumps(long))) == 8192
    assert json.loads(json.dumps({"level": level.key(long), "short": level.key(64)})) == {"level": "1@8192",
                                                                                         "short": 64}
