r"""How the sampler benchmarks score a run: ESS per gradient of x and x^2, crossings, time.

Every sampler is given as draws ``(num_samples, chains, dim)``, the gradient
evaluations it spent per transition and the wall time of the sampling:

* ESS: Geyer's initial monotone sequence estimator (``metaoptax.l2hmc.ess.geyer_ess``:
  a fraction of the samples, the minimum over dimensions) of x and of x^2. A
  sampler that only reflects x -> -x (a symmetry of every target of the L2HMC
  paper) has a huge ESS of x and none of x^2, so both are reported.
* per gradient: the fraction divided by the gradient evaluations per transition.
* mode crossings: the fraction of transitions that change the sign of x[0]
  (the side of the mixture of two Gaussians).
* seconds per effective sample: wall time (the median of ``REPEATS`` runs of the
  compiled sampler in one process) over the effective sample count
  ``fraction * num_samples * chains``.
* R-hat: the split potential scale reduction (Gelman et al., BDA3 11.4: every
  chain split in halves, :math:`\sqrt{\widehat{\mathrm{var}}^+/W}`), the maximum over
  dimensions, of x and of x^2.

The headline every sampler row shares (:func:`headline`, tuningfork's): the minimum over
coordinates of the rank-normalized bulk ESS (Vehtari, Gelman, Simpson, Carpenter and
Bürkner 2021, `arXiv:1903.08008 <https://arxiv.org/abs/1903.08008>`_; arviz's
``ess(..., method="bulk")``, all chains pooled), divided by the gradient evaluations of the
whole run, every chain's: warm-up, screens, training, check and sampling. Per chain, it is
(min bulk ESS / chains) / (total gradients per chain); for independent draws, draws per
chain / total gradients per chain. Its gate, fixed before sampling: rank-normalized split
R-hat (arviz's ``rhat``) below 1.01 on every coordinate, min bulk ESS at least 400 and no
divergent transition.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import jax
import numpy as np

from metaoptax import l2hmc


def argument_parser(doc: str, out: pathlib.Path) -> argparse.ArgumentParser:
  """The sampler benchmarks' common options: targets, chains, K, quick, output folder."""
  parser = argparse.ArgumentParser(description=doc.splitlines()[0])
  targets = list(l2hmc.targets.all_targets())
  parser.add_argument("--targets", nargs="+", default=targets, choices=targets)
  parser.add_argument("--chains", type=int, default=200)
  parser.add_argument("--num-steps", type=int, default=10, help="leapfrog steps (K)")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", type=pathlib.Path, default=out)
  return parser


def start_positions(target, key, chains):
  """Exact draws of the target where it can be sampled (so that slow chains are not
  penalised for burn-in), else a standard normal."""
  if target.sample is not None:
    return target.sample(key, chains)
  return jax.random.normal(key, (chains, target.dim))


def mode_crossings(draws) -> float:
  """Fraction of transitions that change the sign of x[0] (the mixture's side)."""
  side = np.sign(np.asarray(draws)[..., 0])
  return float((side[1:] != side[:-1]).mean())


#: Timed runs of each compiled sampler; the median is reported (the machine is shared).
REPEATS = 3


def timed(compiled, *args, repeats: int = REPEATS):
  """``(compiled(*args), seconds)``: the median wall time of ``repeats`` identical runs in
  this process, each to ``block_until_ready`` (robust to another job's burst)."""
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    seconds.append(time.perf_counter() - start)
  return out, float(np.median(seconds))


def compiled_and_timed(fn, *args, repeats: int = REPEATS):
  """``(fn(*args), seconds)``: compiled ahead of the clock, then :func:`timed`."""
  return timed(jax.jit(fn).lower(*args).compile(), *args, repeats=repeats)


def split_rhat(draws) -> float:
  """BDA3's split R-hat of ``(num_samples, chains, dim)`` draws, max over dimensions."""
  draws = np.asarray(draws, np.float64)
  half = draws.shape[0] // 2
  split = np.concatenate([draws[:half], draws[half: 2 * half]], axis=1)  # (n, 2 chains, dim)
  n = split.shape[0]
  within = split.var(axis=0, ddof=1).mean(axis=0)
  between = n * split.mean(axis=0).var(axis=0, ddof=1)
  var_plus = (n - 1) / n * within + between / n
  return float(np.max(np.sqrt(var_plus / np.maximum(within, 1e-300))))


