#!/usr/bin/env bash
# vLLM 0.26.0 for the GPU machines, in five parts of ~50 MiB (a run carries at most 64 MiB, the working tree included). The
# machines' torch 2.11.0+cu130 is exactly what vLLM 0.26.0 pins; this downloads vLLM without its
# FlashAttention-2 library (Hopper uses FA3; vLLM imports FA2 only if present) and the packages the
# machines' image lacks (vllm-0.26.0-wheels.txt beside this script, found by trial), tars them and
# splits the tar into .vp1/ .. .vp5/ (git-ignored). docs/gpu/vllm_session.sh takes them over.
# usage (from the project root): bash docs/gpu/vllm_parts.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_31_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform linux_x86_64 \
  -d "$tmp" $(cat "$here/vllm-0.26.0-wheels.txt")
zip -q -d "$tmp"/vllm-0.26.0-*.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so'
for k in 1 2 3 4 5; do
  rm -rf ".vp$k"; mkdir ".vp$k"
  grep -qx "/.vp$k/" .git/info/exclude 2>/dev/null || echo "/.vp$k/" >> .git/info/exclude
done
(cd "$tmp" && tar -cf all.tar ./*.whl && split -n 5 all.tar vlpart-)
k=1; for p in "$tmp"/vlpart-*; do mv "$p" ".vp$k/part"; k=$((k+1)); done
du -sh .vp*
