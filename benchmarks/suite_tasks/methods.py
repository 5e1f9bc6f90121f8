"""The optimizers of the suite, each as a :class:`runner.Method`.

Settings (all untuned, the same on every task):

* AdamW: ``optax.adamw(lr, weight_decay=0.1)`` (the presets' decoupled decay),
  ``lr`` from ``ADAMW_GRID``; warm-up + cosine: linear warm-up over 5 % of the
  budget to the best constant rate, cosine decay to 0 at the end.
* ``metaoptax.adamw()``: the learning-rate-free drop-in, from 1e-6 on every task,
  weight decay 0.1, every other setting at its default.
* metaoptax presets with the paper's defaults (meta step 1e-3, gamma 1, weight
  decay 0.1, Hessian-free unless stated), started at ``best AdamW rate / 100``.
* Adam-HD (Baydin et al. 2017): ``metaoptax.hypergradient_descent`` on the Adam
  direction with the paper's hypergradient step 1e-7, started like the presets.
* optax.contrib at their defaults: prodigy, dog, dadapt_adamw,
  ``mechanize(optax.adamw(1.0))``, schedule_free_adamw (lr 2.5e-3, evaluated at
  its averaged params via ``schedule_free_eval_params``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

import metaoptax
from suite_tasks.runner import Method

ADAMW_GRID = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
WEIGHT_DECAY = 0.1
INIT_SWEEP = (1e-7, 1e-6, 1e-5, 1e-4)
START_BELOW_BEST = 100.0  # the paper's convention: two orders below the best fixed rate
HD_HYPER_STEP = 1e-7  # Baydin et al.'s setting for Adam-HD
WARMUP_FRACTION = 0.05

PRESETS = {
    "(AdamW, Adam)": metaoptax.presets.adamw_adam,
    "(AdamW, Lion)": metaoptax.presets.adamw_lion,
    "(Lion, Lion)": metaoptax.presets.lion_lion,
    "(RMSProp, Adam)": metaoptax.presets.rmsprop_adam,
    "(SGD+mom, Adam)": metaoptax.presets.sgd_momentum_adam,
}
DEFAULT = "(AdamW, Adam)"


def adamw_grid(grid) -> Method:
  """AdamW at every rate of ``grid``, side by side in one compiled program."""
  return Method("AdamW grid", "adamw_grid",
                lambda lr: optax.adamw(lr, weight_decay=WEIGHT_DECAY), values=tuple(grid),
                names=tuple((f"AdamW {lr:g}", f"lr {lr:g}") for lr in grid))


def adamw_cosine(peak, steps) -> Method:
  warmup = max(1, int(WARMUP_FRACTION * steps))

  def make(_):
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak, warmup, steps, 0.0)
    return optax.adamw(schedule, weight_decay=WEIGHT_DECAY)

  return Method("AdamW warm-up+cosine", "adamw", make,
                info=f"peak {peak:g}, warm-up {warmup}")


def preset(label, init, blocks="scalar", blocks_label=None, approximation="hessian_free"):
  """A metaoptax preset with default meta settings."""
  fn = PRESETS[label]
  exact = approximation != "hessian_free"
  suffix = blocks_label or blocks
  name = f"{label} {suffix}" + (f" {approximation}" if exact else "")
  return Method(name, "metaoptax",
                lambda _: fn(init, blocks=blocks, approximation=approximation),
                needs_obj=exact, learned_step_size=True, info=f"start {init:.2g}")


def drop_in(init=1e-6) -> Method:
  """``metaoptax.adamw()``, untuned: from 1e-6 whatever the task, the grid's weight decay."""
  return Method("metaoptax.adamw()", "metaoptax",
                lambda _: metaoptax.adamw(init, weight_decay=WEIGHT_DECAY),
                learned_step_size=True, info=f"start {init:g}, defaults")


def set_start(state, init):
  """Sets the initial log step size (``metaoptimize`` takes it as a Python float)."""
  return state._replace(meta_params=jax.tree.map(
      lambda b: jnp.full_like(b, jnp.log(init)), state.meta_params))


def init_sweep(inits) -> Method:
  """The default (AdamW, Adam) scalar from every start in ``inits``, side by side."""
  return Method(f"{DEFAULT} scalar, start sweep", "init_sweep",
                lambda _: metaoptax.presets.adamw_adam(INIT_SWEEP[0]), learned_step_size=True,
                values=tuple(inits), prepare=set_start,
                names=tuple((f"{DEFAULT} scalar from {a:g}", f"start {a:g}") for a in inits))


def adam_hd(init) -> Method:
  return Method(
      "Adam-HD", "hypergradient",
      lambda _: metaoptax.hypergradient_descent(
          optax.scale_by_adam(eps_root=1e-30), meta_step_size=HD_HYPER_STEP,
          init_step_size=init),
      learned_step_size=True, info=f"start {init:.2g}, hyper step {HD_HYPER_STEP:g}")


def contrib() -> list[Method]:
  c = optax.contrib
  return [
      Method("prodigy", "contrib", lambda _: c.prodigy(), info="defaults"),
      Method("dog", "contrib", lambda _: c.dog(), info="defaults"),
      Method("dadapt_adamw", "contrib", lambda _: c.dadapt_adamw(), info="defaults"),
      Method("mechanize(adamw)", "contrib", lambda _: c.mechanize(optax.adamw(1.0)),
             info="adamw lr 1"),
      Method("schedule_free_adamw", "contrib", lambda _: c.schedule_free_adamw(),
             eval_params=lambda state, params: c.schedule_free_eval_params(state, params),
             info="lr 2.5e-3, averaged params"),
  ]
