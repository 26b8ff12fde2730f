"""What the measured trials say: the rows every reader sees (``history``), every launch as evidence
(``launches``), the answer of a plan (``plan``) and of a goodput study (``goodput``), the values that
keep failing (``bans``). Imports ``study.storage`` only, of the study.
"""
