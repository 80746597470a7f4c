"""ServerApp: the server side of the protocol the run config names (``protocol``).

Logic in :mod:`fedsec.runtime.flower_apps`.
"""

from fedsec.runtime.flower_apps import build_server_app

app = build_server_app()
