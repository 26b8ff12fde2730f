"""What the search believes of configs it has not measured: the additive per-value model
(``additive``), the Gaussian process (``belief``, ``kernel``), what a launch costs (``cost``) and
should measure (``promise``), which values make launches fail (``culprits``) and what the study has
not explored (``coverage``). Imports ``study.storage`` and ``study.evidence``, of the study.
"""
