"""Bundled and synthetic federations for demos, tests and benchmarks.

Data come from scikit-learn's bundled data sets (nothing is downloaded) or are generated
with a seeded numpy ``Generator`` (simulated data only; never for security).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsec.data.io import PartyData

__all__ = ["Federation", "breast_cancer_federation", "synthetic_federation"]


@dataclass
class Federation:
    """Parties' test labels and the scores of one shared model."""

    parties: list[PartyData]
    description: str

    def pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(p.y_true, p.y_score) for p in self.parties]

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.concatenate([p.y_true for p in self.parties]),
                np.concatenate([p.y_score for p in self.parties]))


def breast_cancer_federation(n_hospitals: int = 5, *, seed: int = 0,
                             test_fraction: float = 0.5) -> Federation:
    """scikit-learn's breast-cancer set: a logistic-regression model trained on one split,
    the test split divided unevenly among ``n_hospitals`` hospitals."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction,
                                              random_state=seed, stratify=y)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.05, max_iter=1000))
    model.fit(x_tr, y_tr)
    scores = model.predict_proba(x_te)[:, 1]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y_te))
    weights = rng.dirichlet(np.full(n_hospitals, 2.0))
    cuts = np.round(np.cumsum(weights)[:-1] * len(y_te)).astype(int)
    parties = [
        PartyData(f"hospital-{i + 1}", y_te[idx].astype(np.int64), scores[idx])
        for i, idx in enumerate(np.split(order, cuts))
    ]
    return Federation(parties, f"breast cancer (scikit-learn), logistic regression, "
                               f"{len(y_te)} test samples over {n_hospitals} hospitals")


def synthetic_federation(n_parties: int, samples: int, *, auc: float = 0.75, seed: int = 0,
                         ties: bool = False) -> Federation:
    """Binormal scores with a target AUC, split unevenly among ``n_parties``."""
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, samples)
    shift = np.sqrt(2.0) * norm.ppf(auc)
    raw = rng.normal(size=samples) + shift * y
    s = 1.0 / (1.0 + np.exp(-raw))
    if ties:
        s = np.round(s, 2)
    weights = rng.dirichlet(np.full(n_parties, 1.5))
    cuts = np.round(np.cumsum(weights)[:-1] * samples).astype(int)
    parties = [PartyData(f"party-{i + 1}", y[idx].astype(np.int64), s[idx])
               for i, idx in enumerate(np.split(np.arange(samples), cuts))]
    return Federation(parties, f"synthetic binormal scores, target AUC {auc}, "
                               f"{samples} samples over {n_parties} parties")
