"""``python -m hookscope``: the same as the ``hookscope`` command (``hookscope.cli.main``)."""

import sys

from .cli import main

sys.exit(main())
