#!/usr/bin/env bash
# Runs on a lent 2x H200 machine (issue 10): the TP=2 NCCL studies of the reference server
# `1b` with P2P as the machine has it (NVLink), with NCCL_P2P_DISABLE=1 (PCIe stand-in), and
# LL128 vs LL with P2P on and off; each study's report and its all-reduce pre-screen.
# Writes under $OUT. usage: bash docs/gpu/h200x2_tp2.sh   (STUDIES="nop2p" to run one)
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devwhl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi topo -m | tee "$OUT/topo.txt"
for v in ${STUDIES:-nop2p p2p ll128}; do  # each resumable: run again to continue
  job=jobs/h200x2-refserver-1b-tp2-$v.yaml
  timeout ${STUDY_S:-240} python3 -m orchestrator run "$job" 2>&1 | grep -v -e WARNING -e token-auth | tee -a "$OUT/tp2-run.log"
  python3 -m orchestrator status "$job" | tee -a "$OUT/tp2-run.log"
  timeout 60 python3 -m orchestrator prescreen "$job" --iters 200 2>&1 | tee -a "$OUT/tp2-run.log"
  python3 -m orchestrator report "$job" >/dev/null
done
tar czf "$OUT/tp2-reports.tgz" reports/h200x2-refserver-1b-tp2-*
