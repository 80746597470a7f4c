"""ClientApp: one client's local training (logic in fedsec.runtime.flower_shapley)."""

from fedsec.runtime.flower_shapley import build_client_app

app = build_client_app()
