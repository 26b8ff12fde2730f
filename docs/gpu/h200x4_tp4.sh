#!/usr/bin/env bash
# Runs on a lent 4x H200 machine (issue 20): TP=4 studies of the reference server `1b` and `8b`
# (tp_size {1,2,4} x NCCL_PROTO {LL,Simple} x NCCL_ALGO {Ring,Tree} x graphs), with P2P off
# (NCCL_P2P_DISABLE=1: host shared memory, the PCIe stand-in) and, if asked, on (NVLink); the
# all-reduce pre-screen at TP=2/4; a TUNING verification launch at TP=4; 4-rank NCCL logs for
# the parser fixtures. Writes under $OUT.
# usage: bash ../shared/tools/device-wheels.sh   (here, once), then on the GPU machine, carrying .devwhl:
#        bash docs/gpu/h200x4_tp4.sh                       (STUDIES="1b-tp4-nop2p 8b-tp4-nop2p" by default)
#        STUDIES="1b-tp4-p2p" bash docs/gpu/h200x4_tp4.sh  (each study resumes where it stopped)
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devwhl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log=$OUT/tp4-run.log
if [ "${ENV_INFO:-1}" = 1 ]; then
  { nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv;
    python3 -m orchestrator.node.hwprobe cuda; } 2>&1 | tee "$OUT/topo.txt"
fi
if [ "${FIXTURES:-1}" = 1 ]; then  # 4-rank NCCL logs: start-up + per-call TUNING lines, P2P off, LL/Ring and Simple/Tree
  mkdir -p /tmp/fx
  v=$(python3 -c 'import torch;print(".".join(map(str,torch.cuda.nccl.version())))')
  for c in "ll-ring NCCL_PROTO=LL NCCL_ALGO=Ring" "simple-tree NCCL_PROTO=Simple NCCL_ALGO=Tree"; do
    set -- $c; name=$1; shift
    env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING NCCL_P2P_DISABLE=1 "$@" timeout -k 5 120 \
      python3 tests/fixtures/nccl/capture_probe.py 4 > "/tmp/fx/p2p-disabled-$name-4xh200-$v.log" 2>&1
    echo "fixture $name rc=$?" | tee -a "$log"
  done
fi
for v in ${STUDIES:-1b-tp4-nop2p 8b-tp4-nop2p}; do
  job=jobs/h200x4-refserver-$v.yaml
  timeout -k 30 $(( ${STUDY_S:-170} + 120 )) python3 -m orchestrator run "$job" --timeout ${STUDY_S:-170}s 2>&1 \
    | grep -v -e WARNING -e token-auth | tee -a "$log"
  python3 -m orchestrator status "$job" 2>&1 | tee -a "$log"
  python3 -m orchestrator report "$job" >/dev/null 2>&1
  tar czf "$OUT/tp4-reports.tgz" reports/h200x4-refserver-*   # after each study: a call cut short keeps it
done
if [ "${PRESCREEN:-1}" = 1 ]; then
  for v in ${PRESCREEN_STUDIES:-1b-tp4-nop2p}; do
    timeout 150 python3 -m orchestrator prescreen jobs/h200x4-refserver-$v.yaml --iters ${PRESCREEN_ITERS:-100} 2>&1 | tee -a "$log"
    python3 -m orchestrator report jobs/h200x4-refserver-$v.yaml >/dev/null 2>&1
  done
fi
if [ "${VERIFY:-1}" = 1 ]; then  # TUNING lines of the server itself at TP=4 (a separate launch, not timed)
  timeout 120 python3 -m orchestrator bench jobs/h200x4-refserver-1b-tp4-nop2p.yaml --set tp_size=4 \
    --set graph_capture=true --set env.NCCL_PROTO=LL --set env.NCCL_ALGO=Ring --verify-nccl 2>&1 | tee -a "$log"
  cp "$(ls -t reports/h200x4-refserver-1b-tp4-nop2p/bench-logs/*.log | head -1)" \
    /tmp/fx/refserver-1b-tp4-p2p-disabled-ll-ring-verify-4xh200.log 2>/dev/null
fi
[ -d /tmp/fx ] && tar czf "$OUT/tp4-fixtures.tgz" -C /tmp/fx .
tar czf "$OUT/tp4-reports.tgz" reports/h200x4-refserver-*
