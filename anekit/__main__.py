"""``python -m anekit``: the command line."""

import sys

from anekit.cli import main

sys.exit(main())
