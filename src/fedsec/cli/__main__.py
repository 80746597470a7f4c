"""``python -m fedsec.cli``: the ``fedsec`` command."""

import sys

from fedsec.cli import main

sys.exit(main())
