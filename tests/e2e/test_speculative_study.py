"""A study over speculative decoding, end to end: the vLLM backend spells each config's
--speculative-config, the server speculates (multi-token chunks, vLLM's /metrics counters), decode
is timed over the bundled prompt set, the trial records the acceptance the server counted, and the
correctness gate applies unchanged: a speculative config whose greedy text differs from the
baseline's (a broken verifier) ends ``wrong-output`` and is never best.

The vLLM server is the stand-in that honours its command line (tests/fake_vllm.py: ``vllm serve``,
``--speculative-config``; ``FAKE_VLLM_WRONG_METHODS`` breaks the verifier of a method); the rest is
real: the study driver, the in-process executor, the Optuna journal, the processes, HTTP."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from conftest import server_processes
from orchestrator.config.job import load_job
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.driver.run import StudyDriver
from orchestrator.results.export import export
from orchestrator.results.report import write_report
from orchestrator.study.evidence.history import best_rows, trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
REPO = Path(__file__).resolve().parents[2]


def fake_vllm(directory: Path) -> Path:
    exe = directory / "bin" / "vllm"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{sys.executable}\nimport runpy\n"
                   f"runpy.run_path({str(REPO / 'tests' / 'fake_vllm.py')!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def spec_job(tmp_path: Path) -> Path:
    model, draft = tmp_path / "refserver-1b", tmp_path / "refserver-1b-l2"
    model.mkdir()
    draft.mkdir()
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"params": {
        "speculative.method": {"choices": ["none", "ngram", "draft_model"]},
        "speculative.num_tokens": {"choices": [4], "when": {"speculative.method": ["ngram", "draft_model"]}},
        "speculative.model": {"choices": [str(draft)], "when": {"speculative.method": "draft_model"}}}}))
    job = {
        "study": "spec", "report_dir": str(tmp_path / "reports"), "space": "space.yaml",
        "backend": {"kind": "vllm", "settings": {
            "model": str(model), "served_model_name": "m", "executable": str(fake_vllm(tmp_path)),
            "version": "0.26.0", "speculative_config": {"draft_tensor_parallel_size": 1}}},
        "gpus_per_node": 0, "budget": {"trials": 3}, "sampler": {"name": "tpe", "seed": 0},
        "baseline": {"speculative.method": "none"},
        # the bundled prompt set (natural texts of 165-250 words): bench.prompts left out
        "bench": {"output_tokens": 24, "warmup": 1, "repeats": 2, "max_repeats": 2},
        "timeouts": {"startup": "60s", "bench": "120s", "teardown": "5s"},
        "correctness": {"check_tokens": 12},
        "pruning": {"enabled": False},
        "env": {"FAKE_VLLM_WRONG_METHODS": "draft_model"},  # the draft model's verifier is broken
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def test_a_speculative_study_measures_acceptance_and_gates_the_text(tmp_path):
    before = {pid for pid, _ in server_processes("fake_vllm")}
    job = load_job(spec_job(tmp_path))
    executor = InProcessExecutor()
    out = io.StringIO()
    try:
        StudyDriver(job, executor=executor, out=out).run()
    finally:
        executor.shutdown()
    rows = {r.params.get("speculative.method", "none"): r for r in trial_rows(open_study(job, create=False))
            if r.counted}
    assert set(rows) == {"none", "ngram", "draft_model"}, out.getvalue()
    base, ngram, draft = rows["none"], rows["ngram"], rows["draft_model"]

    assert base.is_baseline and base.state == "COMPLETE" and base.acceptance_rate is None
    assert "--speculative-config" not in base.server["argv"]  # method none: no flag at all

    # ngram: on the bundled prompts the stand-in accepts every draft: 24 tokens in steps of 1 + 4, so 5
    # steps, 19 of 20 drafted tokens accepted (the last step needs 3), 4.8 tokens per step
    assert ngram.state == "COMPLETE", ngram.failure_reason
    assert json.loads(ngram.server["argv"][ngram.server["argv"].index("--speculative-config") + 1]) == {
        "method": "ngram", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 1}
    assert ngram.acceptance_rate == pytest.approx(19 / 20) and ngram.mean_accepted_length == pytest.approx(4.8)
    assert ngram.value > 2 * base.value  # 5 tokens per step of 1.4 token times
    assert ngram.correctness.get("ok") is True

    # draft_model: fast, but its text is not the baseline's: wrong-output, never ranked
    assert draft.state == "FAIL" and draft.failure_kind == "wrong-output", (draft.state, draft.failure_reason)
    assert "differs from the reference" in draft.failure_reason
    argv = draft.server["argv"]
    assert json.loads(argv[argv.index("--speculative-config") + 1])["model"] == str(tmp_path / "refserver-1b-l2")

    best = best_rows(trial_rows(open_study(job, create=False)))
    assert [r.number for r in best] == [ngram.number]
    write_report(job)
    md = (job.report_dir / "report.md").read_text()
    assert "95% accepted, 4.80 tokens/step" in md
    exported = yaml.safe_load(export(job, trial_rows(open_study(job, create=False)), "yaml"))
    assert exported["provenance"]["mean_accepted_length"] == pytest.approx(4.8)
    assert not [(p, c) for p, c in server_processes("fake_vllm") if p not in before]
