"""Does annealing pay on the meta-training tasks of ``l2o_transfer.py``? Adam with and without a decay.

The meta-objective of ``l2o_transfer.py`` can only teach a decay of the step size where
a decay lowers the loss of its tasks within the horizon (2,000 steps). Here, on 4
held-out tasks of each training classifier (the ``l2o.Validation`` key of
``l2o_transfer.py``, label smoothing 0.1, the loss above its floor), ``optax.adam`` runs
2,000 steps at a constant 8e-3 (about the rate that the learned optimizers of
``l2o_transfer.py`` hold before they anneal), and with that rate cut at step 1,000 to
1.5e-3 or to 5e-4 (a step decay, the schedule the learned optimizers approximate), and
at a constant 3e-3 (the base rate). Reported: the median loss over the tasks at steps
1,000 and 2,000; a decay *pays* on a family when either cut ends below the constant
8e-3. The families are those of ``l2o_transfer.training_families``, default
(``--families default``) and the three that ``--families floor`` swaps in.

    python benchmarks/l2o_noise_floor.py            # about 8 min on 2 busy cores
    python benchmarks/l2o_noise_floor.py --results  # write benchmarks/results/

Writes ``l2o_noise_floor.md`` into ``--out`` (default ``benchmarks/out/``).
"""

from __future__ import annotations

import argparse
import pathlib
import time

import jax
import numpy as np
import optax

import _report
import l2o_transfer
from metaoptax import l2o
from suite_tasks import digits
from suite_tasks import mnist1d

HORIZON = 2000
CUT = 1000
RATE = 8e-3


def optimizers():
  cut = lambda low: optax.adam(optax.piecewise_constant_schedule(RATE, {CUT: low / RATE}))
  return {f"Adam {RATE:g}": optax.adam(RATE), f"cut to 1.5e-3 at {CUT}": cut(1.5e-3),
          f"cut to 5e-4 at {CUT}": cut(5e-4), "Adam 3e-3": optax.adam(3e-3)}


def families():
  """``[(set, family)]``: the six default classifiers and the three of ``--families floor``."""
  data = digits.load_split()[:2], mnist1d.load_data()[:2]
  default = l2o_transfer.training_families(*data, 1024, 0.1)[:6]
  floor = l2o_transfer.training_families(*data, 1024, 0.1, noise_floor=True)[:6]
  swapped = [f for f, d in zip(floor, default) if f.name != d.name]
  return [("default", f) for f in default] + [("floor", f) for f in swapped]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tasks", type=int, default=4)
  parser.add_argument("--out", type=pathlib.Path, default=l2o_transfer.OUT)
  parser.add_argument("--results", action="store_true")
  args = parser.parse_args(argv)
  out = l2o_transfer.RESULTS if args.results else args.out
  commit = _report.git_commit(short=True)
  start = time.perf_counter()
  names = list(optimizers())
  lines = ["# Does a decay of Adam's rate pay on the meta-training classifiers within 2,000 steps?",
           "", f"measured at commit `{commit}`, jax {jax.__version__} (`l2o_noise_floor.py`); median "
           f"over {args.tasks} held-out tasks (key 777) of the loss above the label-smoothing floor, "
           f"at step {CUT} / step {HORIZON}. **Bold**: a cut ends below the constant {RATE:g}.", "",
           "| set | family | " + " | ".join(names) + " | decay pays |",
           "|---|---|" + "---|" * len(names) + "---|"]
  for kind, family in families():
    medians = {}
    for name, opt in optimizers().items():
      losses = np.asarray(l2o.evaluate(jax.random.key(777), family, opt, args.tasks, HORIZON))
      medians[name] = (float(np.median(losses[:, CUT])), float(np.median(losses[:, HORIZON])))
    constant = medians[names[0]][1]
    pays = min(medians[names[1]][1], medians[names[2]][1]) < constant
    cells = [f"{a:.3g} / " + (f"**{b:.3g}**" if 0 < i < 3 and b < constant else f"{b:.3g}")
             for i, (a, b) in enumerate(medians.values())]
    lines.append(f"| {kind} | {family.name} | " + " | ".join(cells) + f" | {'yes' if pays else 'no'} |")
    print(lines[-1], flush=True)
  lines += ["", f"{(time.perf_counter() - start) / 60:.1f} min on 2 CPU cores shared with other jobs."]
  _report.write_table(lines, str(out / "l2o_noise_floor.md"))


if __name__ == "__main__":
  main()
