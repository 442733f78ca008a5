"""`python -m hookrunner`: the `hookrunner` command."""

import sys

from hookrunner.cli import main

sys.exit(main())
