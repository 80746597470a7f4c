"""ServerApp: FedAvg with RecordingFedAvg, then FSVs (logic in fedsec.runtime.flower_shapley)."""

from fedsec.runtime.flower_shapley import build_server_app

app = build_server_app()
