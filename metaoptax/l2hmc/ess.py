r"""Effective sample size: Geyer's estimator and the L2HMC notebook's truncated one.

Both take samples ``(num_samples, num_chains, dim)`` and return the ESS as a
fraction of the number of samples per chain (multiply by ``num_samples *
num_chains`` for a count).

* :func:`geyer_ess`: per dimension, autocorrelations averaged over chains (from
  the FFT), pairs :math:`P_k = \rho_{2k} + \rho_{2k+1}` summed up to the first
  non-positive pair and made monotone (Geyer's initial monotone sequence,
  1992); :math:`\hat\tau = -1 + 2\sum_k P_k`, ESS fraction :math:`1/\hat\tau`,
  averaged over dimensions.
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


def _autocorrelation(x: np.ndarray) -> np.ndarray:
  """Per-chain, per-dimension autocorrelation along axis 0 (FFT), ``rho_0 = 1``."""
  n = x.shape[0]
  x = x - x.mean(axis=0, keepdims=True)
  size = 2 ** int(np.ceil(np.log2(2 * n)))
  f = np.fft.rfft(x, n=size, axis=0)
  acov = np.fft.irfft(f * np.conj(f), n=size, axis=0)[:n] / n
  return acov / np.maximum(acov[:1], 1e-300)


def geyer_ess(samples) -> float:
  samples = np.asarray(samples, np.float64)
  n = samples.shape[0]
  rho = _autocorrelation(samples).mean(axis=1)  # (n, dim), averaged over chains
  fractions = []
  for d in range(rho.shape[1]):
    r = rho[:, d]
    pairs = r[: 2 * (n // 2)].reshape(-1, 2).sum(axis=1)
    positive = np.nonzero(pairs <= 0)[0]
    pairs = pairs[: positive[0]] if positive.size else pairs
    pairs = np.minimum.accumulate(pairs)
    tau = max(-1.0 + 2.0 * pairs.sum(), 1.0 / n)
    fractions.append(1.0 / tau)
  return float(np.mean(fractions))


def truncated_ess(samples, mean=None, scale=None, threshold: float = 0.05) -> float:
  samples = np.asarray(samples, np.float64)
  n = samples.shape[0]
  x = samples - (0.0 if mean is None else np.asarray(mean))
  size = 2 ** int(np.ceil(np.log2(2 * n)))
  f = np.fft.rfft(x, n=size, axis=0)
  acov = np.fft.irfft(f * np.conj(f), n=size, axis=0)[:n]  # sums over t of x_t x_{t+tau}
  acov = acov.sum(axis=(1, 2)) / x.shape[1] / (n - np.arange(n))
  rho = acov / (acov[0] if scale is None else scale**2)
  below = np.nonzero(rho[1:] < threshold)[0]
  rho = rho[1: 1 + (below[0] if below.size else n)]
  return float(1.0 / (1.0 + 2.0 * np.sum(rho)))