#: tuningfork's gate: rank-normalized R-hat below this on every coordinate, ...
GATE_RHAT = 1.01
#: ... min bulk ESS (all chains) at least this, and no divergent transition.
GATE_ESS = 400


def _dataset(draws):
  """``(num_samples, chains, dim)`` draws as arviz's dataset (chain, draw, dim)."""
  import arviz  # pylint: disable=g-import-not-at-top
  return arviz.convert_to_dataset(np.swapaxes(np.asarray(draws, np.float64), 0, 1))


def bulk_ess(draws) -> np.ndarray:
  """arviz's rank-normalized bulk ESS of each coordinate of ``(num_samples, chains, dim)``
  draws, all chains pooled, as a count ``(dim,)``."""
  import arviz  # pylint: disable=g-import-not-at-top
  return np.asarray(arviz.ess(_dataset(draws), method="bulk")["x"].values, np.float64)


def rank_rhat(draws) -> np.ndarray:
  """arviz's rank-normalized split R-hat of each coordinate, ``(dim,)``."""
  import arviz  # pylint: disable=g-import-not-at-top
  return np.asarray(arviz.rhat(_dataset(draws))["x"].values, np.float64)


def headline(draws, total_grads_per_chain, divergences: int | None) -> dict:
  """tuningfork's headline and gate (the module docstring) of one run.

  Args:
    draws: ``(num_samples, chains, dim)``.
    total_grads_per_chain: every gradient evaluation of the run per chain (warm-up,
      screens, training, check and sampling); a scalar or ``(chains,)`` (averaged).
    divergences: divergent transitions of the sampling, all chains; None where the
      sampler does not report them (the gate then checks R-hat and ESS alone).

  Returns:
    ``min_bulk_ess`` (all chains), ``max_rank_rhat``, ``divergences``,
    ``total_grads_per_chain``, ``min_bulk_ess_per_grad`` (the headline) and ``gate``
    (a bool).
  """
  draws = np.asarray(draws, np.float64)
  chains = draws.shape[1]
  grads = float(np.mean(total_grads_per_chain))
  if not grads > 0:
    raise ValueError(f"total_grads_per_chain must be > 0, got {total_grads_per_chain}")
  ess = bulk_ess(draws)
  rhat = rank_rhat(draws)
  min_ess = float(np.nan_to_num(np.min(ess), nan=0.0))
  max_rhat = float(np.nan_to_num(np.max(rhat), nan=np.inf))
  gate = bool(max_rhat < GATE_RHAT and min_ess >= GATE_ESS and not divergences)
  return dict(min_bulk_ess=min_ess, max_rank_rhat=max_rhat,
              divergences=None if divergences is None else int(divergences),
              total_grads_per_chain=grads, min_bulk_ess_per_grad=min_ess / chains / grads,
              gate=gate)


def score(draws, grads_per_transition: float, seconds: float) -> dict:
  """The metrics of one run (see the module docstring)."""
  draws = np.asarray(draws, np.float64)
  count = draws.shape[0] * draws.shape[1]
  ess_x, ess_x2 = l2hmc.ess.geyer_ess(draws), l2hmc.ess.geyer_ess(draws**2)
  return dict(ess_x=ess_x, ess_x2=ess_x2,
              ess_per_grad_x=ess_x / grads_per_transition,
              ess_per_grad_x2=ess_x2 / grads_per_transition,
              crossings=mode_crossings(draws), grads_per_transition=float(grads_per_transition),
              seconds=float(seconds),
              seconds_per_ess_x=seconds / (ess_x * count),
              seconds_per_ess_x2=seconds / (ess_x2 * count),
              rhat_x=split_rhat(draws), rhat_x2=split_rhat(draws**2),
              ess_cap=float(np.log10(count)))  # Geyer's ceiling: tau >= 1/log10(samples x chains)
