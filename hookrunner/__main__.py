"""`python -m sandbox_egress.hookrunner`: the `hookrunner` command."""

import sys

from sandbox_egress.hookrunner.cli import main

sys.exit(main())
