"""The ``ncclsweep`` command line: the only place that prints errors and picks exit codes.

Exit codes: 0 success, 1 runtime failure, 2 bad input (job, space, flags), 130 stopped
by a signal (Ctrl-C, SIGTERM, SIGHUP). Errors are one line; ``--debug`` (before or after
the command) adds the traceback. Logging is configured here and nowhere else
(``orchestrator.core.logs``): progress and warnings to stderr, and for ``run`` to the study's
``driver.log`` as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import traceback
from typing import Any

from orchestrator.core.errors import BadInput, NcclsweepError, StorageWriteError

DESCRIPTION = ("Unattended tuning of LLM inference servers (vLLM, SGLang, any command, or the embedded "
               "reference server): NCCL variables, tensor-parallel size, CUDA graphs and server flags, "
               "one relaunch per trial, decode tok/s as the objective, outputs checked for correctness.")
EPILOG = """\
a night, start to end:
  ncclsweep validate JOB.yaml      check the job and its space (writes nothing)
  ncclsweep doctor JOB.yaml        pre-flight: GPUs, topology, versions
  ncclsweep run JOB.yaml           create or resume the study (Ctrl-C: stop after the trial)
  ncclsweep status JOB.yaml        every trial so far
  ncclsweep report JOB.yaml        report.md / report.html beside the study
  ncclsweep compare JOB.yaml       baseline vs best at several concurrencies
  ncclsweep export JOB.yaml        the best config, ready to deploy: environment and launch
                                   command as a sh script (--format env|yaml|json|nccl-tuner)
                                   (a plan: --concurrency N for the best at N, --mix)

