"""Search spaces: parsing, conditions, constraints, enumeration and Optuna suggestions."""

from __future__ import annotations

import pickle

import optuna
import pytest
from space_files import CTX, bad, load, write_space

from orchestrator.config.space import check_param_name, load_space, space_from_dict
from orchestrator.core.errors import BadInput

GRAPH_SPACE = {
    "params": {
        "tp_size": {"choices": [1, 2, 4]},
        "graph_capture": {"choices": [False, True]},
        "capture_sizes": {"choices": ["1,2,4,8", "1,2,4,8,16,32"], "when": {"graph_capture": True}},
        "backend.max_batch": {"type": "int", "low": 8, "high": 32, "step": 8},
    },
    "constraints": ["tp_size <= gpus_per_node", "heads % tp_size == 0"],
}


# ---- happy paths ---------------------------------------------------------------------------

def test_load_and_enumerate_with_conditions(tmp_path):
    space = load(tmp_path, GRAPH_SPACE)
    assert space.names == ("tp_size", "graph_capture", "capture_sizes", "backend.max_batch")
    assert space.param("backend.max_batch").values() == (8, 16, 24, 32)
    configs = space.enumerate()
    # 3 TP x (1 without graphs + 2 capture sizes) x 4 batch sizes
    assert len(configs) == 3 * 3 * 4 == space.size()
    for c in configs:
        assert ("capture_sizes" in c) == c["graph_capture"]
        assert space.contains(c), c
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)


def test_constraints_filter_and_inactive_params_satisfy(tmp_path):
    data = {**GRAPH_SPACE, "constraints": GRAPH_SPACE["constraints"] + [
        "tp_size == 1 or graph_capture",                 # TP > 1 only with graphs
        "capture_sizes != '1,2,4,8,16,32' or tp_size >= 2",  # inactive without graphs: satisfied
    ]}
    data["params"] = {k: v for k, v in data["params"].items() if k != "backend.max_batch"}
    space = load(tmp_path, data)
    configs = space.enumerate()
    assert {"tp_size": 1, "graph_capture": False} in configs
    assert {"tp_size": 2, "graph_capture": False} not in configs
    assert {"tp_size": 1, "graph_capture": True, "capture_sizes": "1,2,4,8,16,32"} not in configs
    assert len(configs) == 1 + 1 + 2 * 2  # tp1 eager, tp1 small graphs, tp2/4 x 2 sizes
    why = space.feasible({"tp_size": 2, "graph_capture": False})
    assert "tp_size == 1 or graph_capture" in why and "tp_size=2" in why
    assert space.feasible({"tp_size": 1, "graph_capture": False}) is None


def test_active_drops_inactive_and_keeps_foreign_keys(tmp_path):
    space = load(tmp_path, GRAPH_SPACE)
    config = {"tp_size": 2, "graph_capture": False, "capture_sizes": "1,2,4,8", "backend.max_batch": 8,
              "env.FOO": "1"}
    assert space.active(config) == {"tp_size": 2, "graph_capture": False, "backend.max_batch": 8, "env.FOO": "1"}
    assert space.project(config) == {"tp_size": 2, "graph_capture": False, "backend.max_batch": 8}
    assert not space.contains(config)  # capture_sizes inactive, env.FOO foreign
    assert space.contains(space.project(config))
    assert not space.contains({"tp_size": 3, "graph_capture": False, "backend.max_batch": 8})
    assert not space.contains({"tp_size": 2, "graph_capture": True, "backend.max_batch": 8})  # missing child


