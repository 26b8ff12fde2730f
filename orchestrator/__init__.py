"""ncclsweep: tune NCCL, tensor-parallel and CUDA-graph settings of LLM servers, unattended."""

__version__ = "0.1.0"