exit codes: 0 success, 1 runtime failure, 2 bad input, 130 stopped by a signal.
docs/guide.md walks through tuning your own server."""


JSON_HELP = ("print one JSON record on stdout, its `schema` key versioned (docs/guide.md, \"Machine-readable "
             "output\"); an error is a record too, with the exit code")


class _Parser(argparse.ArgumentParser):
    """argparse that raises BadInput (exit 2, one line) instead of printing usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        raise BadInput(f"{command}: {message}" if command else message)


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        import orchestrator

        print(f"ncclsweep {orchestrator.__version__}")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ncclsweep", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    p.add_argument("--version", action=_Version, help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help_text, description=help_text)
        # accepted after the command too; SUPPRESS keeps a --debug given before it
        s.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        return s

    s = command("validate", "validate a job and its space; writes nothing")
    s.add_argument("job")
    s.add_argument("--commands", action="store_true",
                   help="print the env and argv of a few sampled configs and of each param value")
    s.add_argument("--json", action="store_true", help=JSON_HELP)

    s = command("run", "create or resume the job's study")
    s.add_argument("job")
    s.add_argument("--trials", type=int, help="total trials the study should have launched")
    s.add_argument("--timeout", help="wall-clock limit for this invocation, e.g. 8h, 30m")
    s.add_argument("--ray-address", help="connect to an existing Ray cluster (default: a fresh local Ray)")
    s.add_argument("--notify", metavar="CMD", help="run CMD once when the run ends, fails or is stopped, its summary "
                   "as JSON on stdin and in NCCLSWEEP_* variables (no shell unless CMD names one; overrides the "
                   "job's notify:)")
    s.add_argument("--json", action="store_true", help="at the end, the run's last lines as one JSON record on "
                   "stdout (progress stays on stderr); " + JSON_HELP.split("; ", 1)[1])

    s = command("status", "one record per trial")
    s.add_argument("job")
    s.add_argument("--json", action="store_true", help=JSON_HELP)

    s = command("export", "export the best configuration(s)")
    s.add_argument("job")
    s.add_argument("--format", default="cmd", choices=["env", "yaml", "json", "cmd", "nccl-tuner",
                                                        "benchmark-report"],
                   help="cmd (the default): the deploy artifact, a sh script of the environment and the launch "
                        "command; env: its environment half; yaml, json: the config with its provenance; "
                        "nccl-tuner: NCCL tuner rules; benchmark-report: llm-d Benchmark Reports (v0.2.1), one per "
                        "config and level (the baseline, the best, each --trial), a YAML file each in the -o folder")
    s.add_argument("--top", type=int, default=1)
    s.add_argument("--trial", type=int, action="append", default=[], metavar="N",
                   help="benchmark-report: trial N's config too (repeat for more)")
    which = s.add_mutually_exclusive_group()
    which.add_argument("--concurrency", metavar="N[@CONTEXT]",
                       help="the best at level N of the job's objective (objective.concurrency); with a context "
                            "axis (objective.context) N@CONTEXT, e.g. 64@8192 (N alone: context 0)")
    which.add_argument("--mix", action="store_true", help="the best for the job's traffic mix (objective.weights)")
    s.add_argument("-o", "--output", help="write to this file instead of stdout")
    s.add_argument("--host", default="0.0.0.0", help="the address the exported server listens on (cmd; default "
                   "0.0.0.0: every network interface of the machine)")
    s.add_argument("--port", type=int, default=8000, help="the port the exported server listens on (cmd; "
                   "default 8000)")
    s.add_argument("--json", action="store_true", help="the artifact and what it exports as one JSON record; "
                   + JSON_HELP.split("; ", 1)[1])

    s = command("report", "write the study's report (markdown, html, csv, plots) into its folder")
    s.add_argument("job")
    s.add_argument("--trial", type=int, action="append", default=[], metavar="N",
                   help="a study by request rate: trial N's curve too, beside the baseline's and the best's "
                        "(repeat for more)")

    s = command("compare", "baseline vs best (and --also trials) at several concurrencies, interleaved")
    s.add_argument("job")
    s.add_argument("--concurrency", help="comma-separated, e.g. 1,2,10,64")
    s.add_argument("--rounds", type=int, help="rounds of interleaved launches (baseline, best, --also trials); "
                   "default 5: the per-round ratios give the confidence interval a verdict needs")
    s.add_argument("--also", metavar="TRIALS", help="more trials measured in every round: comma-separated "
                   "numbers, or 'ties' (the runners-up within the noise of the best)")
    s.add_argument("--plan", action="store_true", help="the plan's configs (the best at each level of the "
                   "objective, the mix's) and the baseline, interleaved, at every level as a trial measures them")
    s.add_argument("--json", action="store_true", help="the rounds' figures and verdicts as one JSON record "
                   "(progress on stderr); " + JSON_HELP.split("; ", 1)[1])

    s = command("bench", "measure one configuration once, no study")
    s.add_argument("job")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a param of the space, e.g. tp_size=2 (checked like the space)")
    s.add_argument("--config", help="a config file (an export in yaml/json, or a mapping of params)")
    s.add_argument("--verify-nccl", action="store_true",
                   help="a verification launch: NCCL_DEBUG_SUBSYS adds TUNING, and the algorithm/protocol "
                        "NCCL chose per all-reduce size is printed (not for timing: TUNING logs every call)")
    s.add_argument("--json", action="store_true", help=JSON_HELP)

    s = command("prescreen", "all-reduce latency per NCCL setting of the space, before any launch")
    s.add_argument("job")
    s.add_argument("--iters", type=int, default=400, help="all-reduces timed per setting")

    s = command("cleanup", "end servers a dead driver left behind")
    s.add_argument("job")

    s = command("doctor", "pre-flight checks: GPUs, topology, P2P, versions")
    s.add_argument("job", nargs="?")
    s.add_argument("--json", action="store_true", help=JSON_HELP)

    s = command("simulate", "replay recorded measurements to compare search strategies")
    try:
        from orchestrator.study.simulation.simulate import add_simulate_args

        add_simulate_args(s)
    except ImportError:  # pragma: no cover - module missing
        s.add_argument("table")
    return p


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _signals_like_ctrl_c() -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C: ``finally`` blocks end servers and release locks
    (a study installs its own graceful handling while its trials run)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, _interrupt)
        except (ValueError, OSError):  # not the main thread
            pass


