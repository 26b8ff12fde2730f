"""The reference-server backend: argv/env it emits and the configs it refuses."""

import pytest

from orchestrator.backends.refserver import RefServerBackend
from orchestrator.core.errors import BadInput, ConfigRejected


def test_launch_spec_carries_tp_flags_and_nccl_env():
    backend = RefServerBackend({"model": "tiny", "device": "cpu"})
    spec = backend.launch_spec({"tp_size": 2, "backend.threads": 1, "env.NCCL_PROTO": "LL"}, "127.0.0.1", 8123)
    assert spec.argv[1:3] == ["-m", "orchestrator.refserver"]
    assert spec.argv[spec.argv.index("--tp") + 1] == "2"
    assert spec.argv[spec.argv.index("--threads") + 1] == "1"
    assert spec.argv[spec.argv.index("--port") + 1] == "8123"
    assert spec.env == {"NCCL_PROTO": "LL"}
    assert spec.base_url == "http://127.0.0.1:8123" and spec.health_path == "/health"
    assert "NCCL_PROTO=LL" in spec.shell_line()


def test_graph_capture_is_refused_on_cpu_and_accepted_on_cuda():
    with pytest.raises(ConfigRejected, match="graph_capture"):
        RefServerBackend({"device": "cpu"}).check_config({"graph_capture": True})
    gpu = RefServerBackend({"model": "1b", "device": "cuda"})
    gpu.check_config({"graph_capture": True, "capture_sizes": "1,2,4"})
    argv = gpu.launch_spec({"graph_capture": True, "capture_sizes": "1,2,4"}, "127.0.0.1", 1).argv
    assert "--graph-capture" in argv and argv[argv.index("--capture-sizes") + 1] == "1,2,4"


def test_tp_that_does_not_divide_heads_is_refused():
    with pytest.raises(ConfigRejected, match="tp_size=3"):
        RefServerBackend({"model": "tiny"}).check_config({"tp_size": 3})


def test_unknown_setting_and_preset_are_bad_input_with_key_path():
    with pytest.raises(BadInput, match=r"backend\.settings\.modle.*did you mean 'model'"):
        RefServerBackend({"modle": "tiny"})
    with pytest.raises(BadInput, match=r"backend\.settings\.model.*allowed: tiny"):
        RefServerBackend({"model": "70b"})


def test_normalize_drops_what_cannot_matter_and_case_folds_nccl():
    backend = RefServerBackend({"model": "tiny"})
    assert "env.NCCL_PROTO" not in backend.normalize({"tp_size": 1, "env.NCCL_PROTO": "LL"})
    norm = backend.normalize({"tp_size": 2, "env.NCCL_PROTO": "ll", "capture_sizes": "1,2"})
    assert norm["env.NCCL_PROTO"] == "LL" and "capture_sizes" not in norm


def test_model_facts_give_the_ceiling_inputs():
    facts = RefServerBackend({"model": "8b", "device": "cuda"}).model_facts()
    assert facts["allreduces_per_step"] == 2 * facts["layers"]
    assert 14e9 < facts["bytes_per_token"] < 18e9  # ~8B params in bf16


@pytest.mark.parametrize(("dims", "key", "words"), [
    ({"foo": 1}, "backend.settings.dims.foo", "unknown dimension 'foo'; allowed: layers, hidden, heads, kv_heads, ffn, "
                                              "vocab"),
    ({"hedas": 4}, "backend.settings.dims.hedas", "did you mean 'heads'?"),
    ({"heads": 0}, "backend.settings.dims.heads", "must be an integer >= 1, not 0"),
    ({"layers": "4"}, "backend.settings.dims.layers", "must be an integer >= 1, not '4'"),
    ({"heads": 3}, "backend.settings.dims", "heads: must divide hidden=256, got 3"),
    (5, "backend.settings.dims", "must be a mapping like {layers: 4, hidden: 256}, not 5"),
])
def test_dims_are_checked_at_the_jobs_key(tmp_path, capsys, dims, key, words):
    """A wrong ``dims`` is reported at ``backend.settings.dims...`` of the job, not as an
    unknown name ``heads`` in the space's constraints (the model facts it broke)."""
    from conftest import write_job
    from orchestrator.cli import main

    job = write_job(tmp_path, backend={"kind": "refserver", "settings": {"model": "tiny", "device": "cpu",
                                                                          "dims": dims}},
                    space_text="params:\n  tp_size: {choices: [1, 2]}\nconstraints: ['heads % tp_size == 0']\n")
    assert main(["validate", str(job)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{job}: {key}: " in err[0] and words in err[0], err
    assert "constraints" not in err[0]


def test_dims_that_make_a_model_are_launched():
    backend = RefServerBackend({"model": "tiny", "device": "cpu", "dims": {"layers": 2, "heads": 8, "kv_heads": 4}})
    argv = backend.launch_spec({"tp_size": 2}, "127.0.0.1", 1).argv
    assert argv[argv.index("--layers") + 1] == "2" and argv[argv.index("--kv-heads") + 1] == "4"
    assert backend.model_facts()["heads"] == 8


def test_where_a_config_changes_regime_for_the_capacity_search():
    """Issue 47: the largest captured batch and the batch the engine steps at most, where given."""
    b = RefServerBackend({"model": "tiny", "device": "cpu", "max_batch": 32})
    assert [(m.streams, m.kind) for m in b.load_marks({"graph_capture": False})] == [(32, "batch")]
    cuda = RefServerBackend({"model": "tiny", "device": "cpu"})
    marks = cuda.load_marks({"graph_capture": True, "capture_sizes": "1,2,4,16", "backend.max_batch": 48})
    assert [(m.streams, m.kind) for m in marks] == [(16, "graphs"), (48, "batch")]
