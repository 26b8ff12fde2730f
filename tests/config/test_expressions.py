"""Constraint expressions of a space (expressions.py): dotted parameter names and strings work;
what is not in the safe subset (a call, a bad parse, an unknown name, values that cannot be
compared) is refused with one line naming the constraint, the rule and what is allowed,
before anything is evaluated."""

from __future__ import annotations

from space_files import bad, load


def test_dotted_names_and_strings_in_constraints(tmp_path):
    space = load(tmp_path, {"params": {"tp_size": [1, 2], "backend.threads": [1, 2, 4]},
                            "constraints": ["tp_size * backend.threads <= 4",
                                            "backend.threads in [1, 2, 4]"]})
    assert len(space.enumerate()) == 5


def test_bad_constraint_syntax(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1, 2]}, "constraints": ["tp_size <= "]}, "constraints[0]",
        "cannot parse", "allowed:")


def test_bad_constraint_function_call(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1, 2]}, "constraints": ["__import__('os').system('x')"]},
        "constraints[0]", "function call", "allowed:")


def test_bad_constraint_unknown_name(tmp_path):
    bad(tmp_path, {"params": {"tp_size": [1, 2]}, "constraints": ["tp_size <= gpu_per_node"]},
        "constraints[0]", "unknown name 'gpu_per_node'", "did you mean 'gpus_per_node'", "context names")


def test_bad_constraint_type_error(tmp_path):
    bad(tmp_path, {"params": {"env.GLOO_SOCKET_IFNAME": ["eth0"]},
                   "constraints": ["env.GLOO_SOCKET_IFNAME > 3"]}, "constraints[0]", "cannot be evaluated")
