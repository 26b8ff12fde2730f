"""Issue 35, long context as a dimension of the objective, end to end: ``objective: {concurrency:
[1, 4], context: [0, 2048]}`` on a real server process (tests/fake_openai_server.py through the
command backend) whose per-token delay grows with the prompt's length differently per config, by
construction (``--token-delay D --context-cost C``: each token takes D + C per 1000 words of
the prompt, the first token 10 x C per 1000 words more than the prompt as it is: the prefill):

- A (the baseline): D 4 ms, C 6 ms: the faster on the prompt as it is (4.0 ms a token), 13.2 ms
  on a prompt made about 2048 tokens long (1525 words);
- B: D 8 ms, C 0.4 ms: slower on the short prompt (8.0 ms), 8.6 ms on the long one.

(Each order is 1.5x or more apart, so that the plan's winners hold on a box whose other work
adds milliseconds to every token.)

Every (concurrency, context) pair is a level measured in the same launch; the plan names A at 1
and 4 and B at 1@2048 and 4@2048, a target of one pair's own (``slo: {1@2048: ...}``) holds
there only, ``status`` and ``status --json`` carry each pair's figure and latency (TTFT grows
with the context), ``export --concurrency 4@2048`` exports B and says the context, a pair the
objective lacks is one line and exit 2. The real driver, real Optuna journal storage, the
correctness gate on."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fake_openai_server import PREFILL_FACTOR

from conftest import write_job
from logtext import log_lines
from orchestrator import cli
from orchestrator.config.job import load_job
from orchestrator.core.level import make
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.driver.run import StudyDriver
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.evidence.plan import build_plan
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

FAKE = str(Path(__file__).resolve().parents[1] / "fake_openai_server.py")
A = {"backend.token_delay": 0.004, "backend.context_cost": 0.006}
B = {"backend.token_delay": 0.008, "backend.context_cost": 0.0004}
SPACE = ("params:\n  backend.token_delay: {choices: [0.004, 0.008]}\n"
         "  backend.context_cost: {choices: [0.006, 0.0004]}\n"
         "constraints:\n"
         "  - '(backend.token_delay == 0.004 and backend.context_cost == 0.006) or "
         "(backend.token_delay == 0.008 and backend.context_cost == 0.0004)'\n")
LONG_1, LONG_4 = make(1, 2048), make(4, 2048)


def context_job(tmp_path: Path) -> Path:
    argv = ["{python}", FAKE, "--host", "{host}", "--port", "{port}", "--token-delay", "{backend.token_delay}",
            "--context-cost", "{backend.context_cost}"]
    return write_job(tmp_path, study="context-plan", space_text=SPACE,
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                     baseline=A, objective={"concurrency": [1, 4], "context": [0, 2048]},
                     slo={"1@2048": {"tpot_p99": "11ms"}}, budget={"trials": 2},
                     bench={"prompt": "Explain how a ring all-reduce works across eight GPUs.", "output_tokens": 16,
                            "warmup": 1, "repeats": 2, "max_repeats": 2, "waves": 2, "concurrency": [1]},
                     timeouts={"startup": "30s", "bench": "60s", "teardown": "5s"},
                     correctness={"check_tokens": 8, "prompts": ["The quick brown fox", "Once upon a time"],
                                  "logprobs": False})


def by_config(rows, config: dict):
    return next(r for r in rows if r.counted and r.cached_from is None
                and all(r.params.get(k) == v for k, v in config.items()))


def test_each_context_and_concurrency_pair_is_a_level_with_its_own_winner(tmp_path, capsys):
    job_path = context_job(tmp_path)
    job = load_job(job_path)
    out = io.StringIO()
    summary = StudyDriver(job, executor=InProcessExecutor(), out=out).run()
    assert summary.reason == "space exhausted", out.getvalue()
    rows = trial_rows(open_study(job, create=False))
    a, b = by_config(rows, A), by_config(rows, B)
    assert all(r.correctness.get("ok") for r in (a, b))  # the gate ran and passed
    assert set(a.levels) == {1, 4, LONG_1, LONG_4}  # every pair measured in the one launch
    plan = build_plan(rows, job.objective)
    assert [plan.at(lv).best.number for lv in (1, 4, LONG_1, LONG_4)] == [a.number, a.number, b.number, b.number]
    for level in (1, LONG_1):  # the server counted the prompts it was sent: the long ones about 1525 words
        assert (a.at(level).input_tokens or 0) > 1000 if level == LONG_1 else (a.at(level).input_tokens or 0) < 20
    # the first token waits for the context: at least the prefill the server sleeps for that prompt (~92 ms; load
    # can only add to it), and longer than on the short prompts
    prefill = PREFILL_FACTOR * A["backend.context_cost"] * a.at(LONG_1).input_tokens / 1000
    assert a.at(LONG_1).ttft.p50 >= prefill > 0.04 and a.at(LONG_1).ttft.p50 > a.at(1).ttft.p50
    broke = plan.at(LONG_1).anchor_breaches  # A (the best at 1) breaks the 1@2048 target: ~13.2 ms over 11 ms
    assert broke and broke[0].slo.name == "tpot_p99" and 0.1 < broke[0].excess < 1.0
    assert not plan.at(LONG_4).anchor_breaches and not plan.at(1).anchor_breaches  # that pair's target only
    last = "\n".join(line for line in log_lines(out.getvalue()) if line.startswith("plan: "))  # the run's last lines
    assert f"plan: at 1@2048 #{b.number} " in last and f"plan: at 4 #{a.number} " in last, last

    assert cli.main(["status", str(job_path)]) == 0
    text = capsys.readouterr().out
    assert "plan over levels 1, 4, 1@2048, 4@2048 (concurrency@context tokens)" in text, text
    assert f"#{a.number} (the best at the lowest level) breaks the SLO at 1@2048: TPOT p99 " in text
    assert cli.main(["status", str(job_path), "--json"]) == 0
    listed = {r["number"]: r for r in json.loads(capsys.readouterr().out)["trials"]}
    seen = listed[b.number]["levels"]
    assert set(seen) == {"1", "4", "1@2048", "4@2048"} and all({"p50", "p90", "p99"} <= set(rec["ttft"])
                                                               for rec in seen.values())

    assert cli.main(["export", str(job_path), "--concurrency", "4@2048", "--format", "json"]) == 0
    prov = json.loads(capsys.readouterr().out)["provenance"]
    assert prov["trial"] == b.number and prov["objective"]["level"] == "4@2048"
    assert prov["objective"]["context"] == 2048 and "4@2048" in prov["latency"]
    assert cli.main(["export", str(job_path), "--concurrency", "4@4096", "--format", "json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4@4096 is not a level of the study's objective" in err[0], err
    assert cli.main(["report", str(job_path)]) == 0
    capsys.readouterr()
    assert "1@2048" in (job.report_dir / "report.md").read_text()
    assert not list(tmp_path.rglob("servers/*.json"))  # every server it started was ended
