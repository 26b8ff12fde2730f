"""The samplers' table (config/sampler_options.py): a sampler whose package is not installed
is named with what to install and what to use instead, the line `validate` and `run` give."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from orchestrator.config.sampler_options import NEEDS, SAMPLER_NAMES, missing_packages


def test_a_sampler_without_its_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)  # not installed, as an import or a lookup sees it
    assert missing_packages("gp") == "the gp sampler needs scipy (pip install scipy); or use sampler model"
    assert missing_packages("tpe") is None  # Optuna's own: nothing more


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="needs scipy installed")
def test_nothing_is_missing_where_the_package_is_installed():
    assert missing_packages("gp") is None


def test_every_sampler_that_needs_a_package_is_one_a_job_may_name():
    assert set(NEEDS) <= set(SAMPLER_NAMES)
