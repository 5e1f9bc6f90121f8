"""Cost of an L2HMC transition with the networks off against a blackjax HMC transition.

With ``use_networks=False`` and one shared step size the L2HMC kernel is HMC
(Levy, Hoffman and Sohl-Dickstein 2018, `arXiv:1711.09268
<https://arxiv.org/abs/1711.09268>`_), so the two should cost the same. On each
target of the L2HMC paper, over 200 vmapped chains, K = 10 leapfrog steps and
the same step size, in one process:

* **one transition**: a jitted ``vmap(step)`` call per transition;
* **scanned**: ``lax.scan`` of 50 vmapped transitions in one jitted call, per
  transition (what sampling costs without the per-call dispatch);

each compiled before the clock, repeated with the two samplers interleaved,
reported as medians and the ratio L2HMC / blackjax.

Both directions under vmap. A chain draws its direction d = +-1; the leapfrog
selects between the two directions' closed forms elementwise (no ``lax.cond``,
which under vmap with mixed directions would run both trajectories). Two checks:
the gradient evaluations of ``log p`` traced per leapfrog step of the vmapped
kernel (1 if only one direction's are computed), and the time of a vmapped
proposal with every chain forward against mixed directions, networks off and on.

    python benchmarks/sampler_cost.py                # ~3 min
    python benchmarks/sampler_cost.py --quick
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import _sampler_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT = HERE / "out" / "sampler_cost"  # git-ignored; the committed table: --out results
STEP_SIZE = 0.1
SCANNED = 50  # transitions per call in the scanned measurement


def interleaved_medians(calls: dict, repeats: int) -> dict:
  """``{name: median seconds}`` of ``calls[name]()``, the calls interleaved per repeat."""
  times = {name: [] for name in calls}
  for _ in range(repeats):
    for name, call in calls.items():
      start = time.perf_counter()
      jax.block_until_ready(call())
      times[name].append(time.perf_counter() - start)
  return {name: float(np.median(t)) for name, t in times.items()}


def compiled(fn, *args):
  """``fn`` compiled for ``args`` and run once, as a call without arguments."""
  executable = jax.jit(fn).lower(*args).compile()
  jax.block_until_ready(executable(*args))
  return lambda: executable(*args)


def scanned(sampler, chains: int, transitions: int):
  """``run(key, states) -> states``: ``transitions`` vmapped transitions of ``chains`` chains in
  one ``lax.scan``."""
  def run(key, states):
    def one(states, key):
      return jax.vmap(sampler.step)(jax.random.split(key, chains), states)[0], None

    return jax.lax.scan(one, states, jax.random.split(key, transitions))[0]

  return run


def samplers(target, num_steps: int, use_networks: bool = False):
  """L2HMC (networks off, one shared step size, unless ``use_networks``) and blackjax HMC."""
  import blackjax  # pylint: disable=g-import-not-at-top
  config = l2hmc.L2HMCConfig(dim=target.dim, num_steps=num_steps, use_networks=use_networks,
                             step_sizes="shared", init_step_size=STEP_SIZE)
  params = l2hmc.init_params(jax.random.key(0), config)
  masks = l2hmc.make_masks(jax.random.key(1), config)
  ours = l2hmc.l2hmc(target.logdensity_fn, config, params, masks)
  hmc = blackjax.hmc(target.logdensity_fn, STEP_SIZE, jnp.ones(target.dim), num_steps)
  return (config, params, masks), ours, hmc


def transition_costs(target, chains: int, num_steps: int, repeats: int) -> dict:
  """Median seconds per transition of both samplers, one per call and scanned."""
  _, ours, hmc = samplers(target, num_steps)
  positions = jax.random.normal(jax.random.key(2), (chains, target.dim))
  keys = jax.random.split(jax.random.key(3), chains)

  calls = {}
  for name, sampler in (("l2hmc", ours), ("blackjax", hmc)):
    states = jax.vmap(sampler.init)(positions)
    calls[f"{name} one"] = compiled(jax.vmap(sampler.step), keys, states)
    calls[f"{name} scanned"] = compiled(scanned(sampler, chains, SCANNED), jax.random.key(4),
                                        states)
  medians = interleaved_medians(calls, repeats)
  for name in ("l2hmc", "blackjax"):
    medians[f"{name} scanned"] /= SCANNED
  return dict(medians, ratio_one=medians["l2hmc one"] / medians["blackjax one"],
              ratio_scanned=medians["l2hmc scanned"] / medians["blackjax scanned"])


def traced_gradients_per_step(target, chains: int, num_steps: int) -> float:
  """Evaluations of ``log p``'s gradient in the traced vmapped kernel, per leapfrog step."""
  (config, params, masks), _, _ = samplers(target, num_steps, use_networks=True)
  count = [0]

  def counted(x):
    count[0] += 1
    return target.logdensity_fn(x)

  sampler = l2hmc.l2hmc(counted, config, params, masks)
  states = jax.vmap(sampler.init)(jnp.zeros((chains, target.dim)))
  count[0] = 0
  jax.make_jaxpr(jax.vmap(sampler.step))(jax.random.split(jax.random.key(0), chains), states)
  # the scan traces its body (one leapfrog step) once for all K steps
  return float(count[0])


