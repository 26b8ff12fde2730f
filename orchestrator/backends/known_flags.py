"""Command-line flags of the current vLLM and SGLang releases, read from their own parsers.

Where the data came from (so it can be checked and regenerated):

- vLLM 0.33.0: ``pip download vllm==0.33.0 --no-deps`` (wheel
  ``vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl``), unpacked without installing, its
  pure-Python dependencies on a private ``PYTHONPATH``, ``VLLM_TARGET_DEVICE=cpu``; the
  parser ``vllm serve`` uses, ``vllm.entrypoints.common.cli_args.make_arg_parser
  (FlexibleArgumentParser())``, dumped by ``describe_parser`` below: 435 option strings.
- SGLang 0.5.23: ``pip download sglang==0.5.23 --no-deps``, likewise; the parser of
  ``python -m sglang.launch_server``, ``ServerArgs.add_cli_args(argparse.ArgumentParser())``
  from ``sglang.srt.server_args``: 561 option strings.

Regenerate in an environment where the package imports (``--write`` rewrites this file)::

    python -m orchestrator.backends.known_flags vllm [--write]
    python -m orchestrator.backends.known_flags sglang [--write]

Each data line is ``<flag> <kind>[ neg=<flag>][ deprecated[=<replacement>]]`` with kind
``switch`` (takes no value), ``value`` (one value) or ``list`` (one or more values);
``neg`` is the spelling that sets a switch false (vLLM's ``--enable-x``/``--disable-x``
pairs, ``argparse.BooleanOptionalAction``'s ``--no-x``). Hidden aliases a parser still
accepts (vLLM's ``--no-enable-x``) are not listed: a spelling the release hides is never
emitted. Older releases' spellings of the flags the backends emit themselves are in
the backends' own version tables (``orchestrator.backends.vllm`` / ``.sglang``).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


@dataclass(frozen=True)
class FlagInfo:
    flag: str
    kind: str  # switch | value | list
    negative: str | None = None  # spelling that sets a switch false
    deprecated: bool = False
    replacement: str | None = None


@dataclass(frozen=True)
class FlagTable:
    """The flags of one release of one server."""

    package: str
    version: str
    source: str
    data: str

    @cached_property
    def flags(self) -> dict[str, FlagInfo]:
        out = {}
        for line in self.data.strip().splitlines():
            parts = line.split()
            flag, kind = parts[0], parts[1]
            negative = replacement = None
            deprecated = False
            for extra in parts[2:]:
                if extra.startswith("neg="):
                    negative = extra[4:]
                elif extra.startswith("deprecated"):
                    deprecated = True
                    replacement = extra.partition("=")[2] or None
            out[flag] = FlagInfo(flag, kind, negative, deprecated, replacement)
        return out

    @cached_property
    def negatives(self) -> dict[str, str]:
        """negative spelling -> the positive flag it belongs to."""
        return {info.negative: flag for flag, info in self.flags.items() if info.negative}

    def knows(self, flag: str) -> bool:
        return flag in self.flags or flag in self.negatives


def describe_parser(parser: argparse.ArgumentParser) -> list[str]:
    """One data line per long option of an argparse parser (see the module docstring)."""
    lines = {}
    for action in parser._actions:  # noqa: SLF001 - argparse keeps them nowhere public
        if isinstance(action, argparse._HelpAction):  # noqa: SLF001
            continue
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs:
            continue
        cls = type(action).__name__
        help_text = (action.help or "") if action.help is not argparse.SUPPRESS else ""
        deprecated = cls.startswith("Deprecated") or bool(
            re.match(r"\(?deprecated", help_text.strip(), re.I)) or " is deprecated" in help_text
        replacement = getattr(action, "new_flag", None)
        negatives = set(getattr(action, "negative_option_strings", ()) or ())
        if isinstance(action, argparse.BooleanOptionalAction) and not negatives:
            negatives = {s for s in longs if s.startswith("--no-")}
        if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
            kind = "switch"
        elif action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 1:
            kind = "list"
        else:
            kind = "value"
        positives = [s for s in longs if s not in negatives]
        for flag in positives:
            neg = None
            if negatives:
                # pair --enable-x with --disable-x, --x with --no-x
                body = flag[2:]
                for prefix, inverse in (("enable-", "disable-"), ("disable-", "enable-")):
                    if body.startswith(prefix) and f"--{inverse}{body[len(prefix):]}" in negatives:
                        neg = f"--{inverse}{body[len(prefix):]}"
                if neg is None and f"--no-{body}" in negatives:
                    neg = f"--no-{body}"
                if neg is None and len(negatives) == 1:
                    neg = next(iter(negatives))
            line = f"{flag} {kind}"
            if neg:
                line += f" neg={neg}"
            if deprecated:
                line += " deprecated" + (f"={replacement}" if replacement and " " not in replacement else "")
            lines[flag] = line
    return [lines[k] for k in sorted(lines)]


def _build_parser(package: str) -> tuple[argparse.ArgumentParser, str]:
    if package == "vllm":
        import importlib.metadata

        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        return make_arg_parser(FlexibleArgumentParser()), importlib.metadata.version("vllm")
    if package == "sglang":
        import sglang
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        return parser, sglang.__version__
    raise SystemExit(f"unknown package {package!r}; use vllm or sglang")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="print (or --write) the flag table of the installed vllm/sglang")
    ap.add_argument("package", choices=["vllm", "sglang"])
    ap.add_argument("--write", action="store_true", help="replace the table in this file")
    args = ap.parse_args(argv)
    parser, version = _build_parser(args.package)
    lines = describe_parser(parser)
    block = "\n".join(lines)
    if not args.write:
        print(f"# {args.package} {version}: {len(lines)} long options")
        print(block)
        return 0
    path = Path(__file__)
    text = path.read_text()
    name = args.package.upper()
    start = text.index(f"_{name}_DATA = \"\"\"") + len(f"_{name}_DATA = \"\"\"")
    end = text.index('"""', start)
    text = text[:start] + "\n" + block + "\n" + text[end:]
    text = re.sub(rf'(_{name}_VERSION = )"[^"]*"', rf'\g<1>"{version}"', text)
    path.write_text(text)
    print(f"wrote {len(lines)} {args.package} {version} flags to {path}")
    return 0


