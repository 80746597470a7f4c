"""ServerApp: the FHAUC aggregator (logic in :mod:`fedsec.runtime.flower_server`)."""

from fedsec.runtime.flower_server import build_server_app

app = build_server_app()