def main(argv: list[str] | None = None) -> int:
    from orchestrator.core import logs

    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    as_json = _json_command(argv)  # the command whose error is a JSON record too (None: not asked)
    state = logs.configure(debug)
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    _signals_like_ctrl_c()
    parser = build_parser()
    stdout, sys.stdout = sys.stdout, _Output(sys.stdout)
    try:
        if not [a for a in argv if a != "--debug"]:
            parser.print_help(sys.stderr)  # no command: a usage error, so exit 2 (--help: stdout, 0)
            return 2
        args = parser.parse_args(argv)
        if args.command is None:
            raise BadInput("a command is required (see ncclsweep --help)")
        args.logging = state
        code = int(_COMMANDS[args.command](args) or 0)
        sys.stdout.flush()  # a full disk under `status --json > FILE` is said here, not at exit
        return code
    except NcclsweepError as exc:
        if isinstance(exc, _OutputFailed):
            _drop_output(stdout)
        if debug:
            traceback.print_exc()
        _say_error(state, f"ncclsweep: error: {exc}")
        if not isinstance(exc, _OutputFailed):
            _say_json_error(as_json, f"{exc}", exc.exit_code)
        return exc.exit_code
    except KeyboardInterrupt:
        _say_error(state, "ncclsweep: interrupted")
        _say_json_error(as_json, "interrupted", 130)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        _drop_output(stdout)
        return 0
    except Exception as exc:  # noqa: BLE001 - last resort: one line, traceback only with --debug
        if debug:
            traceback.print_exc()
        _say_error(state, f"ncclsweep: internal error: {type(exc).__name__}: {exc} "
                          "(rerun with --debug for the traceback)")
        _say_json_error(as_json, f"internal error: {type(exc).__name__}: {exc}", 1)
        return 1
    finally:
        sys.stdout = stdout
        state.close()
        for sig, handler in old.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError, TypeError):
                pass


class _OutputFailed(StorageWriteError):
    """Standard output refused a write (``status --json > FILE`` on a full disk)."""


def _output_failure(exc: OSError) -> _OutputFailed:
    """The one line for a refused write to standard output, naming its file where it is one."""
    import os

    try:
        target = os.readlink(f"/proc/self/fd/{sys.__stdout__.fileno()}") if sys.__stdout__ else ""
    except (OSError, ValueError):
        target = ""
    folder, name = (os.path.dirname(target), os.path.basename(target)) if target.startswith("/") else \
        ("standard output", None)
    return _OutputFailed(folder, exc, name=name)


class _Output:
    """``sys.stdout`` while a command runs: a write or flush the file system refuses is the one
    line every refused write gives (``StorageWriteError``), not an internal error; a closed pipe
    stays ``BrokenPipeError`` (not an error: ``| head``)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _output_failure(exc) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _output_failure(exc) from exc

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _drop_output(stream) -> None:
    """What is left in standard output's buffer goes nowhere: the interpreter's exit would try
    the write again and print a second error."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _json_command(argv: list[str]) -> str | None:
    """The command of ``argv`` when it asks for ``--json`` and has a record (``core.json_schemas``)."""
    from orchestrator.core.json_schemas import COMMANDS

    words = [a for a in argv if not a.startswith("-")]
    return words[0] if words and words[0] in COMMANDS and "--json" in argv else None


def _say_json_error(command: str | None, message: str, code: int) -> None:
    """Under ``--json``, the error as its record on stdout too (``core.json_schemas.error``)."""
    if command is None:
        return
    from orchestrator.core.json_schemas import error

    try:
        print(json.dumps(error(command, message, code)), flush=True)
    except Exception:  # noqa: BLE001 - stdout is gone: the line on stderr is all there is
        pass


def _say_error(state, line: str) -> None:
    """The one error line: stderr (if it is still there) and the run's driver.log."""
    state.error_line(line)
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):  # the terminal is gone (SIGHUP)
        pass


# ---- commands ----------------------------------------------------------------------------

def _load(path: str):
    from orchestrator.config.job import load_job

    return load_job(path)