_VLLM_VERSION = "0.33.0"
_SGLANG_VERSION = "0.5.23"

_VLLM_DATA = """
--additional-config value
--aggregate-engine-logging switch
--all2all-backend value
--allow-credentials switch neg=--no-allow-credentials
--allow-deprecated-quantization switch neg=--no-allow-deprecated-quantization
--allowed-headers value
--allowed-local-media-path value
--allowed-media-domains list
--allowed-methods value
--allowed-origins value
--anthropic-disabled-thinking-effort value
--api-key list
--api-server-count value
--async-scheduling switch neg=--no-async-scheduling
--attention-backend value
--attention-config value
--aux-output-config value
--block-size value
--chat-template value
--chat-template-content-format value
--code-revision value
--cohere-format value
--cohere-is-reasoning-model switch neg=--no-cohere-is-reasoning-model
--collect-detailed-traces list
--compilation-config value
--config value
--config-format value
--convert value
--cp-kv-cache-interleave-size value
--cpu-distributed-timeout-seconds value
--cpu-offload-gb value
--cpu-offload-params list
--cudagraph-capture-sizes list
--cudagraph-metrics switch neg=--no-cudagraph-metrics
--custom-histogram-buckets value
--data-parallel-address value
--data-parallel-backend value
--data-parallel-external-lb switch neg=--no-data-parallel-external-lb
--data-parallel-hybrid-lb switch neg=--no-data-parallel-hybrid-lb
--data-parallel-multi-port-external-lb switch
--data-parallel-rank value
--data-parallel-rpc-port value
--data-parallel-size value
--data-parallel-size-local value
--data-parallel-start-rank value
--data-parallel-supervisor-port value
--dbo-decode-token-threshold value
--dbo-prefill-token-threshold value
--dcp-comm-backend value
--dcp-kv-cache-interleave-size value
--dcp-q-replicate switch neg=--no-dcp-q-replicate
--decode-context-parallel-size value
--default-chat-template-kwargs value
--default-mm-loras value
--device-ids value
--device-memory-utilization value
--diffusion-config value
--disable-access-log-for-endpoints value
--disable-cascade-attn switch neg=--enable-cascade-attn deprecated
--disable-chunked-mm-input switch neg=--enable-chunked-mm-input
--disable-custom-all-reduce switch neg=--enable-custom-all-reduce
--disable-fastapi-docs switch neg=--enable-fastapi-docs
--disable-hybrid-kv-cache-manager switch neg=--enable-hybrid-kv-cache-manager
--disable-log-stats switch
--disable-nccl-for-dp-synchronization switch neg=--enable-nccl-for-dp-synchronization
--disable-sliding-window switch neg=--enable-sliding-window
--disable-uvicorn-access-log switch neg=--enable-uvicorn-access-log
--distributed-executor-backend value
--distributed-timeout-seconds value
--download-dir value
--dp-supervisor-probe-failure-threshold value
--dp-supervisor-probe-interval-s value
--dp-supervisor-probe-timeout-s value
--dp-sync-interval value
--dtype value
--ec-manager-config value
--ec-transfer-config value
--elastic-ep-max-dp-size value
--enable-auto-tool-choice switch neg=--disable-auto-tool-choice
--enable-batch-sharded-sampling switch neg=--disable-batch-sharded-sampling
--enable-chunked-prefill switch neg=--disable-chunked-prefill
--enable-cumem-allocator switch neg=--disable-cumem-allocator
--enable-dbo switch neg=--disable-dbo
--enable-elastic-ep switch neg=--disable-elastic-ep
--enable-ep-weight-filter switch neg=--disable-ep-weight-filter
--enable-eplb switch neg=--disable-eplb
--enable-expert-parallel switch neg=--disable-expert-parallel
--enable-fault-tolerance switch neg=--disable-fault-tolerance
--enable-flash-late-interaction switch neg=--disable-flash-late-interaction
--enable-flashinfer-autotune switch neg=--disable-flashinfer-autotune
--enable-force-include-usage switch neg=--disable-force-include-usage
--enable-hc-sp switch neg=--disable-hc-sp
--enable-layerwise-nvtx-tracing switch neg=--disable-layerwise-nvtx-tracing
--enable-log-deltas switch neg=--disable-log-deltas
--enable-log-outputs switch neg=--disable-log-outputs
--enable-log-requests switch neg=--disable-log-requests
--enable-logging-iteration-details switch neg=--disable-logging-iteration-details
--enable-lora switch neg=--disable-lora
--enable-mamba-cache-stochastic-rounding switch neg=--disable-mamba-cache-stochastic-rounding
--enable-mamba-shared-prefix-checkpoint switch neg=--disable-mamba-shared-prefix-checkpoint
--enable-mfu-metrics switch neg=--disable-mfu-metrics
--enable-mixed-moe-lora-format switch neg=--disable-mixed-moe-lora-format
--enable-mm-embeds switch neg=--disable-mm-embeds
--enable-moe-shared-loras switch neg=--disable-moe-shared-loras
--enable-nccl-comm-suspend switch neg=--disable-nccl-comm-suspend
--enable-offline-docs switch neg=--disable-offline-docs
--enable-per-request-metrics switch neg=--disable-per-request-metrics
--enable-prefix-caching switch neg=--disable-prefix-caching
--enable-prompt-embeds switch neg=--disable-prompt-embeds
--enable-prompt-tokens-details switch neg=--disable-prompt-tokens-details
--enable-request-id-headers switch neg=--disable-request-id-headers
--enable-return-routed-experts switch neg=--disable-return-routed-experts
--enable-scale-out switch neg=--disable-scale-out
--enable-server-load-tracking switch neg=--disable-server-load-tracking
--enable-shm-tensor-arena switch neg=--disable-shm-tensor-arena
--enable-sleep-mode switch neg=--disable-sleep-mode
--enable-ssl-refresh switch neg=--disable-ssl-refresh
--enable-tokenizer-info-endpoint switch neg=--disable-tokenizer-info-endpoint
--enable-tower-connector-lora switch neg=--disable-tower-connector-lora
--enable-trace-replay switch neg=--disable-trace-replay
--enforce-eager switch neg=--no-enforce-eager
--engram-config value
--eplb-config value
--exclude-tools-when-tool-choice-none switch neg=--no-exclude-tools-when-tool-choice-none
--expert-placement-strategy value
--fail-on-environ-validation switch neg=--no-fail-on-environ-validation
--fault-tolerance-config value
--fingerprint-mode value
--fingerprint-value value
--fully-sharded-loras switch neg=--no-fully-sharded-loras
--gdn-prefill-backend value
--generation-config value
--gpu-memory-utilization value
--grpc switch
--grpc-port value
--h11-max-header-count value
--h11-max-incomplete-event-size value
--headless switch
--hf-config-path value
--hf-overrides value
--hf-token value
--host value
--ignore-patterns list
--interleave-mm-strings switch neg=--no-interleave-mm-strings
--io-processor-plugin value
--ir-op-priority value
--jit-monitor-mode value
--jit-monitor-verbose switch neg=--no-jit-monitor-verbose
--kda-decode-backend value
--kda-prefill-backend value
--kernel-config value
--kv-cache-dtype value
--kv-cache-dtype-skip-layers list
--kv-cache-memory-bytes value
--kv-cache-metrics switch neg=--no-kv-cache-metrics
--kv-cache-metrics-sample value
--kv-events-config value
--kv-offloading-backend value
--kv-offloading-size value
--kv-sharing-fast-prefill switch neg=--no-kv-sharing-fast-prefill
--kv-transfer-config value
--language-model-only switch neg=--no-language-model-only
--limit-mm-per-prompt value
--linear-backend value
--load-format value
--log-config-file value deprecated
--log-error-stack switch neg=--no-log-error-stack
--log-level value
--logging-config value
--logits-processors list
--logprobs-mode value
--long-prefill-token-threshold value
--long-prefill-token-threshold-adaptive switch neg=--no-long-prefill-token-threshold-adaptive
--lora-dtype value
--lora-modules list
--lora-target-modules list
--mamba-backend value
--mamba-block-size value
--mamba-cache-dtype value
--mamba-cache-mode value deprecated
--mamba-cache-philox-rounds value
--mamba-ssm-cache-dtype value
--mamba-ssu-algorithm value
--master-addr value
--master-port value
--max-cpu-loras value
--max-cudagraph-capture-size value
--max-log-len value
--max-logprobs value
--max-lora-cls-labels value
--max-lora-rank value
--max-loras value
--max-model-len value
--max-num-active-seqs value
--max-num-batched-tokens value
--max-num-queued-reqs value
--max-num-queued-tokens value
--max-num-scheduled-tokens value
--max-num-seqs value
--max-parallel-loading-workers value
--media-io-kwargs value
--middleware value
--mm-device-do-normalize switch neg=--no-mm-device-do-normalize
--mm-encoder-attn-backend value
--mm-encoder-attn-dtype value
--mm-encoder-fp8-scale-path value
--mm-encoder-fp8-scale-save-margin value
--mm-encoder-fp8-scale-save-path value
--mm-encoder-only switch neg=--no-mm-encoder-only
--mm-encoder-tp-mode value
--mm-hasher-algorithm value
--mm-ipc-gpu-memory-gb value
--mm-processor-cache-gb value
--mm-processor-cache-type value
--mm-processor-device value
--mm-processor-kwargs value
--mm-shm-cache-max-object-size-mb value
--mm-tensor-ipc value
--model value
--model-class-overrides value
--model-impl value
--model-loader-extra-config value
--moe-backend value
--monokernel switch neg=--no-monokernel
--nnodes value
--node-rank value
--num-gpu-blocks-override value
--numa-bind switch neg=--no-numa-bind
--numa-bind-cpus list
--numa-bind-nodes list
--offload-backend value
--offload-group-size value
--offload-num-in-group value
--offload-params list
--offload-prefetch-step value
--optimization-level value
--otlp-traces-endpoint value
--override-generation-config value
--per-request-spec-decode-metrics value
--performance-mode value
--pipeline-parallel-size value
--pooler-config value
--port value
--prefill-context-parallel-size value
--prefill-schedule-interval value
--prefix-cache-retention-interval value
--prefix-caching-hash-algo value
--prefix-match-unit value
--profiler-config value
--pt-load-map-location value
--quantization value
--quantization-config value
--ray-workers-use-nsight switch neg=--no-ray-workers-use-nsight
--reasoning-config value
--reasoning-effort-map value
--reasoning-parser value
--reasoning-parser-plugin value
--renderer-num-workers value
--replayssm-buffer-len value
--response-role value
--return-sampling-mask switch neg=--no-return-sampling-mask
--return-tokens-as-token-ids switch neg=--no-return-tokens-as-token-ids
--revision value
--root-path value
--runner value
--safetensors-load-strategy value
--safetensors-prefetch-block-size value
--safetensors-prefetch-num-threads value
--scheduler-cls value
--scheduler-reserve-full-isl switch neg=--no-scheduler-reserve-full-isl
--scheduling-policy value
--seed value
--served-model-name list
--show-hidden-metrics-for-version value
--shutdown-timeout value
--skip-mm-profiling switch neg=--no-skip-mm-profiling
--skip-tokenizer-init switch neg=--no-skip-tokenizer-init
--sleep-mode-backend value
--sleep-mode-offload-cudagraph switch neg=--no-sleep-mode-offload-cudagraph
--sleep-preserve-parameter-names list
--sparse-indexer-topk-backend value
--spec-method value
--spec-model value
--spec-tokens value
--specialize-active-lora switch neg=--no-specialize-active-lora
--speculative-config value
--sse-keep-alive-interval value
--ssl-ca-certs value
--ssl-cert-reqs value
--ssl-certfile value
--ssl-ciphers value
--ssl-keyfile value
--stream-interval value
--structured-outputs-config value
--swa-bounded-replay switch neg=--no-swa-bounded-replay
--tensor-parallel-size value
--tokenizer value
--tokenizer-mode value
--tokenizer-revision value
--tokens-only switch neg=--no-tokens-only
--tool-call-parser value
--tool-parser-plugin value
--tool-server value
--tool-strict-level value
--trust-remote-code switch neg=--no-trust-remote-code
--trust-request-chat-template switch neg=--no-trust-request-chat-template
--trust-request-mm-kwargs switch neg=--no-trust-request-mm-kwargs
--ubatch-size value
--uds value
--use-fp64-gumbel switch neg=--no-use-fp64-gumbel
--use-replayssm switch neg=--no-use-replayssm
--use-tqdm-on-load switch neg=--no-use-tqdm-on-load
--uvicorn-log-level value
--video-pruning-method value
--video-pruning-rate value
--watchdog-config value
--watermark value
--watermark-config value
--weight-transfer-config value
--worker-cls value
--worker-extension-cls value
"""

