"""Which config the study launches next: the search policy (``policy``), the samplers and strategies
(``samplers``, ``feasible``, ``strategies``), the relaunches of the baseline and the incumbent
(``relaunch``) and the finalists' race (``race``). Imports ``study.storage``, ``study.evidence`` and
``study.model``, of the study.
"""
