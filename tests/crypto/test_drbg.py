"""Randomness: shared-seed determinism, domain separation, uniformity, and no weak RNGs.

The SeededRandomSource is deterministic, so the chi-square tests below compute the same
statistic on every run: they cannot be flaky. Their significance level is 1e-6.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
from scipy import stats

import fedsec
from fedsec.crypto.drbg import SEED_BYTES, SeededRandomSource, SystemRandomSource

SEED = bytes(range(32))
ALPHA = 1e-6


def test_same_seed_and_label_same_stream():
    a = SeededRandomSource(SEED, b"fhauc/run-0/masks")
    b = SeededRandomSource(SEED, b"fhauc/run-0/masks")
    assert a.random_bytes(1000) == b.random_bytes(1000)
    np.testing.assert_array_equal(a.integers(0, 1000, 50), b.integers(0, 1000, 50))


def test_stream_is_continuous():
    a = SeededRandomSource(SEED, b"x")
    b = SeededRandomSource(SEED, b"x")
    assert a.random_bytes(10) + a.random_bytes(23) == b.random_bytes(33)


def test_different_label_or_seed_different_stream():
    base = SeededRandomSource(SEED, b"label-a").random_bytes(64)
    assert SeededRandomSource(SEED, b"label-b").random_bytes(64) != base
    assert SeededRandomSource(bytes(32), b"label-a").random_bytes(64) != base
    assert SeededRandomSource(SEED + b"\x00", b"label-a").random_bytes(64) != base


@pytest.mark.parametrize("seed", [b"", b"short", bytes(31), "x" * 32, None])
def test_seed_must_be_32_bytes(seed):
    with pytest.raises(ValueError, match="32 bytes"):
        SeededRandomSource(seed, b"l")


def test_system_source_is_not_repeating():
    s = SystemRandomSource()
    assert s.random_bytes(32) != s.random_bytes(32)
    assert SEED_BYTES == 32


@pytest.mark.parametrize("low, high", [(0, 10), (0, 7), (-3, 4), (5, 6 + 100)])
def test_integers_uniform_chi_square(low, high):
    src = SeededRandomSource(SEED, f"chi/{low}/{high}".encode())
    x = src.integers(low, high, 60_000)
    assert x.min() >= low and x.max() < high
    counts = np.bincount(x - low, minlength=high - low)
    assert stats.chisquare(counts).pvalue > ALPHA


def test_integers_non_power_of_two_span_has_no_modulo_bias():
    # span 3 * 2**60: reducing 62-bit values modulo the span would put half of the draws
    # in the lowest third; rejection sampling keeps the thirds equal
    span = 3 * 2**60
    x = SeededRandomSource(SEED, b"bias").integers(0, span, 30_000)
    thirds = np.bincount((x // 2**60).astype(np.int64), minlength=3)
    assert stats.chisquare(thirds).pvalue > ALPHA


def test_integers_validate_span():
    src = SeededRandomSource(SEED, b"v")
    for low, high in [(0, 0), (5, 1), (0, 2**62 + 1)]:
        with pytest.raises(ValueError):
            src.integers(low, high, 1)
    assert src.integer(4, 5) == 4


def test_uniform_and_bits():
    src = SeededRandomSource(SEED, b"u")
    u = src.uniform(50_000)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    b = src.bits(80_001)
    assert b.size == 80_001 and set(np.unique(b)) <= {0, 1}
    assert stats.binomtest(int(b.sum()), b.size).pvalue > ALPHA


def test_permutation_is_a_permutation():
    src = SeededRandomSource(SEED, b"perm")
    for n in (0, 1, 2, 17, 500):
        p = src.permutation(n)
        assert sorted(p.tolist()) == list(range(n))
    assert not np.array_equal(src.permutation(500), np.arange(500))


def test_permutation_positions_uniform():
    src = SeededRandomSource(SEED, b"perm-uniform")
    n, reps = 5, 6000
    where0 = np.array([int(np.nonzero(src.permutation(n) == 0)[0][0]) for _ in range(reps)])
    assert stats.chisquare(np.bincount(where0, minlength=n)).pvalue > ALPHA


# ---------------------------------------------------------------- no weak randomness in src
SRC = pathlib.Path(fedsec.__file__).resolve().parent
# Simulated data, local training, poisoning simulations, Monte-Carlo Shapley estimators (their
# sampled coalitions are public in every protocol), BALANCE's simulated graphs and per-client
# thresholds may use seeded numpy Generators (nothing there is a secret); protocol code may not.
SIMULATION_DIRS = {SRC / "data", SRC / "learning"}
SIMULATION_FILES = {SRC / "shapley" / "fsv.py", SRC / "shapley" / "estimators.py",
                    SRC / "shapley" / "secure_game.py", SRC / "pfl" / "simulate.py",
                    SRC / "pfl" / "balance.py", SRC / "cli" / "pfl.py",
                    # seeded, replayable fuzzing (testing only, never imported by the product)
                    SRC / "testing" / "mutations.py", SRC / "testing" / "netfuzz.py"}


def _weak_rng_uses(path: pathlib.Path) -> list[str]:
    """``np.random``/``numpy.random`` and the ``random`` module in code (not docstrings)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "random" or a.name.startswith("numpy.random"):
                    found.append(f"{path}:{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod == "random" or mod.startswith("numpy.random") or (
                    mod == "numpy" and any(a.name == "random" for a in node.names)):
                found.append(f"{path}:{node.lineno}: from {mod} import ...")
        elif isinstance(node, ast.Attribute) and node.attr == "random" and \
                isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy"):
            found.append(f"{path}:{node.lineno}: {node.value.id}.random")
    return found


def test_weak_rng_detector_works(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""np.random in a docstring is fine."""\nimport random\n'
                 "import numpy as np\nx = np.random.default_rng(0)\n"
                 "from numpy import random as r\n")
    assert len(_weak_rng_uses(f)) == 3


def test_no_np_random_or_random_module_in_protocol_code():
    files = [p for p in SRC.rglob("*.py")
             if not any(d in p.parents for d in SIMULATION_DIRS) and p not in SIMULATION_FILES]
    assert len(files) > 10
    offenders = [hit for p in files for hit in _weak_rng_uses(p)]
    assert not offenders, "weak randomness in protocol code:\n" + "\n".join(offenders)
