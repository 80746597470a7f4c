"""Synthetic score distributions calibrated to the papers' AUCs, and real model scores.

The papers evaluate on Criteo (AUC ~0.75, 25.6% positives in Sun et al.'s test set of 458,407)
and CelebA gender (AUC ~0.89-0.95). We ship neither. :func:`binormal_scores` draws labels and
scores from a binormal model whose *population* AUC is set exactly: logits are
``N(mu0, 1)`` for negatives and ``N(mu0 + d, 1)`` for positives with ``d = sqrt(2)
Phi^-1(AUC)``, and scores are ``sigmoid(logit)``, so ``AUC = Phi(d / sqrt(2))``.
:func:`sklearn_model_scores` gives real held-out scores of a logistic regression on a data set
bundled with scikit-learn, for a check on non-synthetic scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real

__all__ = [
    "ScoreModel",
    "CRITEO_LIKE",
    "CELEBA_LIKE",
    "binormal_scores",
    "sklearn_model_scores",
]

Seed = int | np.random.Generator | None


@dataclass(frozen=True)
class ScoreModel:
    """A calibrated binormal score distribution."""

    name: str
    auc: float
    prior: float

    def sample(
        self, n: int, *, seed: Seed = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Draw ``n`` labelled scores (see :func:`binormal_scores`)."""
        return binormal_scores(n, auc=self.auc, prior=self.prior, seed=seed)


#: Calibrated to Sun et al.'s Criteo model (AUC 0.7494, 117,317 of 458,407 positive).
CRITEO_LIKE = ScoreModel("criteo-like", 0.75, 117_317 / 458_407)
#: Calibrated to Baykara et al.'s CelebA gender model (AUC ~0.95; ~42% "male" in CelebA).
CELEBA_LIKE = ScoreModel("celeba-like", 0.95, 0.42)


def binormal_scores(
    n: int, *, auc: float, prior: float, seed: Seed = None
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Labels ~ Bernoulli(prior) and scores in (0, 1) with population AUC ``auc``.

    Parameters
    ----------
    n : int
        Number of samples.
    auc : float
        Target population AUC in ``(0.5, 1)``.
    prior : float
        Probability of a positive label, in ``(0, 1)``.
    seed : int or numpy.random.Generator, optional
    """
    owner = "binormal_scores"
    m = check_int(n, "n", owner, min_value=1)
    a = check_real(auc, "auc", owner, gt=0.5, lt=1.0)
    p = check_real(prior, "prior", owner, gt=0.0, lt=1.0)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    d = math.sqrt(2.0) * NormalDist().inv_cdf(a)
    mu0 = math.log(p / (1 - p)) - d * p  # centres the scores near the prior
    y = (rng.random(m) < p).astype(np.int64)
    z = rng.normal(mu0, 1.0, m) + d * y
    s = 1.0 / (1.0 + np.exp(-z))
    return y, s


def sklearn_model_scores(
    name: str = "digits", *, seed: int = 0
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Held-out scores of a logistic regression on a data set bundled with scikit-learn.

    ``"digits"``: is the digit >= 5 (1,797 samples); ``"breast_cancer"``: malignant
    (569 samples). Scores are 5-fold cross-validated probabilities, so every sample is scored
    by a model that never saw it.
    """
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "digits":
        x, t = load_digits(return_X_y=True)
        y = (t >= 5).astype(np.int64)
    elif name == "breast_cancer":
        x, t = load_breast_cancer(return_X_y=True)
        y = (t == 0).astype(np.int64)
    else:
        raise ValueError(
            "The 'name' parameter of sklearn_model_scores must be 'digits' or "
            f"'breast_cancer'. Got {name!r} instead."
        )
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.01, max_iter=2000))
    proba = cross_val_predict(model, x, y, cv=5, method="predict_proba")[:, 1]
    return y, np.clip(proba.astype(np.float64), 0.0, 1.0)
