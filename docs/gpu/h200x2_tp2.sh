#!/usr/bin/env bash
# Runs on a lent 2x H200 machine (issue 10): the TP=2 NCCL study with P2P as the machine has
# it (NVLink) and with NCCL_P2P_DISABLE=1 (PCIe stand-in), then the all-reduce pre-screen of
# both. Writes under $OUT. usage: bash docs/gpu/h200x2_tp2.sh
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devwhl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi topo -m | tee "$OUT/topo.txt"
for v in ${STUDIES:-nop2p p2p}; do  # the studies (each resumable: rerun to continue)
  job=jobs/h200x2-refserver-1b-tp2-$v.yaml
  timeout ${STUDY_S:-150} python3 -m orchestrator run "$job" 2>&1 | grep -v -e WARNING -e token-auth | tee -a "$OUT/tp2-run.log"
  python3 -m orchestrator status "$job" | tee -a "$OUT/tp2-run.log"
done
for v in nop2p p2p; do  # the all-reduce pre-screen of both
  timeout 45 python3 -m orchestrator prescreen "jobs/h200x2-refserver-1b-tp2-$v.yaml" --iters 200 2>&1 | tee -a "$OUT/tp2-run.log"
done
tar czf "$OUT/tp2-reports.tgz" reports/h200x2-refserver-1b-tp2-*
