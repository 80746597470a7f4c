"""``fedsec.secure_pfl``: Priv-PFL in one call (a small insecure ring: the 128-bit presets
take minutes and gigabytes; the protocol's tests cover them)."""

from __future__ import annotations

import pytest

import fedsec

pytest.importorskip("torch")

SMALL = fedsec.SecurePFLConfig(preset="INSECURE_TEST_N4096_DEPTH16", allow_insecure=True)


def test_secure_pfl_one_call_trains_and_selects() -> None:
    lines: list[str] = []
    res = fedsec.secure_pfl("bank", clients=4, rounds=2, samples=300, malicious=0.25,
                            attack="gaussian", config=SMALL, compare=True, seed=1,
                            progress=lines.append)
    assert isinstance(res, fedsec.SecurePFLRun)
    run = res.run
    assert run.method == "balance-secure" and run.attack == "gaussian"
    assert len(run.malicious) == 1 and len(run.accepted) == 2  # one set per round
    assert all(len(sets) == 4 for sets in run.accepted)
    assert res.plaintext is not None  # compare=True: the plaintext BALANCE run
    assert lines  # progress after the key set-up and every round


@pytest.mark.parametrize(("kwargs", "error", "needle"), [
    ({"clients": 1}, ValueError, "'clients' parameter of secure_pfl must be >= 2"),
    ({"clients": 65}, ValueError, "'clients' parameter of secure_pfl must be <= 64"),
    ({"dirichlet_alpha": 0.0}, ValueError, "'dirichlet_alpha' parameter of secure_pfl"),
    ({"clients": 2.5}, TypeError, "'clients' parameter of secure_pfl must be an int"),
])
def test_secure_pfl_checks_its_arguments(kwargs: dict[str, object], error: type[Exception],
                                         needle: str) -> None:
    with pytest.raises(error, match=needle):
        fedsec.secure_pfl("bank", config=SMALL, **kwargs)  # type: ignore[arg-type]