def direction_costs(target, chains: int, num_steps: int, repeats: int,
                    use_networks: bool) -> dict:
  """Median seconds of a vmapped proposal: every chain forward, every chain backward, mixed."""
  (config, params, masks), ours, _ = samplers(target, num_steps, use_networks)
  states = jax.vmap(ours.init)(jax.random.normal(jax.random.key(2), (chains, target.dim)))
  momenta = jax.random.normal(jax.random.key(3), (chains, target.dim))
  propose = jax.vmap(lambda state, v, d: l2hmc.propose(config, params, masks,
                                                       target.logdensity_fn, state, v, d))
  mixed = jnp.where(jax.random.bernoulli(jax.random.key(4), shape=(chains,)), 1, -1)
  calls = {label: compiled(propose, states, momenta, directions)
           for label, directions in (("forward", jnp.ones(chains, jnp.int32)),
                                     ("backward", -jnp.ones(chains, jnp.int32)),
                                     ("mixed", mixed))}
  return interleaved_medians(calls, repeats)


def report(records: list[dict], before: dict | None, quick: bool) -> list[str]:
  first = records[0]
  lines = [
      "# L2HMC with the networks off vs blackjax HMC: cost of a transition\n",
      f"{first['chains']} vmapped chains, K = {first['num_steps']}, step size {STEP_SIZE}, "
      f"jitted, compiled before the clock, {first['repeats']} interleaved repeats, medians; "
      f"commit `{first['commit']}`, blackjax {first['blackjax']}"
      f"{' (--quick)' if quick else ''}. One: a call per transition (includes the "
      f"dispatch); scanned: {SCANNED} transitions in one call, per transition.", "",
      "| target | L2HMC one (ms) | blackjax one (ms) | ratio | L2HMC scanned (ms) |"
      " blackjax scanned (ms) | ratio |" + (" ratios before (one, scanned) |" if before else ""),
      "|---|---|---|---|---|---|---|" + ("---|" if before else "")]
  for r in records:
    row = (f"| {r['target']} | {1e3 * r['l2hmc one']:.3f} | {1e3 * r['blackjax one']:.3f} |"
           f" **{r['ratio_one']:.2f}** | {1e3 * r['l2hmc scanned']:.3f} |"
           f" {1e3 * r['blackjax scanned']:.3f} | **{r['ratio_scanned']:.2f}** |")
    if before:
      b = before.get(r["name"])
      row += f" {b['ratio_one']:.2f}, {b['ratio_scanned']:.2f} |" if b else " |"
    lines.append(row)
  if before:
    lines += ["", f"Before: commit `{before['commit']}`, the same script."]
  lines += ["", "Both directions under vmap: gradient evaluations of log p traced per "
            "leapfrog step of the vmapped kernel (networks on), and the median time (ms) of a "
            "vmapped proposal (K steps) with every chain forward, backward, or mixed.", "",
            "| target | gradients traced per step | networks | forward | backward | mixed |",
            "|---|---|---|---|---|---|"]
  for r in records:
    for networks in ("off", "on"):
      d = r[f"directions_networks_{networks}"]
      lines.append(f"| {r['target']} | {r['gradients_traced_per_step']:.0f} | {networks} |"
                   f" {1e3 * d['forward']:.3f} | {1e3 * d['backward']:.3f} |"
                   f" {1e3 * d['mixed']:.3f} |")
  return lines


def main(argv=None):
  parser = _sampler_metrics.argument_parser(__doc__, OUT)
  parser.add_argument("--repeats", type=int, default=41)
  parser.add_argument("--before", type=pathlib.Path, default=None,
                      help="sampler_cost.json of an earlier commit, for its ratios")
  args = parser.parse_args(argv)
  targets = l2hmc.targets.all_targets()
  import blackjax  # pylint: disable=g-import-not-at-top
  import tqdm  # pylint: disable=g-import-not-at-top
  repeats = 5 if args.quick else args.repeats
  commit = _report.git_commit(short=True)
  records = []
  for name in tqdm.tqdm(args.targets, desc="targets", leave=False):
    target = targets[name]
    record = dict(name=name, target=target.name, chains=args.chains,
                  num_steps=args.num_steps, repeats=repeats, commit=commit,
                  blackjax=blackjax.__version__, quick=args.quick)
    record.update(transition_costs(target, args.chains, args.num_steps, repeats))
    record["gradients_traced_per_step"] = traced_gradients_per_step(target, args.chains,
                                                                    args.num_steps)
    for networks in ("off", "on"):
      record[f"directions_networks_{networks}"] = direction_costs(
          target, args.chains, args.num_steps, repeats, use_networks=networks == "on")
    records.append(record)
    print(f"{name}: ratio one {record['ratio_one']:.2f}, scanned {record['ratio_scanned']:.2f}",
          flush=True)
  before = None
  if args.before is not None:
    previous = json.loads(args.before.read_text())
    before = {r["name"]: r for r in previous}
    before["commit"] = previous[0]["commit"]
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "sampler_cost.json").write_text(json.dumps(records, indent=1))
  return _report.write_table(report(records, before, args.quick),
                             str(args.out / "sampler_cost.md"))


if __name__ == "__main__":
  main()
