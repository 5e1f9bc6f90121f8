"""Bayesian logistic regression on scikit-learn's breast-cancer data (``l2hmc_posteriors.py``).

:func:`metaoptax.l2hmc.posteriors.logistic_regression` on the 569 tumours' 30 features,
standardized over all 569 rows, so that a subsample's coordinates mean what the full
data's do (a sampler trained on one posterior runs on another). Needs scikit-learn (the
data ship with it).
"""

from __future__ import annotations

import numpy as np

from metaoptax import l2hmc


def breast_cancer(num_data: int | None = None, seed: int = 0,
                  prior_scale: float = 1.0) -> l2hmc.Target:
  """Logistic regression on scikit-learn's breast-cancer data (31-d: intercept + 30 features).

  The features are standardized with the mean and standard deviation of all 569
  rows; ``num_data`` rows (all if ``None``) are then drawn without replacement
  with ``numpy.random.default_rng(seed)``, so two seeds give two posteriors of the
  same model over the same coordinates.
  """
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  features, labels = datasets.load_breast_cancer(return_X_y=True)
  features = (features - features.mean(0)) / features.std(0)
  name = "breast-cancer logistic regression"
  if num_data is not None:
    if not 1 <= num_data <= len(labels):
      raise ValueError(f"num_data must be in [1, {len(labels)}], got {num_data}.")
    rows = np.random.default_rng(seed).permutation(len(labels))[:num_data]
    features, labels = features[rows], labels[rows]
    name += f", subsample {seed}"
  return l2hmc.posteriors.logistic_regression(features, labels, prior_scale, name)
