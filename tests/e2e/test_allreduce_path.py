"""The all-reduce path a trial asked for against the one the engine took, in a real study: vLLM
(the stand-in that logs vLLM 0.33.0's own all-reduce lines for a PCIe-only box,
tests/fake_vllm.py) turns its custom all-reduce off above two GPUs and only logs it; every such
trial records the warning, and the run prints it once per study, not once per trial nor again
when the study is resumed; the export carries vLLM's line and what ran instead. Real: the driver,
the journal, the server processes."""

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
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
REPO = Path(__file__).resolve().parents[2]
CUSTOM_OFF = ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
              "this warning, specify disable_custom_all_reduce=True explicitly.")
SAID = ("all-reduce path: allreduce.backend=custom was requested but vLLM 0.33.0 did not enable it for the "
        "tensor-parallel group (its all-reduce backends: PYNCCL); vLLM said: Custom allreduce is disabled because "
        "it's not supported on more than two PCIe-only GPUs.")


def job_file(tmp_path: Path, trials: int) -> Path:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{sys.executable}\nimport runpy\n"
                   f"runpy.run_path({str(REPO / 'tests' / 'fake_vllm.py')!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({"params": {
        "tp_size": {"choices": [2, 4, 6, 8]}, "allreduce.backend": {"choices": ["custom"]}}}))
    job = {"study": "ar", "report_dir": str(tmp_path / "reports"), "space": "space.yaml", "gpus_per_node": 0,
           "backend": {"kind": "vllm", "settings": {"model": str(tmp_path / "model"), "served_model_name": "m",
                                                    "executable": str(exe), "version": "0.33.0"}},
           "baseline": {"tp_size": 2, "allreduce.backend": "custom"}, "budget": {"trials": trials},
           "sampler": {"name": "tpe", "seed": 0},
           "bench": {"prompt": "The quick brown fox", "output_tokens": 8, "warmup": 1, "repeats": 2, "max_repeats": 2},
           "timeouts": {"startup": "60s", "bench": "60s", "teardown": "5s"},
           "correctness": {"check_tokens": 6, "prompts": ["Once upon a time"]}, "pruning": {"enabled": False}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def run(job) -> str:
    executor = InProcessExecutor()
    out = io.StringIO()
    try:
        StudyDriver(job, executor=executor, out=out).run()
    finally:
        executor.shutdown()
    return out.getvalue()


def test_a_silently_disabled_path_is_warned_once_per_study(tmp_path):
    before = {pid for pid, _ in server_processes("fake_vllm")}
    first = run(load_job(job_file(tmp_path, trials=3)))
    job = load_job(job_file(tmp_path, trials=4))
    rows = {r.params["tp_size"]: r for r in trial_rows(open_study(job, create=False)) if r.counted}
    assert len(rows) == 3 and 2 in rows, first
    assert [w for w in rows[2].warnings if w.startswith("all-reduce path:")] == []  # TP 2: vLLM kept it
    for tp, row in rows.items():
        if tp > 2:
            assert any(w.startswith(SAID) for w in row.warnings), row.warnings  # each trial keeps its record
    assert first.count("all-reduce path:") == 1 and SAID in first  # said once, though two trials met it

    second = run(job)  # the resumed study meets it again on its last TP size: nothing new to say
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert len(rows) == 4 and all(any(w.startswith(SAID) for w in r.warnings) for r in rows
                                  if r.params["tp_size"] > 2)
    assert "all-reduce path:" not in second
    assert not [(p, c) for p, c in server_processes("fake_vllm") if p not in before]

    # the deploy artifact says it too: each exported config above two GPUs carries vLLM's line as an
    # engine notice, and what ran instead of the custom path (its header, its documents)
    all_rows = trial_rows(open_study(job, create=False))
    docs = json.loads(export(job, all_rows, "json", top=4))
    assert sorted(d["config"]["tp_size"] for d in docs) == [2, 4, 6, 8]
    for doc in docs:
        prov = doc["provenance"]
        if doc["config"]["tp_size"] == 2:
            assert prov["engine_notices"] == [] and prov["engine_fallbacks"] == []
            continue
        assert prov["engine_notices"] == [CUSTOM_OFF]
        assert [f["text"] for f in prov["engine_fallbacks"]] == [f"allreduce.backend=custom (the engine ran nccl: "
                                                                 f"{CUSTOM_OFF})"]
    above_two = next(d["rank"] for d in docs if d["config"]["tp_size"] > 2)
    block = export(job, all_rows, "cmd", top=4).split(f"# ===== {above_two} of 4:")[1].split("# =====")[0]
    assert f"# engine notice: {CUSTOM_OFF}\n" in block
    assert f"# engine fallback: allreduce.backend=custom (the engine ran nccl: {CUSTOM_OFF})\n" in block
