"""Write demo party CSVs (``label,score``), demo identities and their roster, and print the
AUC the federation should get.

    python make_demo_data.py --out demo-data --identities demo-identities --hospitals 3
    python make_demo_data.py --out demo-data --no-identities   # CSVs only

uses scikit-learn's bundled breast-cancer set (nothing is downloaded): a model trained on
one half, the other half split unevenly among the hospitals, one CSV each
(``demo-data/hospital-1.csv``...). It also makes one identity per hospital
(``demo-identities/hospital-1.identity.json``, mode 0600, and its public entry
``hospital-1.pub.json``) and the roster ``demo-identities/roster.json``: the layout the
simulation engine's ``sim-identity-dir`` expects. Identities that already exist are kept
(an identity is made once); the roster is rebuilt from them.

In a real federation each hospital writes its own CSV from its own test set and model
scores, runs ``fedsec identity init NAME`` on its own machine, sends only its public
entry, and compares the roster's fingerprints with its peers out of band
(docs/run-across-machines.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedsec.cli.identity import PUBLIC_SUFFIX, write_public_entry
from fedsec.crypto.identity import Identity, Roster
from fedsec.data.datasets import breast_cancer_federation
from fedsec.data.io import write_party_csv
from fedsec.metrics import trapezoid_auc


def demo_identities(directory: Path, names: list[str], quorum: int | None = None) -> Roster:
    """``NAME.identity.json`` + ``NAME.pub.json`` per party (kept if present) and
    ``roster.json`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    identities = []
    for name in names:
        path = directory / f"{name}.identity.json"
        ident = Identity.load(path) if path.exists() else Identity(name)
        if not path.exists():
            ident.save(path)
        pub = directory / f"{name}{PUBLIC_SUFFIX}"
        if not pub.exists():
            write_public_entry(ident.entry(), pub)
        identities.append(ident)
    roster = Roster.of(identities, quorum=quorum)
    roster.save(directory / "roster.json")
    return roster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("demo-data"),
                        help="directory for the CSVs (default demo-data)")
    parser.add_argument("--identities", type=Path, default=Path("demo-identities"),
                        help="directory for identities and roster (default demo-identities)")
    parser.add_argument("--no-identities", action="store_true",
                        help="only the CSVs (each party made its identity with 'fedsec "
                             "identity init')")
    parser.add_argument("--hospitals", type=int, default=3)
    parser.add_argument("--quorum", type=int, default=None,
                        help="roster quorum (default: not set)")
    parser.add_argument("--decision-points", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    fed = breast_cancer_federation(args.hospitals, seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for party in fed.parties:
        path = args.out / f"{party.name}.csv"
        write_party_csv(path, party.y_true, party.y_score)
        print(f"{path}: {party.n_samples} samples")
    if not args.no_identities:
        roster = demo_identities(args.identities, [p.name for p in fed.parties],
                                 args.quorum)
        for entry in roster.entries:
            print(f"{args.identities / (entry.name + '.identity.json')}: "
                  f"{entry.fingerprint}")
        print(f"{args.identities / 'roster.json'}: roster fingerprint {roster.fingerprint}")
    y = np.concatenate([p.y_true for p in fed.parties])
    s = np.concatenate([p.y_score for p in fed.parties])
    print(f"plaintext AUC ({args.decision_points} decision points): "
          f"{trapezoid_auc(y, s, args.decision_points):.10f}")


if __name__ == "__main__":
    main()
