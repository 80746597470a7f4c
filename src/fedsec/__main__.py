"""``python -m fedsec``: the ``fedsec`` command."""

import sys

from fedsec.cli import main

if __name__ == "__main__":  # importing the module (e.g. to list it) runs nothing
    sys.exit(main())
