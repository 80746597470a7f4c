"""Test-side scaffolds: adversaries that play malicious roles from the bytes they hold.

Used by tests and benchmarks, never imported by the product package.
"""
