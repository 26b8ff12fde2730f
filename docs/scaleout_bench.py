"""Scale-out on a local Ray cluster: trials at once and scheduling overhead per trial
(docs/benchmarks.md, "Scale-out (Ray cluster)").

    python docs/scaleout_bench.py [--nodes 1,2,3] [--trials 10] [--slow-start 0] [--keep DIR]

For each node count N it starts a ``ray.cluster_utils.Cluster`` on this host (a head with
no CPUs, where only the driver runs, plus N worker nodes of 1 CPU and one ``trial_node``
resource each), runs a study of the tiny reference server (TP=1, 1 thread, 16 output
tokens, 1 repeat; the job's node selector asks for ``trial_node``), tears the cluster
down, and prints one table row from the stored trials:

- at once: the most trials running at the same moment, and the mean (trial-seconds /
  wall-seconds from the first start to the last end);
- dispatch: driver submit -> the actor starts the trial (``timing.dispatch_s``); the
  first trial on a node includes starting its actor process, later ones reuse it;
- collect: the actor ends the trial -> the driver has the result (``timing.collect_s``);
- record: the actor ends the trial -> the result is stored in Optuna (trial complete time);
- node idle: on one node, the end of a trial -> the start of its next trial (collecting,
  recording, the sampler's next proposal, submitting, dispatch);
- tok/s: median decode tok/s of the completed trials.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

SPACE = """\
params:
  tp_size: {choices: [1]}
  backend.threads: {choices: [1]}
  backend.max_batch: {choices: [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64]}
"""


def write_job(directory: Path, address: str, trials: int, slow_start: float) -> Path:
    settings = {"model": "tiny", "device": "cpu"}
    if slow_start:
        settings["fault"] = f"slow-start:{slow_start:g}"
    (directory / "space.yaml").write_text(SPACE)
    job = {
        "study": "scaleout", "report_dir": str(directory / "reports" / "scaleout"),
        "backend": {"kind": "refserver", "settings": settings},
        "gpus_per_node": 0, "cpus_per_trial": 1, "space": "space.yaml",
        "baseline": {"tp_size": 1, "backend.threads": 1, "backend.max_batch": 64},
        "budget": {"trials": trials},
        "bench": {"output_tokens": 16, "warmup": 1, "repeats": 1, "max_repeats": 1},
        "timeouts": {"startup": "60s", "bench": "30s", "teardown": "5s"},
        "correctness": {"check_tokens": 12, "prompts": ["The quick brown fox", "Once upon a time"]},
        "pruning": {"enabled": False}, "sampler": {"name": "bruteforce", "seed": 0},
        "ray": {"address": address, "parallel": 64, "node_selector": {"resources": {"trial_node": 1}}},
    }
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def at_once(spans: list[tuple[float, float]]) -> tuple[int, float]:
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    return most, sum(e - s for s, e in spans) / wall


def measure(nodes: int, trials: int, slow_start: float, keep: Path | None) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from orchestrator.config.job import load_job
    from orchestrator.driver.run import StudyDriver
    from orchestrator.study.storage.storage import open_study

    if ray.is_initialized():
        ray.shutdown()
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=1, resources={"trial_node": 1}, include_dashboard=False)
        cluster.wait_for_nodes()
        started = time.monotonic() - t0
        directory = Path(tempfile.mkdtemp(prefix=f"scaleout{nodes}-", dir=keep))
        job = load_job(write_job(directory, cluster.address, trials, slow_start))
        out = io.StringIO()
        driver = StudyDriver(job, out=out)
        slots = driver.make_executor().slots  # ray.parallel 64: capped at the matching nodes
        t1 = time.monotonic()
        summary = driver.run()
        study_s = time.monotonic() - t1
        trials_done = [t for t in open_study(job, create=False).get_trials(deepcopy=False)
                       if t.user_attrs.get("started_at") and t.user_attrs.get("ended_at")]
    finally:
        ray.shutdown()
        cluster.shutdown()
    if summary.reason != "budget reached":
        print(out.getvalue(), file=sys.stderr)
        raise SystemExit(f"{nodes} nodes: the study ended with {summary.reason!r}")
    ua = [t.user_attrs for t in trials_done]
    spans = [(a["started_at"], a["ended_at"]) for a in ua]
    most, mean = at_once(spans)
    by_node: dict[str, list[dict]] = {}
    for a in sorted(ua, key=lambda a: a["started_at"]):
        by_node.setdefault(a["node"]["node_id"], []).append(a)
    first = [rows[0]["timing"]["dispatch_s"] for rows in by_node.values()]
    later = [a["timing"]["dispatch_s"] for rows in by_node.values() for a in rows[1:]]
    collect = [a["timing"]["collect_s"] for a in ua]
    record = [t.datetime_complete.timestamp() - t.user_attrs["ended_at"] for t in trials_done]
    idle = [b["started_at"] - a["ended_at"] for rows in by_node.values() for a, b in zip(rows, rows[1:])]
    values = [a["value"] for a in ua if a.get("outcome") == "COMPLETE" and a.get("value")]
    return {"nodes": nodes, "slots": slots, "trials": len(ua), "nodes_used": len(by_node), "cluster_s": started,
            "study_s": study_s, "most": most, "mean": mean, "first": first, "later": later, "collect": collect,
            "record": record, "idle": idle, "tok_s": statistics.median(values) if values else None,
            "trial_s": statistics.median(e - s for s, e in spans)}


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{1000 * statistics.median(values):.0f} (max {1000 * max(values):.0f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="1,2,3", help="node counts to measure, e.g. 1,2,3")
    p.add_argument("--trials", type=int, default=10, help="study budget per node count")
    p.add_argument("--slow-start", type=float, default=0.0, help="seconds each server waits before it is ready")
    p.add_argument("--keep", type=Path, default=None, help="keep the studies under this directory")
    a = p.parse_args()
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
    rows = [measure(int(n), a.trials, a.slow_start, a.keep) for n in a.nodes.split(",")]
    print("| nodes | slots | trials | at once (max / mean) | study wall s | median trial s | dispatch ms, 1st on node "
          "| dispatch ms, later | collect ms | record ms | node idle ms | decode tok/s |")
    print("|" + "---|" * 12)
    for r in rows:
        print(f"| {r['nodes']} | {r['slots']} | {r['trials']} | {r['most']} / {r['mean']:.2f} | {r['study_s']:.1f} "
              f"| {r['trial_s']:.2f} | {ms(r['first'])} | {ms(r['later'])} | {ms(r['collect'])} | {ms(r['record'])} "
              f"| {ms(r['idle'])} | {r['tok_s']:.0f} |")
    print("\ncluster start (head + nodes, wait_for_nodes): "
          + ", ".join(f"{r['nodes']} node(s) {r['cluster_s']:.1f}s" for r in rows))


if __name__ == "__main__":
    main()
