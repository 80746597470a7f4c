"""Shared fixtures: expensive CKKS key generation happens once per session.

Tests use the fast ``INSECURE_TEST_N4096_DEPTH1`` preset (2048 slots) unless the secure
preset itself is the point of the test.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.crypto.ckks import CKKSContext

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1"


@pytest.fixture(scope="session")
def ckks() -> CKKSContext:
    """A key holder's context: secret key, relin keys, every slot-sum rotation, conjugation."""
    return CKKSContext.generate(TEST_PRESET, rotations=CKKSContext.sum_rotations(2048),
                                conjugate=True, allow_insecure=True)


@pytest.fixture(scope="session")
def ckks_public(ckks: CKKSContext) -> CKKSContext:
    """The aggregator's view of :func:`ckks`: loaded from its public bytes only."""
    return CKKSContext.from_public_bytes(ckks.public_bytes(), allow_insecure=True)


@pytest.fixture
def rng() -> np.random.Generator:
    """Seeded generator for *simulated test data* (never for protocol randomness)."""
    return np.random.default_rng(20240601)
