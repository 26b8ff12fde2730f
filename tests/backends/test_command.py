"""The command backend: filling the argv template, and refusing placeholders no param fills
and params no placeholder uses. (The end-to-end run of the reference server through this
backend is the lead's test.)"""

from __future__ import annotations

import sys

import pytest

from orchestrator.backends import get_backend_class
from orchestrator.backends.command import CommandBackend, placeholders
from orchestrator.core.errors import BadInput, ConfigRejected

REFSERVER_ARGV = ["{python}", "-m", "orchestrator.refserver", "--model", "tiny", "--tp", "{tp_size}",
                  "--device", "cpu", "--host", "{host}", "--port", "{port}", "--threads", "{backend.threads}",
                  "{graph_capture?--graph-capture}"]


def backend(**settings) -> CommandBackend:
    return CommandBackend({"argv": REFSERVER_ARGV, "model_name": "tiny", **settings}, job_file="jobs/c.yaml")


def test_registered_and_kind():
    assert get_backend_class("command") is CommandBackend and CommandBackend.kind == "command"


def test_fills_builtins_params_and_defaults():
    b = backend(defaults={"backend.threads": 2})
    spec = b.launch_spec({"tp_size": 2, "env.NCCL_PROTO": "ll"}, "127.0.0.1", 8011)
    assert spec.argv == [sys.executable, "-m", "orchestrator.refserver", "--model", "tiny", "--tp", "2",
                         "--device", "cpu", "--host", "127.0.0.1", "--port", "8011", "--threads", "2"]
    assert spec.env == {"NCCL_PROTO": "LL"}
    assert spec.health_path == "/health" and spec.ready_status == 200 and spec.model_name == "tiny"
    spec = b.launch_spec({"tp_size": 1, "backend.threads": 4, "graph_capture": True}, "h", 1)
    assert spec.argv[-3:] == ["--threads", "4", "--graph-capture"]


def test_placeholders_inside_elements_and_literal_braces():
    b = CommandBackend({"argv": ["srv", "--listen={host}:{port}", "--json={{\"tp\": {tp_size}}}",
                                 "--gpus={gpus}", "--proto={env.NCCL_PROTO}", "--flag={custom_all_reduce}"]})
    words = b.launch_spec({"tp_size": 4, "pp_size": 2, "env.NCCL_PROTO": "Simple", "custom_all_reduce": False},
                          "0.0.0.0", 9).argv
    assert words == ["srv", "--listen=0.0.0.0:9", '--json={"tp": 4}', "--gpus=8", "--proto=Simple",
                     "--flag=false"]
    assert b.gpus_per_trial({"tp_size": 4, "pp_size": 2}) == 8


def test_placeholders_listed_in_order():
    assert placeholders(["a{x}b{y?--y}", "{{z}}", "{port}"]) == [("x", False), ("y", True), ("port", False)]


def test_check_config_refuses_an_unfilled_placeholder():
    b = backend()
    with pytest.raises(ConfigRejected, match=r"placeholder \{backend.threads\}") as exc:
        b.check_config({"tp_size": 1})
    assert exc.value.key == "backend.threads" and "jobs/c.yaml" in str(exc.value)
    b.check_config({"tp_size": 1, "backend.threads": 2})
    backend(defaults={"backend.threads": 2}).check_config({"tp_size": 1})


def test_check_config_refuses_a_param_that_reaches_no_placeholder():
    b = backend(defaults={"backend.threads": 2})
    with pytest.raises(ConfigRejected, match="reaches no placeholder") as exc:
        b.check_config({"tp_size": 1, "capture_sizes": "1,2"})
    assert exc.value.key == "capture_sizes"
    b.check_config({"tp_size": 2, "pp_size": 1, "env.NCCL_ALGO": "Ring"})  # env and sizes need no placeholder


def test_check_config_validates_nccl_and_sizes():
    b = backend(defaults={"backend.threads": 2})
    with pytest.raises(ConfigRejected, match="LL129"):
        b.check_config({"env.NCCL_PROTO": "LL129"})
    with pytest.raises(ConfigRejected, match="positive integer"):
        b.check_config({"tp_size": 0})


def test_health_path_and_status_settings():
    spec = backend(health_path="/v1/health", ready_status=204, defaults={"backend.threads": 1}).launch_spec({}, "h", 1)
    assert spec.health_path == "/v1/health" and spec.ready_status == 204


@pytest.mark.parametrize("settings,key,needle", [
    ({"argv": "srv --port {port}"}, "argv", "non-empty list"),
    ({"argv": ["srv"]}, "argv", "must contain {port}"),
    ({"argv": ["srv", "{port}", "{oops"]}, "argv[2]", "brace"),
    ({"argv": ["srv", "{port}"], "health_path": "health"}, "health_path", "start with '/'"),
    ({"argv": ["srv", "{port}"], "ready_status": "ok"}, "ready_status", "HTTP status"),
    ({"argv": ["srv", "{port}"], "default": {}}, "default", "did you mean 'defaults'"),
    ({"argv": ["srv", "{port}"], "defaults": [1]}, "defaults", "mapping"),
])
def test_bad_settings(settings, key, needle):
    with pytest.raises(BadInput, match=needle) as exc:
        CommandBackend(settings)
    assert exc.value.key == f"backend.settings.{key}"


def test_defaults_version_and_identity():
    b = backend(version="7.1", defaults={"backend.threads": 2})
    assert b.version() == "7.1"
    assert b.default_config() == {"tp_size": 1}
    b.check_config(b.default_config())
    assert b.normalize({"tp_size": 1, "env.NCCL_PROTO": "LL"}) == {"tp_size": 1}  # NCCL cannot matter at TP 1


def test_example_job_loads_and_fills_every_config():
    from pathlib import Path

    from orchestrator.config.job import load_job

    job = load_job(str(Path(__file__).resolve().parents[2] / "jobs" / "command-example.yaml"))
    b = job.backend_obj()
    assert b.model_facts()["heads"] == 8
    for config in [job.baseline, *(job.space.active({**job.baseline, **c}) for c in job.space.enumerate())]:
        b.check_config(config)
        words = b.launch_spec(config, "127.0.0.1", 8123).argv
        assert words[1:3] == ["-m", "orchestrator.refserver"] and "{" not in " ".join(words)
        assert words[words.index("--tp") + 1] == str(config["tp_size"])


def test_the_gpus_a_config_occupies_and_where_it_changes_regime():
    """Issue 47: a command that is told its TP x PP occupies those GPUs; one that is not may run on any
    of the node's: it takes the node (what a GPU-hour price charges). Its capture sizes mark where its
    graphs end."""
    told = backend(argv=["srv", "--port", "{port}", "--tp", "{tp_size}"])
    assert told.gpus_occupied({"tp_size": 4}, 8) == 4
    assert backend(argv=["srv", "--port", "{port}"]).gpus_occupied({"tp_size": 1}, 8) == 8
    graphs = backend(argv=["srv", "--port", "{port}", "--sizes", "{capture_sizes}"])
    assert [(m.streams, m.kind) for m in graphs.load_marks({"capture_sizes": "1,2,4,64"})] == [(64, "graphs")]
    assert graphs.load_marks({"capture_sizes": "1,2,4,64", "graph_capture": False}) == []
