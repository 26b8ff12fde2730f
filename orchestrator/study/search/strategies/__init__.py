"""Search strategies: which unmeasured config the search policy launches next, one per module.

``base`` draws the one interface (``Strategy``, and the ``View`` of the study a strategy reads);
``picks`` holds the picking rules strategies share; ``sampler_led`` is the search where an Optuna
sampler proposes (TPE, GP, random, ...) and the policy picks the start-up, the fill and a plan's
level steps; ``value_led`` is the search the per-value model leads (``study.promise``).
``study.samplers.make_strategy`` builds the one a job's ``sampler:`` names.
"""