def cmd_validate(args) -> int:
    from orchestrator.config.job_checks import check_sampler_installed

    job = _load(args.job)
    check_sampler_installed(job)  # what `run` refuses before it starts, with the same line
    backend = job.backend_obj()
    size = job.space.size()
    if args.json:
        return _validate_json(args, job, backend, size)
    print(f"{args.job}: ok — study {job.study!r}, backend {job.backend.kind}, "
          f"{len(job.space.params)} params, {size if size is not None else 'unbounded'} configs, "
          f"storage {job.storage}")
    for advice in job.advice:  # valid, but likely not meant (run says it again before it launches anything)
        print(f"{args.job}: warning: {advice}", file=sys.stderr)
    from orchestrator.study.storage import objective as objectives

    if job.objective.preset or job.slo or job.objective.by_capacity:  # what the study will tune for
        print(objectives.expansion(job.objective) or f"objective: {objectives.describe(job.objective)}")
    if job.bench.traffic is not None:
        print(f"traffic: {job.bench.prompts_from}")
    if args.commands:
        from orchestrator.core.launch import server_environment

        for label, config in sample_configs(job, backend, 4):
            spec = backend.launch_spec(config, "127.0.0.1", 8000)
            print(f"# {label}")  # the environment every trial server gets: NCCL logging, the job's env:, the config's
            print(dataclasses.replace(spec, env=server_environment(job.env, spec.env, instrumented=True)).shell_line())
    return 0


def _emit(command: str, **fields: Any) -> None:
    """``command``'s JSON record on stdout (``core.json_schemas.record``)."""
    from orchestrator.core.json_schemas import record

    print(json.dumps(record(command, **fields), indent=2, default=str))


def _validate_json(args, job, backend, size) -> int:
    """``validate --json``: the job's record (its warnings on stderr too)."""
    from orchestrator.study.storage import objective as objectives

    for advice in job.advice:
        print(f"{args.job}: warning: {advice}", file=sys.stderr)
    commands = None
    if args.commands:
        from orchestrator.core.launch import server_environment

        commands = []
        for label, config in sample_configs(job, backend, 4):
            spec = backend.launch_spec(config, "127.0.0.1", 8000)
            env = server_environment(job.env, spec.env, instrumented=True)
            commands.append({"label": label, "config": config, "env": env, "argv": list(spec.argv),
                             "line": dataclasses.replace(spec, env=env).shell_line()})
    _emit("validate", job=args.job, ok=True, study=job.study, backend=job.backend.kind,
          params=[p.name for p in job.space.params], configs=size, storage=str(job.storage),
          objective=objectives.expansion(job.objective) or objectives.describe(job.objective),
          traffic=str(job.bench.prompts_from) if job.bench.traffic is not None else None,
          warnings=list(job.advice), commands=commands)
    return 0


def sample_configs(job, backend, n: int) -> list[tuple[str, dict]]:
    """The baseline, then a few distinct configs of the space (seeded, reproducible), then as
    many more as it takes for every value of every parameter to be spelled once."""
    import random

    baseline = job.baseline_config()  # exactly what every run launches as the baseline
    out = [("baseline", baseline)]
    configs = job.space.enumerate() or []
    rng = random.Random(0)
    rng.shuffle(configs)
    seen = {json.dumps(baseline, sort_keys=True, default=str)}
    fulls = [backend.normalize({**backend.default_config(), **config}) for config in configs]
    wanted = {(k, json.dumps(v, default=str)) for config in configs for k, v in config.items()}

    def pairs(full: dict) -> set:
        return {(k, json.dumps(v, default=str)) for k, v in full.items()} & wanted

    shown: set = set()
    for full in fulls:
        key = json.dumps(full, sort_keys=True, default=str)
        if key not in seen and (len(out) <= n or pairs(full) - shown):
            seen.add(key)
            shown |= pairs(full)
            out.append((f"sample {len(out)}", full))
    return out


def cmd_run(args) -> int:
    from orchestrator.config.job import notify_command
    from orchestrator.core.durations import parse_duration
    from orchestrator.driver.notify import run_notified
    from orchestrator.driver.run import StudyDriver
    from orchestrator.study.storage.storage import route_optuna_logs

    job = _load(args.job)
    if args.trials is not None and args.trials < 1:
        raise BadInput(f"--trials must be >= 1, not {args.trials}")
    timeout = parse_duration(args.timeout, key="--timeout") if args.timeout else None
    notify = notify_command(args.notify, file=None, key="--notify") if args.notify is not None else job.notify
    driver = StudyDriver(job, trials=args.trials, timeout_s=timeout, ray_address=args.ray_address)
    args.logging.log_to_file(job.dir.driver_log)
    route_optuna_logs()  # Optuna's warnings through our handlers: driver.log too
    summary = run_notified(driver, notify)
    if args.json:
        _run_json(job, driver, summary)
    return 130 if summary.interrupted else 0


