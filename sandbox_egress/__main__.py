"""`python -m sandbox_egress`: the `egress-proxy` command."""

import sys

from sandbox_egress.runtime.cli import main

sys.exit(main())
