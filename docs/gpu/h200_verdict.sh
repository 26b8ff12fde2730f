#!/usr/bin/env bash
# Runs on a lent H200 machine (docs/benchmarks.md, "Verdicts from interleaved rounds"): the `1b`
# reference-server study's baseline compared with itself (the study stopped after its first
# trial, so best = baseline), then the study finished and its best compared with the baseline,
# both with compare's default rounds; every compare.json and the run logs go to $OUT.
# usage: bash docs/gpu/h200_verdict.sh aa|study   (aa first; the second call continues on the same machine)
set -uo pipefail
job=jobs/h200-refserver-1b.yaml; name=h200-refserver-1b
[ -d /tmp/site/optuna ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devwhl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
run() { python3 -m orchestrator "$@" 2>&1 | grep -v -e WARNING -e 'token-auth'; }
if [ "$1" = aa ]; then
  rm -rf "reports/$name"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/env.txt"
  run run "$job" --trials 1 | tee "$OUT/aa-run.log"
  (time run compare "$job") 2>&1 | tee -a "$OUT/aa-run.log"
  cp "reports/$name/compare.json" "$OUT/aa-compare.json"
else
  run run "$job" | tee "$OUT/study-run.log"
  run status "$job" | tee -a "$OUT/study-run.log"
  (time run compare "$job") 2>&1 | tee -a "$OUT/study-run.log"
  cp "reports/$name/compare.json" "$OUT/study-compare.json"
  run report "$job" >/dev/null && cp "reports/$name/report.md" "$OUT/study-report.md"
fi
