"""Fuzzing fixtures: the honest corpus is built once per session (two key set-ups)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The harness modules live next to the tests (a test-side scaffold, also used by
# benchmarks/fuzz_decoders.py); --import-mode=importlib does not put this folder on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_shapley  # noqa: E402
import fuzz_targets  # noqa: E402


@pytest.fixture(scope="session")
def world() -> fuzz_targets.World:
    return fuzz_targets.build_world()


@pytest.fixture(scope="session")
def targets(world: fuzz_targets.World) -> dict[str, fuzz_targets.Target]:
    return {t.name: t for t in fuzz_targets.make_targets(world)}


@pytest.fixture(scope="session")
def shapley_world() -> fuzz_shapley.ShapleyWorld:
    return fuzz_shapley.build_shapley_world()


@pytest.fixture(scope="session")
def shapley_targets(shapley_world: fuzz_shapley.ShapleyWorld
                    ) -> dict[str, fuzz_targets.Target]:
    return {t.name: t for t in fuzz_shapley.make_shapley_targets(shapley_world)}
