"""The start-up phases of every launched trial of a study folder: the trial's own record
(``startup_phases`` in status.json) where it has one, else parsed from its kept server log
(``orchestrator.node.startup.parse``, with the trial's measured spawn -> healthy as ready: trials
run before trials recorded phases themselves). The last column says which.
usage: python docs/gpu/phases_of_study.py docs/gpu/h200-vllm-1b-plan [more study folders]"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from orchestrator.node import startup


def main(folders: list[str]) -> None:
    print("| study | trial | config | ready, s | weights | torch.compile (cache) | graph capture | profile, KV cache, "
          "warm-up | process start | other | from |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for folder in map(Path, folders):
        status = json.loads((folder / "status.json").read_text())
        for t in status if isinstance(status, list) else status["trials"]:
            log = folder / "logs" / f"trial-{t['number']:04d}.log"
            p, source = t.get("startup_phases"), "record"
            if not p:
                if not log.is_file():
                    continue  # answered from the study (a cached config) or failed before its launch
                ready = (t.get("durations") or {}).get("launch_s")
                p, source = startup.parse(log.read_text(errors="replace"), ready_s=ready), "log"
            seg = dict(p.get("segments") or [])
            config = " ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(t["params"].items())
                              if k not in ("tp_size", "pp_size"))

            def cell(name: str, seg: dict = seg) -> str:
                return f"{seg[name]:.1f}" if name in seg else "-"

            cache = f" ({p['compile_cache']})" if p.get("compile_cache") else ""
            print(f"| {folder.name} | {t['number']} | {config} | {p.get('ready_s', 0):.0f} | {cell('weights')} | "
                  f"{cell('torch.compile')}{cache} | {cell('graph capture')} | {cell('profile, KV cache, warm-up')} | "
                  f"{cell('process start')} | {cell('other')} | {source} |")


if __name__ == "__main__":
    main(sys.argv[1:])
