#!/usr/bin/env bash
# Speculative decoding on a real vLLM 0.26.0, one H200 (issue 25; docs/benchmarks.md, "Speculative
# decoding"). On the machine docs/gpu/vllm_session.sh's STEP=part1 .. STEP=install set up (vLLM in
# /tmp/vsite, the `1b` exported to /tmp/models/refserver-1b and its first 2 layers to
# /tmp/models/refserver-1b-l2), one step per run:
#   STEP=study  carry .devwhl  the study jobs/h200-vllm-1b-spec.yaml: {none, ngram, draft_model} x
#                              {2, 4} drafted tokens, decode timed on the bundled prompt set, acceptance
#                              from vLLM's /metrics; then status --json, the report and the export
#                              (5 launches: if a call's 10 minutes end first, run it again: the study
#                              continues where it stopped)
#   STEP=short  carry .devwhl  the same 5 configs, each launched once by `ncclsweep bench` with decode
#                              timed on ONE short prompt: PROMPTS=hello (jobs/h200-vllm-1b-spec-hello.yaml)
#                              and/or old (the same job with the 24-word prompt the benchmark used before
#                              the prompt set); default PROMPTS=hello,old (10 launches: split the runs
#                              with CONFIGS=none,ngram2 etc. if a call's 10 minutes do not suffice)
# Every step writes under $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1
export PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0 PYTHONPATH=/tmp/vsite:/tmp/site:$PWD
JOB=jobs/h200-vllm-1b-spec.yaml
HELLO=jobs/h200-vllm-1b-spec-hello.yaml
OLD="Write a detailed, step-by-step explanation of how a ring all-reduce works across eight GPUs, then summarize its cost in one sentence."
DRAFT=/tmp/models/refserver-1b-l2
[ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .devwhl/*.whl 2>/dev/null
sets() {  # the --set words of one config of search_spaces/vllm-1b-spec.yaml
  case "$1" in
  none)   echo "--set speculative.method=none" ;;
  ngram2) echo "--set speculative.method=ngram --set speculative.num_tokens=2 --set speculative.prompt_lookup_max=4 --set speculative.prompt_lookup_min=2" ;;
  ngram4) echo "--set speculative.method=ngram --set speculative.num_tokens=4 --set speculative.prompt_lookup_max=4 --set speculative.prompt_lookup_min=2" ;;
  draft2) echo "--set speculative.method=draft_model --set speculative.num_tokens=2 --set speculative.model=$DRAFT" ;;
  draft4) echo "--set speculative.method=draft_model --set speculative.num_tokens=4 --set speculative.model=$DRAFT" ;;
  esac
}
case "$STEP" in
study)
  timeout -k 20 ${STUDY_S:-560} python3 -m orchestrator run $JOB 2>&1 | grep -v -e WARNING -e token-auth \
    > "$OUT/spec-study.log"
  python3 -m orchestrator status $JOB > "$OUT/spec-status.txt" 2>&1
  python3 -m orchestrator status $JOB --json > "$OUT/spec-status.json" 2>&1
  python3 -m orchestrator report $JOB > /dev/null 2>&1 && cp reports/h200-vllm-1b-spec/report.md "$OUT/spec-report.md"
  python3 -m orchestrator export $JOB --format yaml > "$OUT/spec-export.yaml" 2>&1
  tail -12 "$OUT/spec-study.log"; cat "$OUT/spec-status.txt"
  tar czf "$OUT/spec-study.tgz" reports/h200-vllm-1b-spec ;;
short)
  sed "s|^bench: {prompt: Hello,|bench: {prompt: \"$OLD\",|; s|^study: h200-vllm-1b-spec-hello$|study: h200-vllm-1b-spec-old|" \
    $HELLO > jobs/h200-vllm-1b-spec-old.yaml
  for prompt in $(echo "${PROMPTS:-hello,old}" | tr , ' '); do
    job=$HELLO; [ "$prompt" = old ] && job=jobs/h200-vllm-1b-spec-old.yaml
    for config in $(echo "${CONFIGS:-none,ngram2,ngram4,draft2,draft4}" | tr , ' '); do
      # shellcheck disable=SC2046  # the --set words are meant to split
      timeout -k 20 300 python3 -m orchestrator bench $job $(sets $config) --json \
        > "$OUT/spec-bench-$prompt-$config.json" 2> "$OUT/spec-bench-$prompt-$config.err"
      python3 - "$OUT/spec-bench-$prompt-$config.json" "$prompt" "$config" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print(sys.argv[2], sys.argv[3], "no result"); sys.exit()
m = r.get("metrics") or {}
print(f"{sys.argv[2]:6} {sys.argv[3]:7} {r.get('outcome')} decode {m.get('decode_tok_s')} tok/s "
      f"acceptance {m.get('acceptance_rate')} mean accepted length {m.get('mean_accepted_length')}")
PY
    done
  done | tee "$OUT/spec-short.txt"
  rm -f jobs/h200-vllm-1b-spec-old.yaml ;;
esac