_SGLANG_DATA = """
--abort-on-priority-when-disabled switch
--admin-api-key value
--allow-auto-truncate switch
--allowed-media-domains list
--api-key value
--asr-max-buffer-seconds value
--asr-max-concurrent-sessions value
--attention-backend value
--attention-context-parallel-size value
--attention-data-parallel-size value
--attn-cp-size value
--attn-dp-size value
--base-gpu-id value
--batch-notify-size value
--bf16-gemm-backend value
--boundary-reduction value
--bucket-e2e-request-latency list
--bucket-inter-token-latency list
--bucket-time-to-first-token list
--c128-page-size value
--chat-template value
--checkpoint-engine-wait-weights-before-ready switch
--chunked-prefill-size value
--completion-template value
--config value
--constrained-json-disable-any-whitespace switch
--constrained-json-max-whitespace-cnt value
--constrained-json-whitespace-pattern value
--context-bucket value
--context-length value
--cp-strategy value
--cpu-offload-gb value
--crash-dump-folder value
--cuda-graph-backend-decode value
--cuda-graph-backend-prefill value
--cuda-graph-bs-decode list
--cuda-graph-bs-prefill list
--cuda-graph-config value
--cuda-graph-max-bs-decode value
--cuda-graph-max-bs-prefill value
--cuda-graph-max-seq-len-prefill value
--cuda-graph-prefill-max-context value
--custom-weight-loader list
--data-parallel-size value
--dcp-comm-backend value
--dcp-replicate-q-proj switch neg=--no-dcp-replicate-q-proj
--dcp-size value
--debug-cuda-graph switch
--debug-tensor-dump-input-file value
--debug-tensor-dump-layers list
--debug-tensor-dump-output-folder value
--decode-attention-backend value
--decode-context-parallel-size value
--decode-log-interval value
--decoupled-spec-bind-endpoint value
--decoupled-spec-connect-endpoints value
--decoupled-spec-rank value
--decoupled-spec-role value
--decrypted-config-file value
--decrypted-draft-config-file value
--deepep-config value
--deepep-dispatcher-output-dtype value
--deepep-mode value
--deepep-v2-mode value
--default-chat-template-kwargs value
--default-priority-value value
--delete-ckpt-after-loading switch
--detokenizer-worker-num value
--device value
--disable-aiter-allreduce-fusion-in-decode switch
--disable-aiter-allreduce-fusion-in-prefill switch
--disable-attn-tp-gather switch
--disable-chunked-prefix-cache switch
--disable-cuda-graph switch deprecated=--cuda-graph-backend-{decode,prefill}=disabled
--disable-cuda-graph-padding switch
--disable-custom-all-reduce switch
--disable-decode-cuda-graph switch
--disable-fast-image-processor switch deprecated
--disable-flashinfer-autotune switch
--disable-flashinfer-cutlass-moe-fp4-allgather switch
--disable-hybrid-swa-memory switch
--disable-outlines-disk-cache switch
--disable-overlap-schedule switch
--disable-prefill-cuda-graph switch
--disable-priority-preemption switch
--disable-radix-cache switch
--disable-shared-experts-fusion switch
--disable-tokenizer-batch-decode switch
--disaggregation-bootstrap-port value
--disaggregation-decode-allocation-policy value
--disaggregation-decode-enable-offload-kvcache switch
--disaggregation-decode-enable-radix-cache switch
--disaggregation-decode-extra-slots value
--disaggregation-decode-host-receive-threshold value
--disaggregation-decode-polling-interval value
--disaggregation-decode-retraction-backup value
--disaggregation-enable-kv-checksum switch
--disaggregation-ib-device value
--disaggregation-mode value
--disaggregation-transfer-backend value
--dist-init-addr value
--dist-timeout value
--dllm-algorithm value
--dllm-algorithm-config value
--dllm-fdfo switch neg=--no-dllm-fdfo
--download-dir value
--dp-size value
--dsa-decode-backend value
--dsa-paged-mqa-logits-backend value
--dsa-prefill-backend value
--dsa-topk-backend value
--dsa-triton-union value
--dsv4-attn-backend value
--dsv4-prefill-backend value
--dtype value
--dwdp-size value
--dynamic-batch-tokenizer-batch-size value
--dynamic-batch-tokenizer-batch-timeout value
--elastic-ep-backend value
--elastic-ep-initial-size value
--elastic-ep-join-mode value
--elastic-ep-join-rank-offset value
--elastic-ep-scale-timeout value
--enable-adaptive-dispatch-to-encoder switch
--enable-aiter-allreduce-fusion switch
--enable-amd-monokernel switch
--enable-attn-tp-input-scattered switch
--enable-broadcast-mm-inputs-process switch
--enable-cache-report switch
--enable-cp-decode-attn-tp switch
--enable-cudagraph-gc switch
--enable-custom-logit-processor switch
--enable-decoder-swa-bounded-replay switch neg=--no-enable-decoder-swa-bounded-replay
--enable-deepseek-v4-fp4-indexer switch
--enable-dense-mlp-attn-tp switch
--enable-deterministic-inference switch
--enable-dp-attention switch deprecated
--enable-dp-attention-local-control-broadcast switch
--enable-dp-lm-head switch
--enable-draft-weights-cpu-backup switch
--enable-dsa-cache-layer-split switch
--enable-dsa-fused-indexer switch neg=--no-enable-dsa-fused-indexer
--enable-dynamic-batch-tokenizer switch
--enable-dynamic-chunking switch
--enable-elastic-expert-backup switch
--enable-encoder-swa-bounded-replay switch
--enable-eplb switch
--enable-flashinfer-allreduce-fusion switch deprecated
--enable-flexkv switch
--enable-forward-pass-metrics switch
--enable-fp32-lm-head switch
--enable-fused-moe-sum-all-reduce switch
--enable-fused-qk-norm-rope switch neg=--no-enable-fused-qk-norm-rope
--enable-hicache switch
--enable-hierarchical-cache switch
--enable-hisparse switch
--enable-http-worker-reuseport switch
--enable-http2 switch
--enable-int8-mamba-checkpoint switch
--enable-kv-cache-sharding switch
--enable-layernorm-sp switch
--enable-layerwise-nvtx-marker switch
--enable-lean-attention switch
--enable-linear-replayssm switch
--enable-linear-replayssm-spec switch
--enable-linker-mla-dedup switch
--enable-lmcache switch
--enable-lora switch
--enable-lora-overlap-loading switch
--enable-mamba-cache-stochastic-rounding switch
--enable-megamoe-for-layernorm-sp switch
--enable-memory-saver switch
--enable-metrics switch
--enable-metrics-for-all-schedulers switch
--enable-mfu-metrics switch
--enable-mis switch
--enable-mixed-chunk switch
--enable-mm-global-cache switch
--enable-mscclpp switch
--enable-multi-layer-eagle switch
--enable-multimodal switch
--enable-nccl-nvls switch
--enable-nvidia-megakernel switch
--enable-p2p-check switch
--enable-page-major-kv-layout switch
--enable-paged-experts switch
--enable-pd-role-switch switch
--enable-pdmux switch
--enable-precise-embedding-interpolation switch
--enable-prefill-cp switch
--enable-prefill-delayer switch
--enable-prefix-mm-cache switch
--enable-priority-scheduling switch
--enable-profile-cuda-graph switch
--enable-quant-communications switch
--enable-request-time-stats-logging switch
--enable-response-store switch
--enable-return-aux-hidden-states switch
--enable-return-hidden-states switch
--enable-return-indexer-topk switch
--enable-return-routed-experts switch
--enable-scattered-sconv switch
--enable-session-radix-cache switch
--enable-shared-experts-attn-tp switch
--enable-single-batch-overlap switch
--enable-ssl-refresh switch
--enable-streaming-session switch
--enable-strict-thinking switch
--enable-symm-mem switch
--enable-tf32-matmul switch neg=--no-enable-tf32-matmul
--enable-tokenizer-batch-encode switch
--enable-torch-compile switch
--enable-torch-compile-debug-mode switch
--enable-torch-symm-mem switch
--enable-tp-lm-head-all-to-all switch neg=--no-enable-tp-lm-head-all-to-all
--enable-trace switch
--enable-two-batch-overlap switch
--enable-unified-cache-external-linker switch
--enable-unified-memory switch
--enable-w4a4-mxfp4-megamoe switch
--enable-waterfill switch
--enable-watermark switch
--enable-weights-cpu-backup switch
--encoder-bootstrap-port value
--encoder-only switch
--encoder-register-urls list
--encoder-transfer-backend value
--encoder-urls list
--enforce-disable-flashinfer-allreduce-fusion switch
--enforce-shared-experts-fusion switch
--engine-info-bootstrap-port value
--ep value
--ep-dispatch-algorithm value
--ep-num-redundant-experts value
--ep-size value
--eplb-algorithm value
--eplb-min-rebalancing-utilization-threshold value
--eplb-rebalance-layers-per-chunk value
--eplb-rebalance-num-iterations value
--expert-balancedness-report-mode value
--expert-distribution-recorder-buffer-size value
--expert-distribution-recorder-mode value
--expert-parallel-size value
--experts-shared-outer-loras switch neg=--no-experts-shared-outer-loras
--export-metrics-to-file switch
--export-metrics-to-file-dir value
--extra-metric-labels value
--fastapi-root-path value
--file-storage-path value
--flashinfer-a2a-dispatch-type value
--flashinfer-allreduce-fusion-backend value
--flashinfer-autotune-skip-ops list
--flashinfer-mla-disable-ragged switch
--flashinfer-mxfp4-moe-precision value
--flexkv-config-file value
--forward-hooks value
--forward-pass-metrics-ipc-name value
--forward-pass-metrics-worker-id value
--fp4-gemm-backend value
--fp8-gemm-backend value
--fuseep-mode value
--gated-launch-port value
--gc-threshold list
--gc-warning-threshold-secs value
--generation-tokens-buckets list
--gpu-id-step value
--grammar-backend value
--grpc-http-sidecar-port value
--grpc-mode switch deprecated
--grpc-port value
--grpc-response-timeout-secs value
--hf-chat-template-name value
--hicache-host-memory-fraction value
--hicache-host-memory-mode value
--hicache-io-backend value
--hicache-mem-layout value
--hicache-ratio value
--hicache-size value
--hicache-storage-backend value
--hicache-storage-backend-extra-config value
--hicache-storage-prefetch-policy value
--hicache-storage-prefetch-retry-max-attempts value
--hicache-storage-prefetch-retry-poll-interval value
--hicache-write-policy value
--hierarchical-sparse-attention-extra-config value
--hisparse-config value
--host value
--http2-initial-connection-window-size value
--http2-max-concurrent-streams value
--image-processor-backend value
--incremental-streaming-output switch
--init-expert-location value
--int8-mamba-ckpt-size value
--is-embedding switch
--json-model-override-args value
--kt-cpuinfer value
--kt-max-deferred-experts-per-token value
--kt-method value
--kt-num-gpu-experts value
--kt-threadpool-count value
--kt-weight-path value
--kv-cache-dtype value
--kv-canary value
--kv-canary-real-data value
--kv-canary-sweep-interval value
--kv-events-config value
--language-model-only switch
--language-only switch
--limit-mm-data-per-request value
--linear-attn-backend value
--linear-attn-decode-backend value
--linear-attn-prefill-backend value
--linear-attn-verify-backend value
--linear-replayssm-cache-len value
--lmcache-config-file value
--load-balance-method value
--load-format value
--load-publish-endpoint value
--load-snapshot-publish-interval value
--log-level value
--log-level-http value
--log-requests switch
--log-requests-format value
--log-requests-level value
--log-requests-target list
--lora-backend value
--lora-drain-wait-threshold value
--lora-eviction-policy value
--lora-paths list
--lora-strict-loading switch neg=--no-lora-strict-loading
--lora-target-modules list
--lora-use-virtual-experts switch
--mamba-backend value
--mamba-cache-philox-rounds value
--mamba-full-memory-ratio value
--mamba-max-states-per-path value
--mamba-radix-cache-strategy value
--mamba-ssm-dtype value
--mamba-track-interval value
--max-ep-size value
--max-loaded-loras value
--max-lora-chunk-size value
--max-lora-rank value
--max-loras-per-batch value
--max-mamba-cache-size value
--max-prefill-tokens value
--max-queued-requests value
--max-running-requests value
--max-total-tokens value
--media-url-max-file-size-mb value
--mem-fraction-static value
--min-free-slots-delay value
--mlx-enable-sampling switch
--mm-attention-backend value
--mm-enable-dp-encoder switch neg=--no-mm-enable-dp-encoder
--mm-feature-transport value
--mm-global-cache-backend value
--mm-io-worker-num value
--mm-preprocess-cache-size-mb value
--mm-process-config value
--mm-processor-worker-num value
--model value
--model-checksum value
--model-config-parser value
--model-impl value
--model-loader-extra-config value
--model-path value
--modelexpress-config value
--modelopt-checkpoint-restore-path value
--modelopt-checkpoint-save-path value
--modelopt-export-path value
--modelopt-quant value
--moe-a2a-backend value
--moe-data-parallel-size value
--moe-dense-tp-size value
--moe-dp-size value
--moe-runner-backend value
--monokernel-backend value deprecated=--enable-amd-monokernel
--mooncake-ib-device value
--msprobe-dump-config value
--nccl-init-addr value
--nccl-port value
--nnodes value
--node-rank value
--num-continuous-decode-steps value
--num-reserved-decode-tokens value
--numa-node list
--offload-group-size value
--offload-mode value
--offload-num-in-group value
--offload-prefetch-step value
--optimistic-prefill-attempts value
--otlp-service-name value
--otlp-traces-endpoint value
--page-size value
--paged-experts-num-resident value
--pdmux-config-path value
--pipeline-parallel-size value
--ple-offload-backend value
--ple-offload-dir value
--ple-offload-embedding switch neg=--no-ple-offload-embedding
--port value
--pp-async-batch-depth value
--pp-max-micro-batch-size value
--pp-size value
--pre-warm-nccl switch
--preferred-sampling-params value
--prefill-attention-backend value
--prefill-decode-interval value
--prefill-decode-interval-min-bs value
--prefill-delayer-forward-passes-buckets list
--prefill-delayer-max-delay-ms value
--prefill-delayer-max-delay-passes value
--prefill-delayer-queue-min-ratio value
--prefill-delayer-token-usage-low-watermark value
--prefill-delayer-wait-seconds-buckets list
--prefill-kv-cache-dequant-dtype value
--prefill-max-requests value
--prefill-only-disable-kv-cache switch
--priority-scheduling-preemption-threshold value
--prompt-tokens-buckets list
--qsa-indexer-dtype value
--quantization value
--quantization-param-path value
--quantize-and-serve switch
--radix-cache-backend value
--radix-eviction-policy value
--radix-eviction-policy-config value
--random-seed value
--reasoning-parser value
--remote-instance-weight-loader-backend value
--remote-instance-weight-loader-seed-instance-ip value
--remote-instance-weight-loader-seed-instance-service-port value
--remote-instance-weight-loader-send-weights-group-ports value
--remote-instance-weight-loader-start-seed-via-transfer-engine switch
--retraction-policy value
--return-aux-hidden-state-layer-ids list
--return-hidden-states-mode value
--return-input-ids switch
--return-output-ids switch
--revision value
--rl-on-policy-target value
--rl-quant-profile value
--sampling-backend value
--sampling-defaults value
--sampling-mask-max-tokens value
--schedule-conservativeness value
--schedule-low-priority-values-first switch
--schedule-policy value
--scheduler-recv-interval value
--served-model-name value
--shared-experts-tp-size value
--show-time-cost switch
--sidecar value
--sidecar-args value
--skip-server-warmup switch
--skip-tokenizer-init switch
--sleep-on-idle switch
--sm-group-num value
--smg-grpc-mode switch
--smg-http-sidecar-port value
--soft-watchdog-timeout value
--spec-trace-dir value
--speculative-accept-threshold-acc value
--speculative-accept-threshold-single value
--speculative-adaptive switch
--speculative-adaptive-config value
--speculative-algorithm value
--speculative-attention-mode value
--speculative-dflash-block-size value
--speculative-domino-candidate-pool-size value
--speculative-draft-attention-backend value
--speculative-draft-kv-cache-dtype value
--speculative-draft-load-format value
--speculative-draft-model value
--speculative-draft-model-path value
--speculative-draft-model-quantization value
--speculative-draft-model-revision value
--speculative-draft-sink-size value
--speculative-draft-window-size value
--speculative-dsa-topk-backend value
--speculative-dspark-align-verify-tokens-to-graph-tier switch
--speculative-dspark-block-size value
--speculative-dspark-confidence-sts-path value
--speculative-dspark-sps-table-path value
--speculative-eagle-topk value
--speculative-enable-w4a4-mxfp4-megamoe switch neg=--no-speculative-enable-w4a4-mxfp4-megamoe
--speculative-moe-a2a-backend value
--speculative-moe-runner-backend value
--speculative-ngram-capacity value
--speculative-ngram-external-corpus-max-tokens value
--speculative-ngram-external-corpus-path value
--speculative-ngram-external-sam-budget value
--speculative-ngram-match-type value
--speculative-ngram-max-bfs-breadth value
--speculative-ngram-max-trie-depth value
--speculative-ngram-min-bfs-breadth value
--speculative-num-draft-tokens value
--speculative-num-steps value
--speculative-token-map value
--speculative-use-block-verification switch
--speculative-use-rejection-sampling switch
--ssl-ca-certs value
--ssl-certfile value
--ssl-keyfile value
--ssl-keyfile-password value
--startup-weight-load-mode value
--stream-interval value
--stream-response-default-include-usage switch
--strip-thinking-cache switch
--swa-full-tokens-ratio value
--swa-prefix-tails value
--tbo-token-distribution-threshold value
--tensor-parallel-size value
--tokenizer-backend value
--tokenizer-metrics-allowed-custom-labels list
--tokenizer-metrics-custom-labels-header value
--tokenizer-mode value
--tokenizer-path value
--tokenizer-worker-num value
--tool-call-parser value
--tool-server value
--torch-compile-max-bs value
--tp-size value
--trace-modules value
--triton-attention-num-kv-splits value
--triton-attention-reduce-in-fp32 switch
--triton-attention-split-tile-size value
--trust-mm-content-hashes switch
--trust-remote-code switch
--trust-request-chat-template switch
--unified-cache-external-linker-backend value
--unified-cache-external-linker-config value deprecated
--uno-lora-path value
--use-ray switch
--uvicorn-access-log-exclude-prefixes list
--warmups value
--watchdog-timeout value
--watermark-config value
--weight-cache-mode value
--weight-cache-socket value
--weight-cache-timeout value
--weight-loader-disable-mmap switch
--weight-loader-drop-cache-after-load switch
--weight-loader-prefetch-checkpoints switch
--weight-loader-prefetch-num-threads value
--weight-version value
"""

VLLM = FlagTable("vllm", _VLLM_VERSION, "vllm.entrypoints.common.cli_args.make_arg_parser", _VLLM_DATA)
SGLANG = FlagTable("sglang", _SGLANG_VERSION, "sglang.srt.server_args.ServerArgs.add_cli_args", _SGLANG_DATA)

if __name__ == "__main__":
    sys.exit(main())
