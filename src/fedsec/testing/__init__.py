"""Adversaries and attack harnesses for fedsec's tests and benchmarks.

Nothing in the product imports this package: each module here plays a participant that
deviates (:mod:`~fedsec.testing.pfl`) or a curious participant that computes what it can
from the bytes it holds (:mod:`~fedsec.testing.decryptor_attack`).
"""
