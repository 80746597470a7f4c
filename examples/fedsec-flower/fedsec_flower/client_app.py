"""ClientApp: one FHAUC party per SuperNode (logic in :mod:`fedsec.runtime.flower_client`)."""

from fedsec.runtime.flower_client import build_client_app

app = build_client_app()
