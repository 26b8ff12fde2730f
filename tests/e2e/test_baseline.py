"""The baseline is the job's baseline, exactly: on the motivating job (jobs/glm5-vllm-8xpcie.yaml,
vLLM backend, a Ray head that declares 8 GPUs) the baseline trial is the same on every seed
and every resume, carries no NCCL value the job did not set, and is what `validate
--commands` prints. The vLLM server is a stand-in that honours its command line
(tests/fake_vllm.py); everything else is real: Ray, the Optuna journal, the processes."""

from __future__ import annotations

import io
import logging
import shlex
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from conftest import server_processes
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.driver.run import StudyDriver
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
GLM5 = REPO / "jobs" / "glm5-vllm-8xpcie.yaml"


@pytest.fixture
def ray_8_gpus(_ray_session):
    """A real local Ray whose node declares 8 (logical) GPUs, like the motivating box."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, num_gpus=8, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    yield ray
    ray.shutdown()


def fake_vllm(directory: Path) -> Path:
    """An executable ``vllm`` that runs tests/fake_vllm.py with this interpreter."""
    exe = directory / "bin" / "vllm"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{sys.executable}\nimport runpy\n"
                   f"runpy.run_path({str(REPO / 'tests' / 'fake_vllm.py')!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def glm5_job(directory: Path, seed: int, trials: int = 5) -> Path:
    """jobs/glm5-vllm-8xpcie.yaml with its FILL-IN model path filled, the stand-in as the vllm
    command, its own study, seed and trial budget (no relaunches, no race), and a shorter
    benchmark (16 tokens, 2 repeats: what a trial measures is not what makes its config); nothing
    else changed."""
    data = yaml.safe_load(GLM5.read_text())
    model = directory / "GLM-5-AWQ"  # a Hugging Face checkpoint directory, as vLLM loads
    model.mkdir(exist_ok=True)
    data["backend"]["settings"].update(model=str(model), executable=str(fake_vllm(directory)))
    data.pop("output_dir", None)  # the study's folder is given here
    data.update(study=f"glm5-seed{seed}", report_dir=str(directory / "reports" / f"seed{seed}"),
                space=str(REPO / "search_spaces" / "vllm-pcie.yaml"),
                budget={"trials": trials, "relaunch": 0, "confirm": 0})  # the baseline, not the launch noise
    data["sampler"]["seed"] = seed
    data["bench"].update(output_tokens=16, warmup=1, repeats=2, max_repeats=2)
    path = directory / f"glm5-seed{seed}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def validate_baseline_line(job_path: Path) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["validate", str(job_path), "--commands"]) == 0
    lines = buf.getvalue().splitlines()
    return lines[lines.index("# baseline") + 1]


def baseline_trials(job):
    return [t for t in open_study(job, create=False).get_trials(deepcopy=False) if t.user_attrs.get("is_baseline")]


@pytest.mark.timeout(1200)  # three study runs: 45 s on a quiet box, 469 s beside the suite under 2 busy loops
def test_glm5_baseline_is_the_jobs_on_every_seed_and_resume(tmp_path, ray_8_gpus):
    before = {pid for pid, _ in server_processes("fake_vllm")}
    seen = {}
    for seed in (0, 1):
        job_path = glm5_job(tmp_path, seed)
        job = load_job(job_path)
        out = io.StringIO()
        StudyDriver(job, out=out).run()
        rows = trial_rows(open_study(job, create=False))
        assert len([r for r in rows if r.counted]) == 5, out.getvalue()
        assert not [r for r in rows if r.skipped], "an infeasible TP x PP layout was proposed"
        (base,) = baseline_trials(job)
        assert base.user_attrs["outcome"] == "COMPLETE" and base.value > 0, out.getvalue()
        config = base.user_attrs["config"]
        assert {k: config[k] for k in ("tp_size", "pp_size", "graph_capture")} == {
            "tp_size": 8, "pp_size": 1, "graph_capture": False}
        assert not [k for k in (*config, *base.params) if k.startswith("env.")]  # NCCL: its own defaults
        server = base.user_attrs["server"]
        nccl_env = {k: v for k, v in server["env"].items() if k.startswith("NCCL_")}
        assert nccl_env == {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}

        # validate --commands prints exactly what ran (the port aside)
        words = shlex.split(validate_baseline_line(job_path))
        env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-") and "/" not in w.split("=")[0])
        argv = words[len(env):]
        ran = list(server["argv"])
        ran[ran.index("--port") + 1] = "8000"
        assert argv == ran and env == server["env"]
        seen[seed] = (base.params, config, server["env"], argv)

    assert seen[0] == seen[1]  # identical on both seeds: nothing about the baseline was sampled

    # a resume continues the study: the baseline is not measured again, no second "[baseline]"
    job = load_job(glm5_job(tmp_path, 0, trials=6))
    StudyDriver(job, out=io.StringIO()).run()
    rows = trial_rows(open_study(job, create=False))
    assert len([r for r in rows if r.counted]) == 6
    assert len(baseline_trials(job)) == 1
    assert not [(p, c) for p, c in server_processes("fake_vllm") if p not in before]
