"""Adversaries and attack harnesses for fedsec's tests and benchmarks.

Nothing in the product imports this package: each module here plays a participant that
deviates or a curious participant that computes what it can from the bytes it holds.
"""