def test_suggest_with_real_optuna_gives_only_active_params(tmp_path):
    space = load(tmp_path, GRAPH_SPACE)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1))
    seen_graph = set()
    for _ in range(30):
        trial = study.ask()
        config = space.suggest(trial)
        assert set(config) == set(trial.params) == set(space.active_names(config))
        assert ("capture_sizes" in config) == (config["graph_capture"] is True)
        assert config["backend.max_batch"] in (8, 16, 24, 32)
        seen_graph.add(config["graph_capture"])
        study.tell(trial, float(config["tp_size"]))
    assert seen_graph == {False, True}


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_enqueued_point_and_tpe_with_conditions(tmp_path):
    space = load(tmp_path, GRAPH_SPACE)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=2, multivariate=True,
                                                                   group=True))
    point = {"tp_size": 2, "graph_capture": True, "capture_sizes": "1,2,4,8", "backend.max_batch": 16}
    study.enqueue_trial(point)
    trial = study.ask()
    assert space.suggest(trial) == point
    study.tell(trial, 1.0)
    for _ in range(4):
        trial = study.ask()
        config = space.suggest(trial)
        assert space.why_not(config) is None
        study.tell(trial, 1.0)
    dists = space.distributions()
    assert set(dists) == set(space.names)
    assert isinstance(dists["backend.max_batch"], optuna.distributions.IntDistribution)
    assert dists["tp_size"].choices == (1, 2, 4)


def test_shorthand_list_env_values_as_strings_and_log_int(tmp_path):
    space = load(tmp_path, {"params": {"env.CUDA_DEVICE_MAX_CONNECTIONS": [1, 8],
                                       "backend.max_num_seqs": {"type": "int", "low": 1, "high": 256, "log": True}}})
    assert space.param("env.CUDA_DEVICE_MAX_CONNECTIONS").choices == ("1", "8")
    assert space.size() == 2 * 256
    assert space.enumerate(limit=100) is None and space.size(limit=100) is None


def test_enumerate_none_for_wide_int(tmp_path):
    space = load(tmp_path, {"params": {"backend.max_batch": {"type": "int", "low": 1, "high": 10_000_000}}})
    assert space.enumerate() is None and space.size() is None


def test_space_pickles(tmp_path):
    space = load(tmp_path, GRAPH_SPACE)
    again = pickle.loads(pickle.dumps(space))
    assert again.enumerate() == space.enumerate()


def test_cpu_context_dead_choice_documented(tmp_path):
    # On a CPU job the context's gpus_per_node is cpus_per_trial (see orchestrator.config.space docstring).
    data = {"params": {"tp_size": [1, 2]}, "constraints": ["tp_size <= gpus_per_node"]}
    assert load(tmp_path, data, context={"gpus_per_node": 2}).size() == 2
    bad(tmp_path, data, "constraints[0]", "dead choice", "tp_size=2", "gpus_per_node=1",
        context={"gpus_per_node": 1})


def test_param_name_rules():
    assert check_param_name("tp_size") is None
    assert check_param_name("env.NCCL_PROTO") is None
    assert check_param_name("backend.max_batch") is None
    assert "did you mean 'tp_size'" in check_param_name("tp_sise")
    assert "did you mean 'env.NCCL_ALGO'" in check_param_name("NCCL_ALGO")
    assert "upper-case" in check_param_name("env.nccl_proto")
    assert "no dashes" in check_param_name("backend.max-batch")


# ---- bad input -----------------------------------------------------------------------------

def test_bad_unknown_top_key(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1]}, "constraint": []}, "constraint",
        "did you mean 'constraints'", "allowed: params, constraints")


def test_bad_empty_choices(tmp_path):
    bad(tmp_path, {"params": {"tp_size": {"choices": []}}}, "params.tp_size.choices", "non-empty list", "[]")


def test_bad_duplicate_choice(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1, 2, 1]}}, "params.tp_size.choices[2]", "duplicate choice 1")


def test_bad_param_name(tmp_path):
    bad(tmp_path, {"params": {"tp_sise": [1, 2]}}, "params.tp_sise", "did you mean 'tp_size'", "allowed:")


def test_bad_param_key(tmp_path):
    bad(tmp_path, {"params": {"tp_size": {"choices": [1], "whenn": {}}}}, "params.tp_size.whenn",
        "did you mean 'when'", "allowed: choices, when, type")


