"""What runs where the GPUs are: one trial's lifecycle, server processes and their trees, GPU
checks, the HTTP client, pre-flight and doctor."""

# the engines' knowledge the node reads (core.engines: start-up phases, notices, /metrics names,
# custom all-reduce) is registered by the backends when their package is imported
import orchestrator.backends  # noqa: F401
