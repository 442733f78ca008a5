"""`python -m proxy`: the `egress-proxy` command."""

import sys

from proxy.cli import main

sys.exit(main())
