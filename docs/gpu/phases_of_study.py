"""The start-up phases of every trial of a study folder, parsed from its kept server logs
(``orchestrator.node.startup.parse``, with the trial's measured spawn -> healthy as ready):
for studies run before trials recorded ``startup_phases`` themselves.
usage: python docs/gpu/phases_of_study.py docs/gpu/h200-vllm-1b-plan [more study folders]"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from orchestrator.node import startup


def main(folders: list[str]) -> None:
    print("| study | trial | config | ready, s | weights | torch.compile (cache) | graph capture | profile, KV cache, "
          "warm-up | other |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for folder in map(Path, folders):
        status = json.loads((folder / "status.json").read_text())
        for t in status if isinstance(status, list) else status["trials"]:
            log = folder / "logs" / f"trial-{t['number']:04d}.log"
            if not log.is_file():
                continue  # answered from the study (a cached config): never launched
            ready = (t.get("durations") or {}).get("launch_s")
            p = startup.parse(log.read_text(errors="replace"), ready_s=ready)
            seg = dict(p.get("segments") or [])
            config = " ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(t["params"].items())
                              if k not in ("tp_size", "pp_size"))

            def cell(name: str, seg: dict = seg) -> str:
                return f"{seg[name]:.1f}" if name in seg else "-"

            cache = f" ({p['compile_cache']})" if p.get("compile_cache") else ""
            print(f"| {folder.name} | {t['number']} | {config} | {p.get('ready_s', 0):.0f} | {cell('weights')} | "
                  f"{cell('torch.compile')}{cache} | {cell('graph capture')} | {cell('profile, KV cache, warm-up')} | "
                  f"{cell('other')} |")


if __name__ == "__main__":
    main(sys.argv[1:])