def _run_json(job, driver, summary) -> None:
    """``run --json``: how the run ended (``driver.notify.ending``: the record a notify command gets),
    its last lines, the best, the plan."""
    from orchestrator.config.yaml_input import display_path
    from orchestrator.core.json_schemas import best
    from orchestrator.study.storage import objective as objectives

    counted = driver.counted()
    rows = driver.policy.rows() if driver.policy is not None else None
    lines = driver.progress.next_steps(summary, rows)
    answer = [driver.progress.final_line(summary, counted or 0), *(ln for ln in lines if not ln.startswith("next:"))]
    said = summary.best or {}
    level = objectives.levels(job.objective)[0]
    export = None
    if said:
        export = (f"ncclsweep export {job.path} --concurrency N --format cmd" if said.get("plan")
                  else f"ncclsweep export {job.path} --format cmd")
    _emit("run", status="stopped" if summary.interrupted else "finished", reason=summary.reason,
          exit_code=130 if summary.interrupted else 0, job=str(job.path), study=job.study,
          results=display_path(job.report_dir), trials_counted=counted, launched=summary.launched,
          relaunched=summary.relaunched, answer=answer, best=best(summary.best, objectives.unit(level)),
          plan=said.get("plan"), goodput=said.get("goodput"),
          next=[ln.split("`")[1] for ln in lines if ln.startswith("next:") and ln.count("`") >= 2], export=export)


def cmd_status(args) -> int:
    from orchestrator.study.evidence.history import format_status, trial_rows
    from orchestrator.study.storage.storage import open_study

    job = _load(args.job)
    rows = trial_rows(open_study(job, create=False))
    orphaned = _orphaned_trials(job, rows)
    if args.json:
        _status_json(args, job, rows, orphaned)
        if orphaned:
            print(orphaned, file=sys.stderr)
        return 0
    from orchestrator.study.evidence.launches import load_note
    from orchestrator.study.evidence.plan import build_plan, format_plan, format_verdict
    from orchestrator.study.search import race

    plan = build_plan(rows, job.objective)
    if job.objective.by_level:
        print(format_status(rows, levels=job.objective.levels))
        print(format_plan(plan))
    else:
        print(format_status(rows))
        if job.objective.by_capacity:  # the goodput answer is its verdict, not a figure at one stream
            from orchestrator.study.evidence.goodput import format_goodput, goodput_answer

            print(format_goodput(goodput_answer(rows, job.objective, job.pricing())))
        else:
            print(format_verdict(plan))
        if not job.objective.by_capacity and job.slo:
            from orchestrator.study.evidence.history import infeasible_lines

            print(f"slo: {job.slo.describe()}")
            for line in infeasible_lines(rows):
                print(f"  {line}")
    from orchestrator.study.model import coverage

    for line in coverage.describe(coverage.of_job(job, rows)):
        print(line)
    raced = race.said(race.outcomes(rows, job.objective), race.trial_numbers(rows))
    drift = plan.evidence.headline_drift(job.objective).text() if plan.evidence is not None else ""
    for said in (raced, load_note(rows), drift if drift not in raced else ""):  # the race says a drift itself
        if said:
            print(said)
    if orphaned:
        print(orphaned)
    return 0


