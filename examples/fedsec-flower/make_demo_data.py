"""Write demo party CSVs (``label,score``) and print the AUC the federation should get.

    python make_demo_data.py --out demo-data --hospitals 3

uses scikit-learn's bundled breast-cancer set (nothing is downloaded): a model trained on
one half, the other half split unevenly among the hospitals, one CSV each. In a real
federation each hospital writes its own CSV from its own test set and model scores.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedsec.data.datasets import breast_cancer_federation
from fedsec.data.io import write_party_csv
from fedsec.metrics import trapezoid_auc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("demo-data"))
    parser.add_argument("--hospitals", type=int, default=3)
    parser.add_argument("--decision-points", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    fed = breast_cancer_federation(args.hospitals, seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for party in fed.parties:
        path = args.out / f"{party.name}.csv"
        write_party_csv(path, party.y_true, party.y_score)
        print(f"{path}: {party.n_samples} samples")
    y = np.concatenate([p.y_true for p in fed.parties])
    s = np.concatenate([p.y_score for p in fed.parties])
    print(f"plaintext AUC ({args.decision_points} decision points): "
          f"{trapezoid_auc(y, s, args.decision_points):.10f}")


if __name__ == "__main__":
    main()
