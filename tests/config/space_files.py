"""What the space tests share: a space file written into the test's tmp dir and loaded against
a job's context, and `bad`: load_space refuses it with one BadInput naming space.yaml and
the key path."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.config.space import SearchSpace, load_space
from orchestrator.core.errors import BadInput

CTX = {"gpus_per_node": 4, "heads": 8, "kv_heads": 4, "layers": 4}


def write_space(tmp_path, data, name="space.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False) if not isinstance(data, str) else data)
    return path


def load(tmp_path, data, context=CTX) -> SearchSpace:
    return load_space(write_space(tmp_path, data), context, file="space.yaml")


def bad(tmp_path, data, key, *words, context=CTX) -> str:
    with pytest.raises(BadInput) as info:
        load(tmp_path, data, context)
    exc = info.value
    msg = str(exc)
    assert exc.file == "space.yaml" and msg.startswith("space.yaml: "), msg
    assert exc.key == key, msg
    assert f": {key}: " in msg, msg
    for word in words:
        assert word in msg, msg
    return msg
