r"""Effective sample size: Geyer's estimator and the L2HMC notebook's truncated one.

Both take samples ``(num_samples, num_chains, dim)`` and return the ESS as a
fraction of the number of samples per chain (multiply by ``num_samples *
num_chains`` for a count).

* :func:`geyer_ess`: per dimension, the multi-chain autocorrelation of Stan
  (Gelman et al., BDA3 11.5): :math:`\rho_t = 1 - (W - \bar\gamma_t)/\widehat{\mathrm{var}}^+`
  from the chains' autocovariances :math:`\gamma_t` (FFT), the within-chain
  variance :math:`W` and the between-chain variance, so chains stuck in
  different places count as correlated; pairs
  :math:`P_k = \rho_{2k} + \rho_{2k+1}` summed up to the first non-positive pair
  and made monotone (Geyer's initial monotone sequence, 1992);
  :math:`\hat\tau = -1 + 2\sum_{k<k_0} P_k + \max(\rho_{2k_0}, 0)` with
  :math:`k_0` the first non-positive pair and :math:`\rho_0 = 1` (Stan's
  estimate, which adds the last even lag once to lower the variance for
  antithetic chains; at least :math:`1/\log_{10}(nM)`, as in Stan), ESS
  fraction :math:`1/\hat\tau`; the minimum over dimensions (the
  slowest-mixing coordinate: an average would let a well-mixed coordinate hide
  chains stuck in one mode of a mixture).
* :func:`truncated_ess`: the public L2HMC notebook's estimate: the autocovariance
  of all chains and dimensions together about the known target mean, divided by
  a known scale (:math:`\sqrt{\mathrm{tr}\,\Sigma}`), summed up to the first lag
  whose autocorrelation is below 0.05:
  :math:`1 / (1 + 2 \sum_{1 \le \tau < \tau_0} \rho_\tau)`. (The notebook zeroes
  every lag below 0.05 instead of stopping at the first; on long chains that
  lets the noisy far tail add spurious mass.)
"""

from __future__ import annotations

import numpy as np

__all__ = ("lagged_products", "geyer_ess", "truncated_ess")


def lagged_products(x: np.ndarray) -> np.ndarray:
  r""":math:`\sum_t x_t x_{t+\tau}` along axis 0 for every lag (FFT), other axes kept.

  Args:
    x: an array ``(n, ...)``, e.g. centred draws ``(num_samples, num_chains, dim)``.

  Returns:
    An array of ``x``'s shape: entry ``tau`` is the sum over ``t`` of
    ``x[t] * x[t + tau]``, for ``tau = 0 ... n - 1``.
  """
  n = x.shape[0]
  size = 2 ** int(np.ceil(np.log2(2 * n)))
  f = np.fft.rfft(x, n=size, axis=0)
  return np.fft.irfft(f * np.conj(f), n=size, axis=0)[:n]


def geyer_ess(samples) -> float:
  """Geyer's multi-chain ESS of ``samples``, as a fraction of the samples per chain (module
  docstring): the minimum over the dimensions.

  Args:
    samples: ``(num_samples, num_chains, dim)`` draws (converted to float64 NumPy).

  Returns:
    A float: the ESS of the slowest-mixing dimension divided by ``num_samples``
    (multiply by ``num_samples * num_chains`` for a count).
  """
  samples = np.asarray(samples, np.float64)
  n, m = samples.shape[:2]
  acov = lagged_products(samples - samples.mean(axis=0, keepdims=True)) / n  # (n, chains, dim)
  within = acov[0].mean(axis=0) * n / (n - 1)  # W, per dimension
  between = samples.mean(axis=0).var(axis=0, ddof=1) if m > 1 else 0.0  # B / n
  var_plus = within * (n - 1) / n + between
  rho = 1.0 - (within - acov.mean(axis=1)) / var_plus  # (n, dim)
  rho[0] = 1.0  # exactly (the formula gives 1 - W / (n var+) at lag 0)
  fractions = []
  for d in range(rho.shape[1]):
    pairs = rho[: 2 * (n // 2), d].reshape(-1, 2).sum(axis=1)
    non_positive = np.nonzero(pairs <= 0)[0]
    first = non_positive[0] if non_positive.size else pairs.size
    monotone = np.minimum.accumulate(pairs[:first])
    # Stan's improved estimate: the even lag of the first non-positive pair, if
    # positive, counts once (it lowers the variance for antithetic chains)
    tail = max(rho[2 * first, d], 0.0) if first < pairs.size else 0.0
    tau = max(-1.0 + 2.0 * monotone.sum() + tail, 1.0 / np.log10(n * m))
    fractions.append(1.0 / tau)
  return float(np.min(fractions))


def truncated_ess(samples, mean=None, scale=None, threshold: float = 0.05) -> float:
  r"""The L2HMC notebook's truncated ESS of ``samples``, as a fraction of the samples per
  chain (module docstring).

  Args:
    samples: ``(num_samples, num_chains, dim)`` draws (converted to float64 NumPy).
    mean: the target's mean, subtracted before the autocovariance; ``None``: 0.
    scale: the known scale that normalizes the autocovariance (:math:`\sqrt{\mathrm{tr}\,
      \Sigma}`); ``None``: the lag-0 autocovariance of the samples.
    threshold: the sum stops at the first lag whose autocorrelation is below it.

  Returns:
    A float, :math:`1 / (1 + 2 \sum_{1 \le \tau < \tau_0} \rho_\tau)`.
  """
  samples = np.asarray(samples, np.float64)
  n = samples.shape[0]
  x = samples - (0.0 if mean is None else np.asarray(mean))
  acov = lagged_products(x).sum(axis=(1, 2)) / x.shape[1] / (n - np.arange(n))
  rho = acov / (acov[0] if scale is None else scale**2)
  below = np.nonzero(rho[1:] < threshold)[0]
  rho = rho[1: 1 + (below[0] if below.size else n)]
  return float(1.0 / (1.0 + 2.0 * np.sum(rho)))
