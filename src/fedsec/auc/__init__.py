"""Secure federated AUC: FHAUC (semi-honest and malicious aggregator), DPAUC and attacks."""
