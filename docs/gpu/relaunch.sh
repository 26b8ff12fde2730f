#!/usr/bin/env bash
# The exported config of a finished study launched N more times, measured as the study measures
# (`ncclsweep bench JOB --config FILE`: the same benchmark, the correctness gate against the study's
# reference), each launch's figure printed against the range the export printed for a fresh launch
# (issue 34: "a winner that holds when it is launched again").
#
#   bash docs/gpu/relaunch.sh JOB [N=3] [LEVEL=1]
#
# LEVEL: the level of the objective whose best is exported (`export --concurrency LEVEL`) and whose
# figure is read (1: decode tok/s; N > 1: total tok/s with N streams). Writes under $OUT (default
# /tmp): relaunch-<study>/export.yaml, launch-<i>.json (each launch's whole record) and
# relaunch.txt (the lines printed). Exit status 0 when every launch lands in the range, 1 when one
# does not, 2 when the study has no range (its launch noise was never measured).
set -uo pipefail
job=${1:?usage: relaunch.sh JOB [N] [LEVEL]}
n=${2:-3}
level=${3:-1}
study=$(python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['study'])" "$job")
out=${OUT:-/tmp}/relaunch-$study
mkdir -p "$out"
python3 -m orchestrator export "$job" --concurrency "$level" --format yaml -o "$out/export.yaml" || exit 1
read -r lo hi value launches < <(python3 - "$out/export.yaml" <<'PY'
import sys, yaml
fig = yaml.safe_load(open(sys.argv[1]))["provenance"]["figure"]
lo, hi = fig["fresh_launch_95"] or (None, None)
r = lambda v: None if v is None else round(v, 1)  # noqa: E731
print(r(lo), r(hi), r(fig["value"]), fig["launches"])
PY
)
{
  echo "study $study, level $level: the export's figure $value (the median of $launches launches); a fresh launch should measure $lo-$hi (95%)"
  inside=0
  for i in $(seq 1 "$n"); do
    python3 -m orchestrator bench "$job" --config "$out/export.yaml" --json > "$out/launch-$i.json" 2> "$out/launch-$i.err"
    got=$(python3 - "$out/launch-$i.json" "$level" <<'PY'
import json, sys
rec = json.load(open(sys.argv[1]))
lv = (rec.get("metrics") or {}).get("levels", {}).get(sys.argv[2]) or {}
print(round(lv["value"], 1) if rec.get("outcome") == "COMPLETE" and lv.get("value") else "failed")
PY
)
    verdict=$(python3 -c "import sys; g, lo, hi = sys.argv[1:]; print('no range' if lo == 'None' else 'failed' if g in ('failed', 'None') else 'inside' if float(lo) <= float(g) <= float(hi) else 'OUTSIDE')" "$got" "$lo" "$hi")
    [ "$verdict" = inside ] && inside=$((inside + 1))
    echo "launch $i: $got ($verdict $lo-$hi)"
  done
  echo "$inside of $n fresh launches inside the export's range"
} | tee "$out/relaunch.txt"
[ "$lo" = None ] && exit 2
grep -q "^$n of $n fresh launches inside" "$out/relaunch.txt"
