"""What runs where the GPUs are: one trial's lifecycle, server processes and their trees, GPU
checks, the HTTP client, pre-flight and doctor."""
