"""The study: what Optuna stores, what the measured trials say, what the search believes of the
configs it has not measured, which config it launches next, and the same search replayed offline.

One subpackage per job, imports pointing one way (each imports only those before it):

- ``storage``: every Optuna storage call and stored name, the journal, a shared study, what Optuna
  is told for a trial (``objective``);
- ``evidence``: what the measured trials say (rows, launches, the plan, goodput, bans);
- ``model``: what the search believes of unmeasured configs (per-value effects, the Gaussian process,
  the launch cost, the culprits of failures, what is unexplored);
- ``search``: which config is launched next (the policy, samplers, strategies, relaunches, the race);
- ``simulation``: the search replayed against recorded or generated tables (``ncclsweep simulate``).
"""
