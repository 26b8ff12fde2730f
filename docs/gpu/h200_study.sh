#!/usr/bin/env bash
# Runs on a lent H200 machine (see docs/benchmarks.md): one reference-server study on GPU 0,
# its report, the concurrency comparison, and 5 repeats of the best config.
# usage: bash docs/gpu/h200_study.sh jobs/h200-refserver-1b.yaml   (writes under $OUT)
set -uo pipefail
job=$1; name=$(basename "$job" .yaml)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devwhl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/$name-env.txt"
python3 -m orchestrator.node.hwprobe cuda | tee -a "$OUT/$name-env.txt"
timeout 420 python3 -m orchestrator run "$job" 2>&1 | grep -v -e WARNING -e 'token-auth' | tee "$OUT/$name-run.log"
python3 -m orchestrator status "$job" | tee -a "$OUT/$name-run.log"
python3 -m orchestrator report "$job" >/dev/null
if [ "${COMPARE:-1}" = 1 ]; then
  timeout 240 python3 -m orchestrator compare "$job" --concurrency 1,2,10,64,256 --rounds 1 | tee -a "$OUT/$name-run.log"
  python3 -m orchestrator report "$job" >/dev/null
fi
python3 -m orchestrator export "$job" --format yaml -o "reports/$name/best.yaml"
if [ "${REPEATS:-1}" = 1 ]; then
  for i in 1 2 3 4 5; do timeout 120 python3 -m orchestrator bench "$job" --config "reports/$name/best.yaml" --json \
    | python3 -c "import json,sys; d=json.load(sys.stdin); m=d['metrics']; print('repeat', $i, m['decode_tok_s'], m['cv'], d['timing'])"; done | tee -a "$OUT/$name-run.log"
fi
tar czf "$OUT/$name-reports.tgz" "reports/$name"