def _status_json(args, job, rows, orphaned: str | None) -> None:
    """``status --json``: every trial (``TrialRow.to_json``; a goodput study's with its capacity),
    the best as ``run --json`` says it, the plan or the goodput answer, what was not explored."""
    from orchestrator.core.json_schemas import best
    from orchestrator.driver.progress import Progress
    from orchestrator.study.evidence.history import baseline_row, best_rows
    from orchestrator.study.evidence.launches import load_note
    from orchestrator.study.evidence.plan import build_plan
    from orchestrator.study.model import coverage
    from orchestrator.study.search import race
    from orchestrator.study.storage import objective as objectives

    listed = [r.to_json() for r in rows]
    answer = None  # goodput's (None for every other kind)
    if job.objective.by_capacity:  # each config's capacity, its curve and its price
        from orchestrator.study.evidence.goodput import goodput_answer

        goodput = goodput_answer(rows, job.objective, job.pricing())
        answer = goodput.to_dict()
        capacities = {c.row.number: c.to_dict() for c in goodput.configs}
        listed = [{**rec, "capacity": capacities.get(rec["number"])} for rec in listed]
    plan = build_plan(rows, job.objective)
    ranked = best_rows(rows, 1)
    base = baseline_row(rows)
    base = base if base is not None and base.state == "COMPLETE" and base.value is not None else None
    summary = Progress.best_summary(ranked[0] if ranked else None, base, plan=None, rows=rows,
                                    objective=job.objective)
    raced = race.said(race.outcomes(rows, job.objective), race.trial_numbers(rows))
    drift = plan.evidence.headline_drift(job.objective).text() if plan.evidence is not None else ""
    notes = [n for n in (raced, load_note(rows), drift if drift not in raced else "", orphaned) if n]
    _emit("status", job=str(job.path), study=job.study, trials=listed,
          best=best(summary, objectives.unit(objectives.levels(job.objective)[0])),
          plan=plan.to_dict() if job.objective.by_level else None,
          goodput=answer,
          not_explored=coverage.describe(coverage.of_job(job, rows)), notes=notes)


def _orphaned_trials(job, rows) -> str | None:
    """The line for RUNNING trials no live driver runs (it was killed: nothing recorded how they
    ended), from the study's lock: ``driver.lock.holder``; None when a driver runs them."""
    from orchestrator.driver.lock import DriverLock, holder

    running = [r.number for r in rows if r.state == "RUNNING" and not r.skipped]
    if not running or holder(job.dir.lock) is not None:
        return None
    owner = DriverLock(job.dir.lock).owner() or {}
    who = (f" (its driver, pid {owner.get('pid')} on {owner.get('host')}, is gone)"
           if owner.get("pid") else " (its driver is gone)")
    trials = ", ".join(f"#{n}" for n in running)
    one = len(running) == 1
    it, they, its = ("it", "it", "its config") if one else ("they", "them", "their configs")
    return (f"note: {trials} {'is' if one else 'are'} RUNNING, but no driver runs the study{who}: it was stopped "
            f"before it recorded how {it} ended; `ncclsweep run {job.path}` records {they} as interrupted and "
            f"measures {its} again")


def cmd_export(args) -> int:
    from orchestrator.results.export import export, notes
    from orchestrator.study.evidence.history import trial_rows
    from orchestrator.study.storage.storage import open_study

    job = _load(args.job)
    if args.top < 1:
        raise BadInput(f"--top must be >= 1, not {args.top}")
    if not 1 <= args.port <= 65535:
        raise BadInput(f"--port must be 1-65535, not {args.port}")
    if not args.host.strip() or any(c.isspace() for c in args.host):
        raise BadInput(f"--host must be an address such as 127.0.0.1 or 0.0.0.0, not {args.host!r}")
    if args.trial and args.format != "benchmark-report":
        raise BadInput("--trial chooses the configs of --format benchmark-report only")
    rows = trial_rows(open_study(job, create=False))
    files: list[str] = []
    if args.format == "benchmark-report":  # a file per config and level in the -o folder, else a YAML stream
        from orchestrator.results import benchmark_report

        kw: dict[str, Any] = {"top": args.top, "level": args.concurrency, "mix": args.mix, "trials": tuple(args.trial)}
        text = benchmark_report.render(job, rows, **kw)
        if args.output:
            files = [str(path) for path in benchmark_report.write(job, rows, args.output, **kw)]
            if not args.json:
                print("\n".join(files))
    else:
        text = export(job, rows, args.format, top=args.top, level=args.concurrency, mix=args.mix, host=args.host,
                      port=args.port)
        if args.output:
            from orchestrator.core.files import write_whole

            write_whole(args.output, text)
            files = [str(args.output)]
    if not args.output and not args.json:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    said = notes(job, rows, level=args.concurrency, mix=args.mix)
    for line in said:  # once written: a failed write is one line
        print(f"export: {line}", file=sys.stderr)
    if args.json:  # what was exported, as the json format documents it (rank, config, env, provenance)
        docs = json.loads(export(job, rows, "json", top=args.top, level=args.concurrency, mix=args.mix,
                                 host=args.host, port=args.port))
        docs = docs if isinstance(docs, list) else [docs]
        _emit("export", job=str(job.path), study=job.study, format=args.format, output=args.output, files=files,
              artifact=text, exported=[{"rank": d["rank"], "trial": d["provenance"]["trial"], "config": d["config"],
                                        "env": d["env"], "provenance": d["provenance"]} for d in docs], notes=said)
    return 0


