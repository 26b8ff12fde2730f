"""Everything that touches Optuna storage: the storage seam, the search policy, samplers, the
feasible sampler, value bans, reading trials back (history) and the replay harness."""
