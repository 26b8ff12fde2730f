"""The decode prompts are part of what a figure means (issue 38): every trial records the set
it was measured on (``status --json``), the export's provenance names it, a run on a changed
set is refused in one line (exit 2) before anything is launched, and a degenerate set is
warned about before the first launch. Real Ray, a real server process (the command backend's
test server), the real command line."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from conftest import FAKE_OPENAI, write_job
from orchestrator.cli import main
from orchestrator.config import prompts

pytestmark = pytest.mark.slow


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def fake_job(tmp_path: Path, texts: list[str]) -> Path:
    (tmp_path / "prompts.txt").write_text("\n".join(texts) + "\n")
    argv = ["{python}", str(FAKE_OPENAI), "--port", "{port}", "--model", "fake", "--token-delay", "0.002"]
    return write_job(tmp_path, study="texts", space_text="params:\n  tp_size: {choices: [1]}\n",
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                     baseline={"tp_size": 1}, budget={"trials": 1},
                     bench={"prompts": "prompts.txt", "output_tokens": 16, "warmup": 1, "repeats": 2})


def test_every_figure_says_which_prompts_and_a_changed_set_is_refused(tmp_path, ray_local):
    texts = ["Explain how a ring all-reduce moves data between eight GPUs.",
             "Summarize the plot of a novel about a lighthouse keeper in three sentences."]
    job = fake_job(tmp_path, texts)
    code, _, err = cli("run", str(job))
    assert code == 0, err
    want = prompts.fingerprint(tuple(texts), str(tmp_path / "prompts.txt"))
    code, out, _ = cli("status", str(job), "--json")
    (record,) = json.loads(out)["trials"]
    assert record["state"] == "COMPLETE" and record["prompt_set"] == want
    code, out, _ = cli("export", str(job), "--format", "yaml")
    assert yaml.safe_load(out)["provenance"]["prompts"] == want
    code, out, _ = cli("export", str(job), "--format", "env")
    assert f"# measured on the decode prompts: {prompts.describe(want)}" in out.splitlines()

    (tmp_path / "prompts.txt").write_text("\n".join([*texts, "A prompt added later."]) + "\n")
    code, _, err = cli("run", str(job), "--trials", "2")
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith(f"ncclsweep: error: {job}: bench.prompts: study 'texts' was measured "
                                              "on other decode prompts (2 prompt(s) of 10-13 words"), err
    assert not [ln for ln in lines if ln.startswith("starting #")]  # nothing launched


def test_a_degenerate_set_is_warned_about_before_the_first_launch(tmp_path, ray_local):
    job = fake_job(tmp_path, ["the cat sat on the mat and the cat sat on the mat again and again"] * 4)
    code, _, err = cli("run", str(job))
    assert code == 0, err
    said = " ".join(err.split())  # a long line is wrapped to the log's width
    warned = said.find("would misrank configs: 3 of its 4 prompts repeat another")
    assert 0 <= warned < said.find("starting #0 "), err
