"""The command line as a user meets it: one-line errors with exit code 2 for bad input,
nothing written, and `validate --commands` printing runnable lines."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS, write_job
from orchestrator.cli import main, parse_also
from orchestrator.core.errors import BadInput

REPO = Path(__file__).resolve().parents[1]


def ncclsweep(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *argv], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=120)


BAD_JOBS = [
    # (job overrides, space text or None, what the one line must mention)
    ({"sutdy": "x"}, None, "did you mean 'study'"),
    ({"gpus_per_node": "two"}, None, "gpus_per_node"),
    ({"env": {"NCCL_PROTO": "LL129"}}, None, "NCCL_PROTO"),
    ({}, "params:\n  tp_size: {choices: []}\n", "tp_size"),
    ({"gpus_per_node": 1}, "params:\n  tp_size: {choices: [1, 2]}\n", "gpus_per_node"),
    ({"space": "missing.yaml"}, None, "missing.yaml"),
    ({"budget": {"trials": 3, "timeout": "soon"}}, None, "budget.timeout"),
    ({"sampler": {"name": "magic"}}, None, "sampler.name"),
    ({"backend": {"kind": "tgi", "settings": {}}}, None, "backend.kind"),
    ({"backend": {"kind": "refserver", "settings": {"model": "70b"}}}, None, "backend.settings.model"),
    ({}, "params:\n  tp_size: {choices: [1, 2]}\n  env.NCCL_PROTO: {choices: [LL128]}\n", "allow_unsafe_nccl"),
    ({}, "params:\n  tp_size: {choices: [1, 2]}\nconstraints:\n  - 'tp_size <= nodes'\n", "nodes"),
    ({"baseline": {"tp_size": 4}}, None, "baseline"),
    ({}, "params:\n  graph_capture: {choices: [false, true]}\n", "graph_capture"),
]


@pytest.mark.parametrize("overrides,space,needle", BAD_JOBS)
def test_bad_job_exits_2_with_one_line_and_writes_nothing(tmp_path, overrides, space, needle):
    job = write_job(tmp_path, space_text=space, **overrides)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for command in (["validate", str(job)], ["run", str(job)]):
        res = ncclsweep(*command)
        assert res.returncode == 2, (command, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], res.stderr
        assert "Traceback" not in res.stderr
        assert ".yaml: " in lines[0]  # names the file (job or space), then the key path
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_missing_job_file_and_bad_flags_exit_2(tmp_path):
    res = ncclsweep("run", str(tmp_path / "nope.yaml"))
    assert res.returncode == 2 and "nope.yaml" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    job = write_job(tmp_path)
    res = ncclsweep("run", str(job), "--timeout", "eight hours")
    assert res.returncode == 2 and "--timeout" in res.stderr
    res = ncclsweep("export", str(job), "--format", "toml")
    assert res.returncode == 2 and "toml" in res.stderr
    res = ncclsweep("bench", str(job), "--set", "tp_size")
    assert res.returncode == 2 and "KEY=VALUE" in res.stderr


def test_debug_shows_the_traceback(tmp_path):
    res = ncclsweep("--debug", "validate", str(tmp_path / "nope.yaml"))
    assert res.returncode == 2 and "Traceback" in res.stderr


def test_status_before_any_run_says_what_to_do(tmp_path):
    job = write_job(tmp_path)
    res = ncclsweep("status", str(job))
    assert res.returncode == 1 and "ncclsweep run" in res.stderr
    assert not (tmp_path / "reports").exists()


def test_validate_commands_prints_runnable_shell_lines():
    res = ncclsweep("validate", "jobs/demo.yaml", "--commands")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln and not ln.startswith("#")][1:]
    assert len(lines) >= 3
    for line in lines:
        argv = shlex.split(line)
        assert "orchestrator.refserver" in argv and "--tp" in argv and "--port" in argv


# ---- conventions (issue 17) ----------------------------------------------------------------

def test_debug_before_or_after_the_command_version_and_bare_help(tmp_path):
    for argv in (["--debug", "validate", str(tmp_path / "nope.yaml")], ["validate", str(tmp_path / "nope.yaml"),
                                                                        "--debug"]):
        res = ncclsweep(*argv)
        assert res.returncode == 2 and "Traceback" in res.stderr, argv
    res = ncclsweep("--version")
    assert res.returncode == 0 and res.stdout.startswith("ncclsweep ") and res.stdout.split()[1][0].isdigit()
    bare = ncclsweep()
    assert bare.returncode == 2 and "usage: ncclsweep" in bare.stderr and "validate" in bare.stderr
    helped = ncclsweep("--help")
    assert helped.returncode == 0 and "Unattended tuning" in helped.stdout
    assert "the only place that prints errors" not in helped.stdout  # not an internal docstring
    assert "ncclsweep report JOB.yaml" in helped.stdout  # what to run, in order


def test_flag_errors_name_the_command_once(tmp_path):
    job = write_job(tmp_path)
    res = ncclsweep("export", str(job), "--format", "toml")
    line = res.stderr.strip()
    assert res.returncode == 2 and line.startswith("ncclsweep: error: export: ") and line.count("ncclsweep") == 1


def test_study_named_dot_dot_is_refused_at_validate(tmp_path):
    for name in ("..", "."):
        job = write_job(tmp_path, study=name)
        res = ncclsweep("validate", str(job))
        assert res.returncode == 2, res.stdout
        assert len(res.stderr.strip().splitlines()) == 1 and "study" in res.stderr and repr(name) in res.stderr


def test_status_and_report_from_another_directory_find_the_same_study(tmp_path):
    """The output folder is anchored at the job file: status from elsewhere reads the same
    study; a failed status/report (no study yet) creates no folder."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    job = write_job(jobs, study="anchored", report_dir=None)  # default: reports/ next to the job file
    for command in ("status", "report"):
        res = ncclsweep(command, str(job), cwd=tmp_path)
        assert res.returncode == 1 and "ncclsweep run" in res.stderr, res.stderr
    assert not (jobs / "reports").exists() and not (tmp_path / "reports").exists()
    from orchestrator.config.job import load_job
    from orchestrator.study.storage.storage import open_study

    open_study(load_job(job))  # the study exists now (no trials)
    assert (jobs / "reports" / "anchored" / "study.journal").exists()
    for cwd in (tmp_path, jobs, REPO):
        res = ncclsweep("status", str(job), cwd=cwd)
        assert res.returncode == 0, (cwd, res.stderr)


