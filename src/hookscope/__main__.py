"""``python -m hookscope``: the same as the ``hookscope`` command."""

import sys

from .cli import main

sys.exit(main())
