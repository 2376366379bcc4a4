"""``python -m hookscope``: the same as the ``hookscope`` command."""

import sys

from .cli.commands import main

sys.exit(main())
