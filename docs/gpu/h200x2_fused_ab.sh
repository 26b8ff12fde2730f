#!/usr/bin/env bash
# Runs on a lent 2x H200 machine after docs/gpu/h200x2_tp2.sh: the best config of each TP=2
# study relaunched with the Triton glue kernels off (REFSERVER_FUSED=0) and on, interleaved
# (off, on, off, on, ...) so drift hits both alike. Writes $OUT/fused-ab.log.
# usage: bash docs/gpu/h200x2_fused_ab.sh   (STUDIES="nop2p p2p", ROUNDS=3; EXTRA_SET=graph_capture=false
# changes the best config, here to eager)
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devwhl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for v in ${STUDIES:-nop2p p2p}; do
  job=jobs/h200x2-refserver-1b-tp2-$v.yaml; name=$(basename "$job" .yaml)
  python3 -m orchestrator export "$job" --format yaml -o "reports/$name/best.yaml"
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for fused in 0 1; do
      timeout 90 python3 -m orchestrator bench "$job" --config "reports/$name/best.yaml" \
        --set "env.REFSERVER_FUSED=\"$fused\"" ${EXTRA_SET:+--set "$EXTRA_SET"} --json | python3 -c "
import json, sys
d = json.load(sys.stdin); m = d['metrics']
print('$v', 'round', $round, 'fused', $fused, round(m['decode_tok_s'], 1), 'cv', round(m['cv'], 4))"
      grep -ho "fused kernels.*" "reports/$name/bench-logs/trial-0000.log" | tail -1  # the path it ran (the log is appended)
    done
  done
done 2>&1 | grep -v -e WARNING -e token-auth | tee -a "$OUT/fused-ab.log"
