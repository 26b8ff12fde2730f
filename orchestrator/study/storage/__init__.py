"""The study's storage: every Optuna storage call and stored name (``storage``), the journal file
(``journal``), a study shared by several drivers in PostgreSQL (``shared``), and what Optuna is told
for a trial (``objective``). Imports nothing else of the study.
"""
