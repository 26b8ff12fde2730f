#!/usr/bin/env bash
# A real vLLM 0.26.0 on a lent GPU machine (2x H200 or more), in back-to-back runs of one warm machine
# (a call carries at most 64 MiB; /tmp survives while the machine stays warm: an idle one goes back
# after 30 s). Here, once:  bash docs/gpu/vllm_parts.sh   (.vp1/ .. .vp5/, ~50 MiB each)
#                          bash ../shared/tools/device-wheels.sh   (.devwhl/: Ray + Optuna)
# Then on the GPU machine, one step per run, carrying what the step names:
#   STEP=part1   carry .vp1    part 1; exports the reference server's `1b` as a Hugging Face checkpoint
#   STEP=part2   carry .vp2
#   STEP=part3   carry .vp3
#   STEP=part4   carry .vp4
#   STEP=install carry .vp5    part 5, reassembles the tar, installs vLLM into /tmp/vsite
#   STEP=tp1     carry .devwhl the TP=1 study on GPU 0 (then the exported command launched by hand and
#                              asked for a completion), and the reference server vs vLLM comparison on GPU 1
#   STEP=tpn JOB=jobs/h200x2-vllm-1b-tp2-nop2p.yaml   a TP>1 study: the driver is killed (kill -9) once the
#                              second trial's server is up, nvidia-smi is read every second for 30 s, then
#                              the study resumes and finishes
#   STEP=compare               the TP=1 study's concurrency comparison (ROUNDS, default 2)
#   STEP=tp1b    carry .devwhl no new TP=1 study: the kept journal (docs/gpu/h200-vllm-1b/) is exported and
#                              its command launched by hand on GPU 0, then its concurrency comparison
#                              (ROUNDS); the reference server vs vLLM comparison runs on GPU 1 meanwhile
#   STEP=capture               raw launches (docs/gpu/vllm_capture.py, CONFIGS default base,base-nccl,ngram,draft):
#                              logs, /metrics before/after, per-prompt streams; the draft is the 1b's first 2 layers
#   STEP=study JOB=jobs/x.yaml [SECS=480] carry .devwhl the first time: the study (resumes a study a previous
#                              call left: /tmp survives between back-to-back calls; on a fresh machine, the journal
#                              kept in docs/gpu/<study>/ if any), status --json, report; its folder comes back as
#                              $OUT/<study>.tgz
#   STEP=bench JOB=jobs/x.yaml SETS="k=v ..."  one `ncclsweep bench` of a config (no study)
#   STEP=crosscheck JOB=jobs/x.yaml [CONFIG=export [LEVEL=1]] [SETS="k=v ..."] [LEVELS=64,68] [LAUNCHES=3] [ROUNDS=2] [SECS=480]
#                              docs/gpu/crosscheck.py: LAUNCHES fresh launches of a config (CONFIG=export: the kept
#                              study's exported best at LEVEL, its header printed first, and each launch's figure
#                              there against the range the export printed), each measured in ROUNDS interleaved
#                              rounds by the project's measurement and by `vllm bench serve` at every level
#   STEP=relaunch JOB=jobs/x.yaml [N=3] [LEVEL=1]  after STEP=study: the exported config at LEVEL launched N
#                              more times (docs/gpu/relaunch.sh), each figure against the export's range
#   KILL=0 with STEP=tpn: the study alone, no kill -9 of its driver; TPN_S: seconds of new trials
# Every step writes under $OUT. NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 stay set for every process (the jobs' env: repeats them for the servers).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1
export PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0 PYTHONPATH=/tmp/vsite:/tmp/site:$PWD
MODEL=/tmp/models/refserver-1b
log=$OUT/vllm-$STEP.log
run_study() {  # job, seconds of new trials, extra env (KEY=VALUE ...)
  local job=$1 secs=$2; shift 2
  env "$@" timeout -k 20 $((secs + ${GRACE:-240})) python3 -m orchestrator run "$job" --timeout "${secs}s" 2>&1 \
    | grep -v -e WARNING -e token-auth
  python3 -m orchestrator status "$job" 2>&1
  python3 -m orchestrator report "$job" >/dev/null 2>&1
}
restore_study() {  # the study a previous call left in /tmp/keep, else (a fresh machine) the one kept in docs/gpu/
  local name=$1; mkdir -p reports
  if [ -d /tmp/keep/$name ]; then rm -rf reports/$name && cp -r /tmp/keep/$name reports/
  elif [ -f docs/gpu/$name/study.journal ] && [ ! -f reports/$name/study.journal ]; then
    mkdir -p reports/$name && cp docs/gpu/$name/study.journal reports/$name/
  fi
}
study_name() {  # the job's study: its folder under reports/ (and docs/gpu/ where one is kept)
  python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['study'])" "$1"
}
hand_launch() {  # the exported command of the TP=1 study, launched by hand on GPU 0 and asked for a completion
  cmd=$(grep -v '^#' "$OUT/tp1-export.txt" | tail -1)
  CUDA_VISIBLE_DEVICES=0 setsid bash -c "$cmd --port 18123" > /tmp/hand.log 2>&1 &
  local hand=$! t0=$SECONDS  # its own session: the group id is its pid
  for i in $(seq 1 240); do curl -sf localhost:18123/health >/dev/null && break; sleep 1; done
  echo "# ready after $((SECONDS - t0)) s; a greedy completion:" >> "$OUT/tp1-export.txt"
  curl -s localhost:18123/v1/completions -H 'Content-Type: application/json' -d '{"model": "refserver-1b",
    "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}' >> "$OUT/tp1-export.txt"
  kill -TERM -- -$hand; sleep 10; kill -KILL -- -$hand 2>/dev/null
  echo; nvidia-smi --query-gpu=index,memory.used --format=csv >> "$OUT/tp1-export.txt"
  mkdir -p reports/h200-vllm-1b; cp /tmp/hand.log reports/h200-vllm-1b/
}
case "$STEP" in
relaunch)
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .devwhl/*.whl 2>/dev/null
  name=$(study_name "$JOB"); restore_study "$name"
  OUT=$OUT bash docs/gpu/relaunch.sh "$JOB" "${N:-3}" "${LEVEL:-1}" 2>&1 | tee "$log" ;;
part1)
  mkdir -p /tmp/vw && cp .vp1/part /tmp/vw/part1
  { nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; } | tee "$OUT/topo.txt"
  /usr/bin/time -f "export took %e s" python3 -m orchestrator.refserver.export_hf --model 1b --out $MODEL \
    --device cuda 2>&1 | tee "$log"
  python3 -m orchestrator.refserver.export_hf --model 1b --layers 2 --out $MODEL-l2 --device cuda 2>&1 | tee -a "$log"
  ls -la $MODEL | tee -a "$log" ;;
part2|part3|part4)
  cp .vp${STEP#part}/part /tmp/vw/$STEP && ls -la /tmp/vw ;;
install)
  cp .vp5/part /tmp/vw/part5 && mkdir -p /tmp/vw/w && cat /tmp/vw/part[1-5] \
    | tar -x -C /tmp/vw/w && python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/vsite \
    /tmp/vw/w/*.whl 2>&1 | tail -3 | tee "$log"
  rm -rf /tmp/vw
  python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" 2>&1 | tail -2 | tee -a "$log" ;;
tp1)
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .devwhl/*.whl 2>/dev/null
  job=jobs/h200-vllm-1b.yaml
  (run_study $job ${TP1_S:-300} CUDA_VISIBLE_DEVICES=0 RAY_TMPDIR=/tmp/ray-tp1 > "$OUT/tp1.log" 2>&1
   python3 -m orchestrator export $job --format cmd > "$OUT/tp1-export.txt" 2>&1
   cmd=$(grep -v '^#' "$OUT/tp1-export.txt" | tail -1)
   hand_launch) &
  (CUDA_VISIBLE_DEVICES=1 timeout 420 python3 docs/gpu/vllm_vs_refserver.py --model-dir $MODEL --preset 1b \
    --out "$OUT/vllm-vs-refserver.json" --logs /tmp/vs-logs > "$OUT/vs.log" 2>&1; cp -r /tmp/vs-logs reports/) &
  wait
  tail -22 "$OUT/tp1.log"; tail -3 "$OUT/tp1-export.txt"; cat "$OUT/vs.log"
  tar czf "$OUT/tp1.tgz" reports/h200-vllm-1b reports/vs-logs ;;
tpn)
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .devwhl/*.whl 2>/dev/null
  name=$(study_name "$JOB"); logs=reports/$name/logs
  if [ "${KILL:-1}" = 1 ]; then
  python3 -m orchestrator run "$JOB" > "$OUT/$name-killed.log" 2>&1 &
  driver=$!
  for i in $(seq 1 400); do  # kill -9 the driver once the second trial's server is up
    n=$(ls $logs/trial-*.log 2>/dev/null | wc -l)
    [ "$n" -ge 2 ] && grep -q "Application startup complete" "$(ls -t $logs/trial-*.log | head -1)" && break
    sleep 1
  done
  { echo "kill -9 of the driver at $(date +%T.%N)"; kill -9 $driver
    for i in $(seq 1 30); do
      echo "t=${i}s used_MiB=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')" \
           "apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
      sleep 1
    done
    ps -eo pid,args | grep -E "VLLM|vllm|EngineCore" | grep -v grep; } 2>&1 | tee "$OUT/$name-kill.txt"
  fi
  run_study "$JOB" ${TPN_S:-300} > "$OUT/$name.log" 2>&1
  tail -30 "$OUT/$name.log"
  tar czf "$OUT/$name.tgz" reports/$name ;;
tp1b)
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .devwhl/*.whl 2>/dev/null
  job=jobs/h200-vllm-1b.yaml
  mkdir -p reports/h200-vllm-1b && cp docs/gpu/h200-vllm-1b/study.journal reports/h200-vllm-1b/
  python3 -m orchestrator export $job --format cmd > "$OUT/tp1-export.txt" 2>&1
  (hand_launch
   CUDA_VISIBLE_DEVICES=0 RAY_TMPDIR=/tmp/ray-cmp timeout ${CMP_S:-400} python3 -m orchestrator compare "$job" \
     --concurrency 1,2,10,64 --rounds ${ROUNDS:-2} 2>&1 | grep -v -e WARNING -e token-auth > "$OUT/compare.log"
   python3 -m orchestrator report "$job" >/dev/null 2>&1) &
  (CUDA_VISIBLE_DEVICES=1 timeout 420 python3 docs/gpu/vllm_vs_refserver.py --model-dir $MODEL --preset 1b \
    --out "$OUT/vllm-vs-refserver.json" --logs /tmp/vs-logs > "$OUT/vs.log" 2>&1; cp -r /tmp/vs-logs reports/) &
  wait
  cat "$OUT/tp1-export.txt" "$OUT/vs.log"; tail -25 "$OUT/compare.log"
  nvidia-smi --query-gpu=index,memory.used --format=csv; nvidia-smi --query-compute-apps=pid --format=csv,noheader
  tar czf "$OUT/tp1b.tgz" reports/h200-vllm-1b reports/vs-logs ;;
study)
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .devwhl/*.whl 2>/dev/null
  name=$(study_name "$JOB"); restore_study "$name"
  run_study "$JOB" ${SECS:-480} > "$OUT/$name.log" 2>&1
  python3 -m orchestrator status "$JOB" --json > "$OUT/$name-status.json" 2>&1
  tail -40 "$OUT/$name.log"
  rm -rf /tmp/keep/$name; mkdir -p /tmp/keep; cp -r reports/$name /tmp/keep/
  tar czf "$OUT/$name.tgz" reports/$name ;;
bench)
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .devwhl/*.whl 2>/dev/null
  sets=(); for s in $SETS; do sets+=(--set "$s"); done
  timeout 500 python3 -m orchestrator bench "$JOB" "${sets[@]}" 2>&1 | grep -v -e WARNING -e token-auth | tee "$OUT/bench-$(basename "$JOB" .yaml).log" ;;
crosscheck)
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .devwhl/*.whl 2>/dev/null
  name=$(study_name "$JOB"); restore_study "$name"; args=()
  if [ "${CONFIG:-}" = export ]; then
    python3 -m orchestrator export "$JOB" --concurrency "${LEVEL:-1}" --format yaml -o /tmp/xc-config.yaml 2>&1 | tail -2
    grep '^#' /tmp/xc-config.yaml | tee "$OUT/xc-$name-export.txt"; args=(--config /tmp/xc-config.yaml)
  fi
  for s in ${SETS:-}; do args+=(--set "$s"); done
  [ -n "${LEVELS:-}" ] && args+=(--levels "$LEVELS")
  timeout $((${SECS:-480} + 200)) python3 docs/gpu/crosscheck.py "$JOB" "${args[@]}" --launches "${LAUNCHES:-3}" \
    --rounds "${ROUNDS:-2}" --budget-s "${SECS:-480}" --out /tmp/xc-$name 2>&1 | grep -v -e WARNING -e token-auth \
    | tee "$OUT/xc-$name.log"
  (cd /tmp && tar czf "$OUT/xc-$name.tgz" xc-$name) ;;
capture)
  timeout 560 python3 docs/gpu/vllm_capture.py --model $MODEL --draft $MODEL-l2 --out "$OUT/capture" \
    --configs "${CONFIGS:-base,base-nccl,ngram,draft}" --limit "${LIMIT:-300}" 2>&1 | tee "$OUT/capture.log"
  (cd "$OUT" && tar czf capture.tgz capture && rm -rf capture) ;;
compare)
  job=jobs/h200-vllm-1b.yaml
  CUDA_VISIBLE_DEVICES=0 timeout 540 python3 -m orchestrator compare "$job" --concurrency 1,2,10,64 \
    --rounds ${ROUNDS:-2} 2>&1 | grep -v -e WARNING -e token-auth | tee "$log"
  python3 -m orchestrator report "$job" >/dev/null 2>&1
  tar czf "$OUT/compare.tgz" reports/h200-vllm-1b ;;
esac
