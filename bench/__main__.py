"""`python -m bench` (what `make bench` runs); see bench/run.py."""

import sys

from bench.run import main

sys.exit(main())
