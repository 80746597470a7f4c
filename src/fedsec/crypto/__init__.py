"""Cryptographic building blocks: CKKS and BFV, presets, identities, the signed key set-up,
sealed boxes, additive sharing, the deterministic random bit generator and the sign polynomial.
"""