def cmd_report(args) -> int:
    from orchestrator.results.report import write_report

    job = _load(args.job)
    paths = write_report(job, trials=args.trial)
    for path in paths:
        print(path)
    return 0


def parse_also(text: str | None) -> list[int] | str | None:
    """``--also``: None, "ties", or trial numbers."""
    from orchestrator.config.yaml_input import brief

    if not text:
        return None
    if text.strip() == "ties":
        return "ties"
    try:
        numbers = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--also takes comma-separated trial numbers or 'ties', not {brief(text)}") from None
    return numbers or None


def cmd_compare(args) -> int:
    from orchestrator.results.compare import run_compare

    job = _load(args.job)
    if args.plan:
        from orchestrator.results.compare import compare_plan_rounds, run_compare_plan

        if args.concurrency or args.also:
            raise BadInput("compare --plan measures the plan's configs at the objective's levels; it takes no "
                           "--concurrency or --also")
        if args.json:
            _compare_json(job, "plan", compare_plan_rounds(job, rounds=args.rounds, say=_to_stderr).to_record())
        else:
            print(run_compare_plan(job, rounds=args.rounds))
        return 0
    levels = None
    if args.concurrency:
        try:
            levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
        except ValueError:
            raise BadInput(f"--concurrency must be comma-separated integers, not {args.concurrency!r}") from None
        if not levels or min(levels) < 1:
            raise BadInput("--concurrency values must be >= 1")
    if args.json:
        from orchestrator.results.compare import compare_rounds

        _compare_json(job, "best", compare_rounds(job, levels, rounds=args.rounds, say=_to_stderr,
                                                  also=parse_also(args.also)).to_record())
    else:
        print(run_compare(job, levels, rounds=args.rounds, also=parse_also(args.also)))
    return 0


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _compare_json(job, mode: str, data: dict) -> None:
    """``compare --json``: the rounds' figures and verdicts (``compare.json``'s record without its raw rounds),
    and the study's verdict over every launch."""
    from orchestrator.config.yaml_input import display_path
    from orchestrator.results.compare import study_lines

    common = {"job": str(job.path), "study": job.study,
              "file": display_path(job.dir.compare_plan if mode == "plan" else job.dir.compare),
              "concurrency": data["concurrency"], "rounds_planned": data["rounds_planned"],
              "rounds_done": data["rounds_done"], "complete": data["complete"],
              "baseline_trial": data["baseline_trial"],
              "failures": data["failures"], "study_verdict": study_lines(job), "mode": mode}
    if mode == "plan":
        keep = ("label", "trial", "roles", "median", "vs_baseline", "vs_anchor", "params")
        _emit("compare", **common, anchor_trial=data.get("anchor_trial"),
              configs=[{k: c[k] for k in keep if k in c} for c in data["configs"]])
        return
    _emit("compare", **common, best_trial=data["best_trial"], same_config=data["same_config"],
          baseline=data["baseline"], best=data["best"], intervals=data["intervals"],
          others=[{k: o[k] for k in ("trial", "label", "params", "median", "vs_best") if k in o}
                  for o in data.get("others") or []],
          constraints=data.get("constraints") or [])


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs; each VALUE read as YAML like the job's files (bounded)."""
    from orchestrator.config.yaml_input import brief, load_yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise BadInput(f"--set expects KEY=VALUE, not {brief(pair)}")
        key, value = pair.split("=", 1)
        out[key.strip()] = load_yaml(value, file=None, key=f"--set {key.strip()}") if value.strip() else ""
    return out