SET_REFUSED = [
    ("tp=2", "did you mean 'tp_size'"),
    ("foo=1", "unknown parameter 'foo'"),
    ("tp_size=two", "'two' is not in the space"),
    ("tp_size=4", "allowed: one of 1, 2"),
    ("env.NCCL_PROTO=LL128", "allow_unsafe_nccl"),
    ("env.NCCL_PROTO=LL129", "not a known value"),
]


@pytest.mark.parametrize("pair,needle", SET_REFUSED)
def test_bench_set_is_checked_like_the_space(tmp_path, pair, needle):
    job = write_job(tmp_path, study="b")
    res = ncclsweep("bench", str(job), "--set", pair)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and f"--set {pair}" in lines[0], res.stderr
    assert not (tmp_path / "reports").exists()  # nothing launched, nothing written


def test_prescreen_of_a_gpu_job_without_cuda_is_refused_at_once(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")

    res = ncclsweep("prescreen", "jobs/h200-refserver-1b.yaml")
    assert res.returncode == 2, res.stderr  # refused before any probe (it used to spend ~50 s and exit 0)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "h200-refserver-1b.yaml" in lines[0]


def test_also_parsing(capsys):
    assert parse_also(None) is None and parse_also("ties") == "ties" and parse_also("4, 6") == [4, 6]
    with pytest.raises(BadInput, match="comma-separated trial numbers or 'ties'"):
        parse_also("best")
    assert main(["compare", str(TESTS.parent / "jobs" / "demo.yaml"), "--also", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--also takes comma-separated trial numbers or 'ties', not 'x'" in err[0]


@pytest.mark.parametrize("job", sorted(p.name for p in (REPO / "jobs").glob("*.yaml")))
def test_every_shipped_job_validates(job, capsys):
    # the examples the README and the guide point at: a user's first `validate` of one is exit 0
    assert main(["validate", str(REPO / "jobs" / job)]) == 0, capsys.readouterr().err
    assert f"jobs/{job}: ok" in capsys.readouterr().out


def test_validate_refuses_a_sampler_whose_package_is_missing_with_the_line_run_gives(tmp_path):
    """`sampler: {name: gp}` on a machine without scipy: `validate` says what `run` says (exit 2,
    one line), not "ok". scipy is made absent in the child process (None in sys.modules: not
    installed, as far as an import or a package lookup can tell)."""
    job = write_job(tmp_path, sampler={"name": "gp", "seed": 0})

    def cli(*argv: str) -> subprocess.CompletedProcess:
        code = ("import sys; sys.modules['scipy'] = None\n"
                "from orchestrator.cli import main\n"
                f"sys.exit(main({list(argv)!r}))")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    validate, run = cli("validate", str(job)), cli("run", str(job))
    assert validate.returncode == run.returncode == 2, (validate.stderr, run.stderr)
    assert validate.stderr == run.stderr == (f"ncclsweep: error: {job}: sampler: the gp sampler needs scipy (pip "
                                             "install scipy); or use sampler model\n")
    assert not validate.stdout and not (tmp_path / "reports").exists()  # no "ok", nothing created


SHELL_OPERATORS = {">", ">>", "|", "2>&1", "&&", ";", "&"}


def _doc_commands(text: str) -> list[list[str]]:
    """Every `ncclsweep ...` command in ``text``'s code blocks and inline code (comments and
    what the shell does with its output cut)."""
    lines = [ln for block in re.findall(r"```(?:bash)?\n(.*?)```", text, re.S) for ln in block.splitlines()]
    lines += [inline for inline in re.findall(r"`(ncclsweep [^`]+)`", text)
              if "JOB" not in inline and "..." not in inline and "[" not in inline]
    found = []
    for line in lines:
        words = shlex.split(line.split("  #")[0].split(" # ")[0])
        while "ncclsweep" in words:
            words = words[words.index("ncclsweep"):]
            end = next((i for i, w in enumerate(words) if w in SHELL_OPERATORS), len(words))
            found.append(words[:end])
            words = words[end:]
    return found


def test_the_commands_the_quickstart_and_the_cpu_path_name_are_commands_of_this_cli():
    """Issue 39, item 9: what the README's Quickstart and the guide's path without GPUs tell a
    new user to type parses as the CLI parses it, and names a job that is there."""
    from orchestrator.cli import build_parser

    readme = (REPO / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    guide = (REPO / "docs" / "guide.md").read_text()
    cpu_path = guide.split("## 6. Trying it without GPUs", 1)[1].split("\n## ", 1)[0]
    commands = _doc_commands(quickstart) + _doc_commands(cpu_path)
    named = {tuple(argv[1:3]) for argv in commands}
    assert {("run", "jobs/demo.yaml"), ("run", "jobs/demo-plan.yaml"), ("compare", "jobs/demo-plan.yaml"),
            ("export", "jobs/demo-plan.yaml")} <= named, named
    for argv in commands:
        args = build_parser().parse_args(argv[1:])
        assert (REPO / args.job).is_file(), argv
