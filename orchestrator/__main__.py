"""``python -m orchestrator`` is the ``ncclsweep`` command."""

import sys

from orchestrator.cli import main

sys.exit(main())
