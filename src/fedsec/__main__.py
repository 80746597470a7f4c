"""``python -m fedsec``: the ``fedsec`` command."""

import sys

from fedsec.cli import main

sys.exit(main())
