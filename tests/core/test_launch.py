"""How a server is started (core/launch.py): its environment is NCCL's start-up logging (a
trial's server only), under the job's ``env:``, under the config's own variables; the shell
line a user copies runs the very argv and environment (run by a real shell); the watch rules
a backend declares compile to the patterns the tree watch matches."""

from __future__ import annotations

import json
import subprocess
import sys

from orchestrator.core import nccl
from orchestrator.core.launch import TRANSIENT_PROCESSES, LaunchSpec, WatchRules, server_environment


def test_the_configs_variables_win_over_the_jobs_and_the_jobs_over_ncclss_logging():
    job_env = {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": 4}
    launch_env = {"NCCL_PROTO": "LL", "OMP_NUM_THREADS": "1"}
    trial = server_environment(job_env, launch_env, instrumented=True)
    assert trial == {**nccl.debug_env(), "NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "1", "NCCL_PROTO": "LL"}
    assert trial["NCCL_DEBUG_SUBSYS"] == nccl.debug_env()["NCCL_DEBUG_SUBSYS"]  # the trial verifies what NCCL took
    plain = server_environment(job_env, launch_env, instrumented=False)  # what export prints for a user
    assert plain == {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "1", "NCCL_PROTO": "LL"}
    assert all(isinstance(v, str) for v in trial.values())


def test_the_shell_line_runs_the_argv_with_the_environment(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import json, os, sys\n"
                     "print(json.dumps({'argv': sys.argv[1:], 'proto': os.environ.get('NCCL_PROTO'),"
                     " 'odd': os.environ.get('ODD')}))\n")
    spec = LaunchSpec(argv=[sys.executable, str(probe), "--served-model-name", "my model", "--chat", "{'a': 1}"],
                      env={"NCCL_PROTO": "LL", "ODD": "it's $HOME \"quoted\""}, port=8123)
    done = subprocess.run(["bash", "-c", spec.shell_line()], capture_output=True, text=True, check=True, timeout=60)
    got = json.loads(done.stdout)
    assert got == {"argv": ["--served-model-name", "my model", "--chat", "{'a': 1}"], "proto": "LL",
                   "odd": "it's $HOME \"quoted\""}
    assert spec.base_url == "http://127.0.0.1:8123"
    assert LaunchSpec(argv=["srv", "--port", "1"]).shell_line() == "srv --port 1"  # no env: no leading space


def test_watch_rules_compile_to_one_pattern_each():
    rules = WatchRules(fatal_log_patterns=(r"WorkerProc hit an exception", r"EngineCore failed to start"),
                       essential_processes=(r"VLLM::Worker",))
    fatal = rules.fatal_regex()
    assert fatal.search("(Worker_TP1 pid=3006) ERROR [x.py:1] WorkerProc hit an exception.")
    assert fatal.search("RuntimeError: EngineCore failed to start.") and not fatal.search("INFO ready")
    assert rules.essential_regex().search("VLLM::Worker_TP0") and not rules.essential_regex().search("python -c x")
    transient = rules.transient_regex()  # the defaults: what may come and go in any tree
    assert transient.search("python -m torch/_inductor/compile_worker") and len(TRANSIENT_PROCESSES) == 2
    assert WatchRules().fatal_regex() is None and WatchRules().essential_regex() is None
    assert WatchRules(transient_processes=()).transient_regex() is None
