"""fedsec's Flower app: secure federated AUC (FHAUC) across machines."""
