"""The search replayed offline (``ncclsweep simulate``): recorded tables (``replay_table``,
``replay``), whole nights with their relaunches and race (``night``), the stand-in boxes
(``suite``), the verdicts under launch noise (``race_replay``), and the command (``simulate``).
May import every other part of the study; none imports it.
"""