def cmd_bench(args) -> int:
    from orchestrator.driver.bench_command import bench_config, check_overrides, format_result, study_golden

    job = _load(args.job)
    overrides: dict[str, Any] = {}
    if args.config:
        from orchestrator.results.export import load_config_file

        overrides.update(check_overrides(job, load_config_file(args.config), args.config))
    overrides.update(check_overrides(job, parse_sets(args.set), "--set"))
    golden = study_golden(job)
    result = bench_config(job, overrides, verify_nccl=args.verify_nccl, golden=golden)
    if args.json:  # the trial's record with the envelope's keys first (readers of its fields read them as before)
        _emit("bench", job=args.job, gated=golden is not None, **result.to_attrs())
    else:
        print(format_result(result, job.slo))
        if golden is None and result.outcome == "COMPLETE":
            why = ("the job turns the gate off (correctness.enabled: false)" if not job.correctness.enabled else
                   f"the study has no golden reference yet (`ncclsweep run {args.job}` captures it from the "
                   "baseline)")
            print(f"correctness: not checked: {why}")
    return 0 if result.outcome == "COMPLETE" else 1


def cmd_prescreen(args) -> int:
    from orchestrator.driver.prescreen import require_device, run_prescreen
    from orchestrator.driver.prescreen_table import format_prescreen

    job = _load(args.job)
    if args.iters < 1:
        raise BadInput(f"--iters must be >= 1, not {args.iters}")
    require_device(job, job.backend_obj().device())  # at once, before anything is launched
    measured: dict[int, tuple[dict, float]] = {}
    try:  # a finished study gives "the rest" of a step, for the predicted decode tok/s
        from orchestrator.study.evidence.history import trial_rows
        from orchestrator.study.storage.storage import open_study

        for row in trial_rows(open_study(job, create=False)):
            tp = int(row.params.get("tp_size", 1))
            if row.state == "COMPLETE" and row.value and (tp not in measured or row.value > measured[tp][1]):
                measured[tp] = (row.params, row.value)
    except NcclsweepError:
        pass
    data = run_prescreen(job, iters=args.iters, measured=measured, say=lambda line: print(line, file=sys.stderr))
    if not data.rows:
        print("nothing to pre-screen: the space has no TP > 1 configuration (NCCL is idle at TP=1)")
        return 0
    print(format_prescreen(data))
    return 0


def cmd_cleanup(args) -> int:
    from orchestrator.config.job import load_study_location
    from orchestrator.node.server import ServerRegistry, cleanup_recorded

    where = load_study_location(args.job)  # the study's records only: no space, no backend needed
    registry_dir = where.dir.servers
    if where.ray_address:
        from orchestrator.driver.ray_executor import RayExecutor

        ex = RayExecutor(address=where.ray_address, gpus_per_node=0, cpus_per_trial=1, parallel=1)
        killed = ex.cleanup_orphans(registry_dir)
    else:
        killed = cleanup_recorded(ServerRegistry(registry_dir))
    for rec in killed:
        rec = rec if isinstance(rec, dict) else rec.__dict__
        print(f"ended server pid {rec['pid']} (port {rec['port']}) on {rec['hostname']}")
    print(f"{len(killed)} server(s) ended")
    return 0


def cmd_doctor(args) -> int:
    from orchestrator.node.doctor import examine, main_doctor

    if not args.json:
        return main_doctor(args.job)
    found = examine(_load(args.job) if args.job else None)
    _emit("doctor", job=args.job, ok=not found.warnings, gpus=found.gpus, versions=found.versions,
          preflight=found.preflight, warnings=found.warnings, lines=found.lines)
    return 0


def cmd_simulate(args) -> int:
    from orchestrator.study.simulation.simulate import main_simulate

    return main_simulate(args)


_COMMANDS = {
    "validate": cmd_validate, "run": cmd_run, "status": cmd_status, "export": cmd_export,
    "report": cmd_report, "compare": cmd_compare, "bench": cmd_bench, "cleanup": cmd_cleanup,
    "doctor": cmd_doctor, "simulate": cmd_simulate, "prescreen": cmd_prescreen,
}

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
