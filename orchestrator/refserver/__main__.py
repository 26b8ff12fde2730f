"""``python -m orchestrator.refserver``: start the reference server (see ``cli``)."""

import os
import sys

if os.environ.get("NCCLSWEEP_REFSERVER_PARENT") and "--rank" in sys.argv:
    # a spawned rank: die with rank 0, before anything slow happens
    from orchestrator.refserver.procs import die_with_parent

    die_with_parent()

from orchestrator.refserver.cli import main

sys.exit(main())
