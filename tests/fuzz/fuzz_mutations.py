"""The mutation engine lives in :mod:`fedsec.testing.mutations`; this name stays for the
fuzz harness modules that import it."""

from fedsec.testing.mutations import *  # noqa: F403
from fedsec.testing.mutations import __all__  # noqa: F401
