"""Diagnosis: why the exact 2x2 (AdamW, Adam) degrades late on digits (suite task 1).

One seed, 30k steps from 3e-6 (the suite's start); every 500 steps prints the step
size, train loss − floor, the guard's counters and the largest trace entry.
``--radius`` sets the trust radius of the meta-sensitivity
(``sensitivity_radius`` of ``metaoptimize``; ``inf``: the plain recursion
of paper eq. 15). Outputs committed as ``results/suite/diagnose_2x2_digits.txt``
(``--radius inf``: the trace overflows and restarts) and
``results/suite/diagnose_2x2_digits_trust_region.txt`` (the default radius).

    python benchmarks/diagnose_2x2_digits.py [--radius inf]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import optax

import metaoptax
from metaoptax._src import exact

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from suite_tasks import digits  # pylint: disable=g-import-not-at-top,wrong-import-position

STEPS, CHUNK, START = 30_000, 500, 3e-6


def main(argv=None):
  parser = argparse.ArgumentParser()
  parser.add_argument("--radius", type=float, default=exact.DEFAULT_SENSITIVITY_RADIUS)
  radius = parser.parse_args(argv).radius
  problem = digits.make_problem()
  opt = metaoptax.presets.adamw_adam(START, approximation="2x2", sensitivity_radius=radius)
  params = problem.init(jax.random.key(0))
  state = opt.init(params)

  @jax.jit
  def chunk(params, state, key):
    def body(carry, k):
      p, s = carry
      batch = problem.batch(k)
      loss_fn = lambda w: problem.loss(w, batch)
      updates, s = opt.update(jax.grad(loss_fn)(p), s, p, obj_fn=loss_fn)
      return (optax.apply_updates(p, updates), s), None

    (params, state), _ = jax.lax.scan(body, (params, state), jax.random.split(key, CHUNK))
    return params, state

  key = jax.random.key(1)
  for i in range(STEPS // CHUNK):
    key, sub = jax.random.split(key)
    params, state = chunk(params, state, sub)
    alpha = float(jnp.ravel(metaoptax.step_sizes(state))[0])
    trace = max(float(jnp.max(jnp.abs(t))) for t in jax.tree.leaves(state.trace)
                if jnp.issubdtype(t.dtype, jnp.floating) and t.size)
    loss = float(problem.evaluate(params)["train_loss"]) - problem.train_loss_floor
    print(f"{(i + 1) * CHUNK} alpha {alpha:.3g} loss {loss:.3g} resets "
          f"{int(state.trace_resets)} skipped {int(state.skipped_steps)} "
          f"max|trace| {trace:.3g}", flush=True)


if __name__ == "__main__":
  main()