def test_bad_int_range(tmp_path):
    bad(tmp_path, {"params": {"backend.max_batch": {"type": "int", "low": 64, "high": 8}}},
        "params.backend.max_batch.low", "low (64) must be <= high (8)")
    bad(tmp_path, {"params": {"backend.max_batch": {"type": "int", "low": 8, "high": "64"}}},
        "params.backend.max_batch.high", "must be an integer", "'64' (a string)")
    bad(tmp_path, {"params": {"backend.max_batch": {"type": "float", "low": 8, "high": 64}}},
        "params.backend.max_batch.type", "allowed: categorical, int")


def test_bad_condition(tmp_path):
    params = {"graph_capture": [False, True], "capture_sizes": {"choices": ["1,2"], "when": {"graph_captur": True}}}
    bad(tmp_path, {"params": params}, "params.capture_sizes.when.graph_captur", "did you mean 'graph_capture'")
    params["capture_sizes"]["when"] = {"graph_capture": "yes"}
    bad(tmp_path, {"params": params}, "params.capture_sizes.when.graph_capture", "never matches", "False, True")


def test_bad_condition_cycle(tmp_path):
    params = {"tp_size": {"choices": [1, 2], "when": {"pp_size": 1}},
              "pp_size": {"choices": [1], "when": {"tp_size": 1}}}
    bad(tmp_path, {"params": params}, "params.tp_size.when", "cycle")


def test_bad_dead_choice(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1, 2, 3]}, "constraints": ["heads % tp_size == 0"]},
        "constraints[0]", "dead choice", "tp_size=3", "heads=8")


def test_bad_constraint_false_for_context(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1]}, "constraints": ["layers > 100"]}, "constraints[0]",
        "false for this job", "layers=4")


def test_bad_no_feasible_config(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1, 2], "backend.threads": [1, 2]},
                   "constraints": ["tp_size + backend.threads == 3", "tp_size == backend.threads"]},
        "constraints", "no config satisfies")


def test_bad_yaml_and_not_mapping(tmp_path):
    with pytest.raises(BadInput, match=r"space.yaml: not valid YAML at line \d+, column \d+: expected"):
        load_space(write_space(tmp_path, "params:\n  tp_size: [1, 2\n"), CTX, file="space.yaml")
    with pytest.raises(BadInput, match=r"space.yaml: a search space file must be a YAML mapping"):
        load_space(write_space(tmp_path, "- 1\n- 2\n"), CTX, file="space.yaml")
    with pytest.raises(BadInput, match=r"space.yaml: not valid YAML.*duplicate key 'tp_size'"):
        load_space(write_space(tmp_path, "params:\n  tp_size: [1]\n  tp_size: [2]\n"), CTX, file="space.yaml")
    with pytest.raises(BadInput, match=r"search space file not found"):
        load_space(tmp_path / "nope.yaml", CTX)


def test_bad_nccl_value(tmp_path):
    pytest.importorskip("orchestrator.core.nccl", reason="orchestrator/core/nccl.py (NCCL value rules) not written yet")
    bad(tmp_path, {"params": {"env.NCCL_PROTO": ["LL", "Fast"]}}, "params.env.NCCL_PROTO.choices[1]", "Fast")
    space = load(tmp_path, {"params": {"env.NCCL_PROTO": ["ll", "simple"]}})
    assert space.param("env.NCCL_PROTO").choices == ("LL", "Simple")  # canonical spelling


def test_space_from_dict_skips_checks_until_check():
    space = space_from_dict({"params": {"tp_size": [1, 3]}, "constraints": ["heads % tp_size == 0"]},
                            CTX, file="inline")
    assert space.size() == 1
    with pytest.raises(BadInput, match="dead choice"):
        space.check()


def test_condition_with_a_list_of_values(tmp_path):
    space = load(tmp_path, {"params": {"tp_size": [1, 2, 4], "custom_all_reduce": {"choices": [False, True],
                                                                                  "when": {"tp_size": [2, 4]}}}})
    assert space.enumerate() == [{"tp_size": 1}, {"tp_size": 2, "custom_all_reduce": False},
                                 {"tp_size": 2, "custom_all_reduce": True},
                                 {"tp_size": 4, "custom_all_reduce": False},
                                 {"tp_size": 4, "custom_all_reduce": True}]
