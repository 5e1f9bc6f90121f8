"""Training across processes (``jax.distributed``), as in one process on the same mesh.

Two processes with 2 forced host devices each form a 4-device global mesh
(CPU collectives through gloo, a coordinator on a free localhost port) and run
every case below once per test run, SPMD. At the same time one process with 4
host devices runs the same cases on the same (2, 2) mesh; it then reads the
pair's results and compares, with the tolerances of the single-process
8-device tests (float32; only the order of the cross-device reductions may
differ):

* MetaOptimize (Hessian-free with one step size per leaf, the exact 2x2
  approximation with one step size): 10 jitted steps on a small MLP whose
  params are sharded over both mesh axes, so across the processes; params and
  state to rtol 1e-5, atol 1e-6.
* L2O meta-training with the tasks split over the processes, on tasks of which
  some are poisoned (NaN loss): meta-losses and network to 1e-6, the skipped
  meta updates counted the same (the global count) and shown by process 0 only.
* L2HMC training with the chains split over the processes: losses,
  acceptance, parameters, optimizer state and chains to 1e-6 (relative to
  max(1, |value|)). Its orbax checkpoints are written by both processes
  together, once per iteration checkpointed. The run resumes from the mid-run
  checkpoint bit for bit on 2 processes, and to 1e-6 in one process; the last
  checkpoint restores bit for bit in one process on another mesh (the chains
  over 4 devices of one axis).
* The reference also runs the L2O and L2HMC cases on one device, without a
  mesh: the 4-device runs equal them to 1e-6 (the tasks and the chains split
  over the mesh, the network and the parameters replicated).

Measured: every case bit for bit except the L2O network (2e-9); about a minute
of wall time on 2 CPU cores, 30 s of CPU time per process.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import metaoptax
from metaoptax import checkpoint, l2hmc, l2o
from metaoptax._src import multihost

# One launch of the process pair serves the whole module: keep it on one xdist worker.
pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.xdist_group("multiprocess")]

PROCESSES, LOCAL_DEVICES = 2, 2
TIMEOUT = 300  # seconds for all (the pair and the one-process reference run at once)
RTOL, ATOL = 1e-5, 1e-6  # MetaOptimize, as in the 8-device sharding tests
LOOP_TOL = 1e-6  # L2O and L2HMC, as in the 8-device training-loop tests
METAOPTIMIZE = ("hessian_free-per_leaf", "2x2-scalar")
STEPS = 10
L2O_ITERATIONS, L2HMC_ITERATIONS = 4, 5


# --------------------------------------------------------------------------
# The parent: launch the pair and the reference at once; assert per case.
# --------------------------------------------------------------------------


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int) -> dict:
  """The run's XLA flags (fast compiles, ``conftest.py``) and ``devices`` host devices."""
  from tests.conftest import xla_flags  # not at the top: the workers run this file alone
  root = str(pathlib.Path(__file__).resolve().parents[2])
  path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
  return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": path,
          "XLA_FLAGS": xla_flags(f"--xla_force_host_platform_device_count={devices}")}


def _run_all(commands: dict, workdir: str) -> dict:
  """Runs the commands ({name: (argv, devices)}) at once; their stdouts.

  Fails (RuntimeError, with every process's stderr) as soon as one exits with
  an error, or when TIMEOUT passes; the others are then killed.
  """
  procs, logs = {}, {}
  for name, (argv, devices) in commands.items():
    logs[name] = (open(os.path.join(workdir, f"{name}.out"), "w+"),
                  open(os.path.join(workdir, f"{name}.err"), "w+"))
    procs[name] = subprocess.Popen([sys.executable, __file__, *argv], env=_env(devices),
                                   stdout=logs[name][0], stderr=logs[name][1], text=True)
  deadline, failed = time.monotonic() + TIMEOUT, None
  while failed is None and any(p.poll() is None for p in procs.values()):
    failed = next((f"{name} exited with {p.returncode}" for name, p in procs.items()
                   if p.poll()), None)
    if time.monotonic() > deadline:
      failed = f"timed out after {TIMEOUT} s"
    time.sleep(0.1)
  failed = failed or next((f"{name} exited with {p.returncode}" for name, p in procs.items()
                           if p.returncode), None)
  texts = {}
  for name, proc in procs.items():
    if proc.poll() is None:
      proc.kill()
    proc.wait()
    out, err = logs[name]
    out.seek(0), err.seek(0)
    texts[name] = out.read(), err.read()
    out.close(), err.close()
  if failed:
    raise RuntimeError(f"the multi-process test: {failed}\n" + "\n".join(
        f"--- {name} stderr ---\n{err[-2500:]}" for name, (_, err) in texts.items()))
  return {name: out for name, (out, _) in texts.items()}


def _records() -> dict:
  workdir = tempfile.mkdtemp(prefix="metaoptax-multiprocess-")
  try:
    start = time.perf_counter()
    port = str(_free_port())
    commands = {f"process {i}": (["--worker", str(i), port, workdir], LOCAL_DEVICES)
                for i in range(PROCESSES)}
    commands["reference"] = (["--reference", workdir], PROCESSES * LOCAL_DEVICES)
    outputs = _run_all(commands, workdir)
    records = json.loads(outputs["reference"].strip().splitlines()[-1])
    records["stdout"] = [outputs[f"process {i}"] for i in range(PROCESSES)]
    records["seconds"] = time.perf_counter() - start
    return records
  except RuntimeError as e:
    return {"error": str(e)}
  finally:
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  from tests.conftest import computed_once  # not at the top: the workers run this file alone
  records = computed_once(tmp_path_factory, "multiprocess_records", _records)
  assert "error" not in records, records.get("error")
  return records


def _case(records, name):
  record = records[name]
  assert record.get("error") is None, f"{name}: {record['error']}"
  return record


@pytest.mark.parametrize("name", METAOPTIMIZE)
def test_metaoptimize_sharded_across_processes_matches_one_process(records, name):
  r = _case(records, f"metaoptimize/{name}")
  assert r["processes_per_leaf"] == {"w1": 2, "w2": 2, "b": 2, "s": 2}, r
  assert r["max_violation"] <= 0.0, (
      f"max |2 processes - 1 process| = {r['max_abs_diff']:.3g} exceeds atol {ATOL} + "
      f"rtol {RTOL} |value|")
  assert r["finite"] and r["moved"] > 1e-3, r  # the steps did something


def test_l2o_meta_training_with_tasks_split_across_processes(records):
  r = _case(records, "l2o")
  assert r["task_processes"] == 2 and r["net_processes"] == 2, r  # tasks split, net replicated
  total = L2O_ITERATIONS * 2  # two truncations per task batch
  assert 0 < r["skipped"][0] < total, "the poisoned tasks should veto some meta updates"
  assert r["skipped"][0] == r["skipped"][1] == r["nonfinite_losses"], r  # global counts
  assert r["same_nan"], r
  assert r["loss_diff"] < LOOP_TOL and r["param_diff"] < LOOP_TOL, r


def test_only_process_0_reports_progress(records):
  first, second = records["stdout"]
  lines = [line for line in first.splitlines() if line.startswith("L2O meta-training")]
  assert [line.split(":")[0] for line in lines] == [
      f"L2O meta-training {i}/{L2O_ITERATIONS}" for i in (2, 4)], first
  skipped = records["l2o"]["skipped"][1]
  assert f"skipped {skipped}," in lines[-1], lines  # the global count
  assert "L2O meta-training" not in second and "L2HMC" not in second, second


def test_l2hmc_training_with_chains_split_across_processes(records):
  r = _case(records, "l2hmc")
  assert r["chain_processes"] == 2 and r["chain_spec"] == "P('chains',)", r
  assert r["skipped"] == [0, 0], r
  for name in ("loss_diff", "acceptance_diff", "param_diff", "opt_state_diff", "chain_diff"):
    assert r[name] < LOOP_TOL, (name, r)


def test_l2o_meta_training_on_the_mesh_matches_one_device(records):
  r = records["one_device"]
  assert r["task_devices"] == 4 and r["task_spec"] == "P('tasks',)", r
  assert r["task_shards"] == [[2]] and r["net_replicated"], r  # 8 tasks, 2 per device
  assert r["l2o_skipped"][0] == r["l2o_skipped"][1] > 0 and r["l2o_same_nan"], r
  # float32 sums over tasks in another order: agreement to a few ulps of O(1) values
  assert r["l2o_loss_diff"] < LOOP_TOL and r["l2o_param_diff"] < LOOP_TOL, r


def test_l2hmc_training_on_the_mesh_matches_one_device(records):
  r = records["one_device"]
  assert r["chain_spec"] == "P('chains',)" and r["chain_shards"] == [[4, 2]], r  # 8 chains,
  assert r["params_replicated"] and r["l2hmc_skipped"] == [0, 0], r  # 4 per "chains" device
  # float32 means over chains summed in another order
  for name in ("loss", "acceptance", "params", "opt_state", "chains"):
    assert r[f"l2hmc_{name}_diff"] < LOOP_TOL, (name, r)


def test_checkpoints_written_once_resume_and_restore_on_another_topology(records):
  r = _case(records, "checkpoint")
  # one orbax checkpoint per checkpointed iteration, nothing left half-written
  assert r["listing"] == ["2", "4", "5", "start.json"], r
  assert r["resumed_identical"], "the 2-process resume differs from the uninterrupted run"
  assert r["restored_identical"] and r["restored_spec"] == "P('chains',)", r
  assert r["restored_devices"] == 4 and r["restored_processes"] == 1, r
  # continued in one process from the 2-process checkpoint of iteration 2 (measured: 0)
  assert r["continued_diff"] < LOOP_TOL, r


# --------------------------------------------------------------------------
# The cases (run in the workers and in the reference).
# --------------------------------------------------------------------------


def _mlp():
  """A small MLP's params (host arrays) and its loss on fixed data."""
  k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
  params = {"w1": np.asarray(0.3 * jax.random.normal(k1, (8, 8))),
            "w2": np.asarray(0.3 * jax.random.normal(k2, (8, 16))),
            "b": np.zeros(16, np.float32), "s": np.ones((), np.float32)}
  x, y = np.asarray(jax.random.normal(k3, (32, 8))), np.asarray(jax.random.normal(k4, (32, 16)))

  def loss(p):
    pred = p["s"] * (jnp.tanh(x @ p["w1"]) @ p["w2"] + p["b"])
    return jnp.mean((pred - y) ** 2) + 0.01 * jnp.sum(p["w1"] ** 2)

  return params, loss


def _metaoptimize(name, mesh):
  """Params and state after STEPS jitted steps, params sharded over both mesh axes."""


  values, loss = _mlp()
  specs = {"w1": P("data", "model"), "w2": P("model", "data"), "b": P("data"), "s": P()}
  params = {k: multihost.put(v, NamedSharding(mesh, specs[k])) for k, v in values.items()}
  approximation, blocks = name.split("-")
  opt = metaoptax.presets.adamw_adam(1e-3, approximation=approximation, blocks=blocks)
  extra = {} if approximation == "hessian_free" else {"obj_fn": loss}

  @jax.jit
  def step(params, state):
    updates, state = opt.update(jax.grad(loss)(params), state, params, **extra)
    return optax.apply_updates(params, updates), state

  state = jax.jit(opt.init)(params)
  for _ in range(STEPS):
    params, state = step(params, state)
  processes = {k: len({d.process_index for d in v.sharding.device_set})
               for k, v in params.items()}
  return multihost.gathered((params, state)), processes, values


@functools.lru_cache(maxsize=None)  # one family object: the runs share compiled steps
def _l2o_problem():
  base = l2o.tasks.ellipse()  # tasks with b[0] > 1.2 have a NaN loss: some batches' updates
  family = base._replace(name="poisoned", loss=lambda task, x: jnp.where(  # are skipped
      task["b"][0] > 1.2, jnp.nan, 1.0) * base.loss(task, x))
  return (family, l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4),
          l2o.TrainingConfig(tasks_per_step=8, horizon=4, unroll=2, log_loss=True))


def _l2o(mesh, progress):
  family, config, training = _l2o_problem()
  return l2o.train(jax.random.key(5), family, config, training, num_iterations=L2O_ITERATIONS,
                   mesh=mesh, data_axis=None if mesh is None else "tasks", progress=progress,
                   log_every=2)


@functools.lru_cache(maxsize=None)  # one target function: a resumed run reuses the compiled step
def _l2hmc_problem():
  return (l2hmc.targets.strongly_correlated_gaussian(),
          l2hmc.L2HMCConfig(dim=2, num_steps=2, hidden=4, step_sizes="shared", use_networks=True,
                            per_coordinate=False, jitter=0.0),
          l2hmc.TrainingConfig(num_chains=8, aux_weight=0.0, objective="esjd", warmup_iterations=0,
                               drop_nonfinite_chains=False))


def _l2hmc(mesh, **kwargs):
  target, config, training = _l2hmc_problem()
  return l2hmc.train(jax.random.key(0), target, config, training, num_iterations=L2HMC_ITERATIONS, mesh=mesh,
                     data_axis=None if mesh is None else "chains", progress=None, **kwargs)


def _meshes():
  devices = np.array(jax.devices()).reshape(2, 2)  # rows: one process each in the pair
  return (Mesh(devices, ("data", "model")), Mesh(devices.reshape(-1), ("tasks",)),
          Mesh(devices, ("chains", "other")))


def _flat(tree) -> dict:
  """Leaves as host arrays named by position (typed keys as their key data)."""
  leaves = [jax.random.key_data(x) if isinstance(x, jax.Array) and jax.dtypes.issubdtype(
      x.dtype, jax.dtypes.prng_key) else x for x in jax.tree.leaves(tree)]
  return {f"{i:04d}": np.asarray(x) for i, x in enumerate(leaves)}


def _worker(process_id: int, port: str, workdir: str) -> None:
  """One process of the pair: every case, SPMD; process 0 saves the results."""
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                             num_processes=PROCESSES, process_id=process_id)
  assert jax.process_count() == PROCESSES and jax.device_count() == 4, jax.devices()
  mesh, task_mesh, chain_mesh = _meshes()
  saved = {}
  clock = time.process_time()
  for name in METAOPTIMIZE:
    tree, processes, _ = _metaoptimize(name, mesh)
    saved[f"cpu/{name}"], clock = time.process_time() - clock, time.process_time()
    saved.update({f"metaoptimize/{name}/{k}": v for k, v in _flat(tree).items()})
    saved[f"metaoptimize/{name}/processes"] = np.array(
        [processes[k] for k in ("w1", "w2", "b", "s")])
  result = _l2o(task_mesh, print)
  saved["cpu/l2o"], clock = time.process_time() - clock, time.process_time()
  saved.update({f"l2o/params/{k}": v for k, v in _flat(result.params).items()})
  saved["l2o/losses"], saved["l2o/skipped"] = result.losses, result.skipped_updates
  saved["l2o/task_processes"] = len({d.process_index for d in task_mesh.devices.flat})
  saved["l2o/net_processes"] = min(len({d.process_index for d in x.sharding.device_set})
                                   for x in jax.tree.leaves(result.state.params))

  directory = os.path.join(workdir, "checkpoints")
  full = _l2hmc(chain_mesh, checkpoint_dir=directory, checkpoint_every=2)
  saved["cpu/l2hmc"], clock = time.process_time() - clock, time.process_time()
  position = full.state.chains.position
  saved["l2hmc/chain_processes"] = len({d.process_index for d in position.sharding.device_set})
  saved["l2hmc/chain_spec"] = np.array(str(position.sharding.spec))
  listing = sorted(os.listdir(directory))
  multihost.barrier("listed")
  if multihost.is_main_process():  # interrupted after iteration 2: resume on 2 processes
    shutil.copytree(directory, os.path.join(workdir, "resumed"))
    for later in ("4", "5"):
      shutil.rmtree(os.path.join(workdir, "resumed", later))
  multihost.barrier("interrupted")
  resumed = _l2hmc(chain_mesh, checkpoint_dir=os.path.join(workdir, "resumed"))
  final = multihost.gathered(full.state)
  a, b = _flat(final), _flat(multihost.gathered(resumed.state))
  saved["checkpoint/resumed_identical"] = all(np.array_equal(a[k], b[k]) for k in a)
  saved["checkpoint/listing"] = np.array(listing)
  saved.update({f"l2hmc/state/{k}": v for k, v in a.items()})
  for field in ("params", "opt_state", "chains"):
    saved.update({f"l2hmc/{field}/{k}": v for k, v in _flat(getattr(final, field)).items()})
  saved["l2hmc/losses"], saved["l2hmc/acceptance"] = full.losses, full.acceptance
  saved["l2hmc/skipped"] = full.skipped_updates
  saved["cpu/resume"] = time.process_time() - clock
  if multihost.is_main_process():  # complete, then renamed: the reference waits for it
    np.savez(os.path.join(workdir, "pair-tmp.npz"), **saved)
    os.replace(os.path.join(workdir, "pair-tmp.npz"), os.path.join(workdir, "pair.npz"))
  multihost.barrier("saved")


def _relative(a: dict, b: dict) -> float:
  """max |a - b| relative to max(1, max |a|), over the leaves (``_flat`` dicts)."""
  return max([0.0] + [float(np.max(np.abs(a[k].astype(np.float64) - b[k])))
                      / max(1.0, float(np.max(np.abs(a[k])))) for k in a if a[k].size])


def _one_device(task_mesh, l2o_result, l2hmc_result) -> dict:
  """The L2O and L2HMC runs of the reference (4 devices) against the same runs on one
  device, without a mesh; where the tasks and the chains were."""
  family, config, training = _l2o_problem()
  one = _l2o(None, None)
  step = jax.jit(l2o.build_training_step(family, config, training, mesh=task_mesh,
                                         data_axis="tasks"))  # train's compiled step
  task_losses = step(l2o_result.state)[1].task_losses
  hmc = _l2hmc(None)
  many = l2hmc_result.state
  chains = many.chains.position
  everywhere = lambda tree: all(x.sharding.is_fully_replicated and len(x.sharding.device_set) == 4
                                for x in jax.tree.leaves(tree))
  return {
      "l2o_loss_diff": float(np.nanmax(np.abs(one.losses - l2o_result.losses))),
      "l2o_same_nan": bool(np.array_equal(np.isnan(one.losses), np.isnan(l2o_result.losses))),
      "l2o_param_diff": _relative(_flat(one.params), _flat(l2o_result.params)),
      "l2o_skipped": [one.skipped_updates, l2o_result.skipped_updates],
      "task_spec": str(task_losses.sharding.spec),
      "task_shards": sorted({tuple(s.data.shape) for s in task_losses.addressable_shards}),
      "task_devices": len(task_losses.sharding.device_set),
      "net_replicated": everywhere((l2o_result.state.params, l2o_result.state.opt_state)),
      "l2hmc_loss_diff": float(np.max(np.abs(hmc.losses - l2hmc_result.losses))),
      "l2hmc_acceptance_diff": float(np.max(np.abs(hmc.acceptance - l2hmc_result.acceptance))),
      **{f"l2hmc_{field}_diff": _relative(_flat(getattr(hmc.state, field)),
                                           _flat(getattr(many, field)))
         for field in ("params", "opt_state", "chains")},
      "l2hmc_skipped": [hmc.skipped_updates, l2hmc_result.skipped_updates],
      "chain_spec": str(chains.sharding.spec),
      "chain_shards": sorted({tuple(s.data.shape) for s in chains.addressable_shards}),
      "params_replicated": everywhere((many.params, many.opt_state)),
  }


def _reference(workdir: str) -> None:
  """The same cases in one process on the same mesh; compares with the pair's results."""
  assert jax.process_count() == 1 and jax.device_count() == 4, jax.devices()
  mesh, task_mesh, chain_mesh = _meshes()
  cpu, clock = {}, time.process_time()
  metaoptimize = {}
  for name in METAOPTIMIZE:
    metaoptimize[name] = _metaoptimize(name, mesh)
    cpu[name], clock = time.process_time() - clock, time.process_time()
  result = _l2o(task_mesh, None)
  cpu["l2o"], clock = time.process_time() - clock, time.process_time()
  one = _l2hmc(chain_mesh)
  cpu["l2hmc"], clock = time.process_time() - clock, time.process_time()
  records = {"one_device": _one_device(task_mesh, result, one)}
  cpu["one device"], clock = time.process_time() - clock, time.process_time()

  path = os.path.join(workdir, "pair.npz")  # written last by the pair
  while not os.path.exists(path):
    time.sleep(0.1)
  pair = dict(np.load(path))
  clock = time.process_time()

  def leaves(prefix):
    return {k[len(prefix):]: v for k, v in pair.items() if k.startswith(prefix)
            and k[len(prefix):].isdigit()}

  for name in METAOPTIMIZE:
    tree, _, start = metaoptimize[name]
    want, got = _flat(tree), leaves(f"metaoptimize/{name}/")
    diffs = [np.abs(got[k].astype(np.float64) - want[k]) for k in want]
    records[f"metaoptimize/{name}"] = {
        "max_abs_diff": max(float(d.max()) for d in diffs if d.size),
        "max_violation": max(float((d - ATOL - RTOL * np.abs(want[k])).max())
                             for k, d in zip(want, diffs) if d.size),
        "processes_per_leaf": dict(zip(("w1", "w2", "b", "s"), pair[
            f"metaoptimize/{name}/processes"].tolist())),
        "finite": all(bool(np.all(np.isfinite(v))) for v in got.values()
                      if v.dtype.kind == "f"),
        "moved": float(np.max(np.abs(tree[0]["w1"] - start["w1"]))),
    }

  losses = pair["l2o/losses"]
  records["l2o"] = {
      "loss_diff": float(np.nanmax(np.abs(losses - result.losses))),
      "same_nan": bool(np.array_equal(np.isnan(losses), np.isnan(result.losses))),
      "param_diff": _relative(leaves("l2o/params/"), _flat(result.params)),
      "skipped": [result.skipped_updates, int(pair["l2o/skipped"])],
      "nonfinite_losses": int(np.sum(~np.isfinite(losses))),
      "task_processes": int(pair["l2o/task_processes"]),
      "net_processes": int(pair["l2o/net_processes"]),
  }

  state = leaves("l2hmc/state/")
  records["l2hmc"] = {
      "loss_diff": float(np.max(np.abs(pair["l2hmc/losses"] - one.losses))),
      "acceptance_diff": float(np.max(np.abs(pair["l2hmc/acceptance"] - one.acceptance))),
      "param_diff": _relative(leaves("l2hmc/params/"), _flat(one.state.params)),
      "opt_state_diff": _relative(leaves("l2hmc/opt_state/"), _flat(one.state.opt_state)),
      "chain_diff": _relative(leaves("l2hmc/chains/"), _flat(one.state.chains)),
      "skipped": [one.skipped_updates, int(pair["l2hmc/skipped"])],
      "chain_processes": int(pair["l2hmc/chain_processes"]),
      "chain_spec": str(pair["l2hmc/chain_spec"]),
  }

  # the 2-process run continued in one process from its checkpoint of iteration 2
  directory = os.path.join(workdir, "one-process")
  shutil.copytree(os.path.join(workdir, "checkpoints"), directory)
  for later in ("4", "5"):
    shutil.rmtree(os.path.join(directory, later))
  continued = _flat(_l2hmc(chain_mesh, checkpoint_dir=directory).state)

  # the last 2-process checkpoint, restored in one process with the chains over 4 devices
  target, config, training = _l2hmc_problem()
  flat_mesh = Mesh(np.array(jax.devices()), ("chains",))
  like = l2hmc.init_training(jax.random.key(0), target, config, training)
  like = jax.device_put(like._replace(chains=None), NamedSharding(flat_mesh, P()))._replace(
      chains=jax.device_put(like.chains, NamedSharding(flat_mesh, P("chains"))))
  restored = checkpoint.restore(os.path.join(workdir, "checkpoints", str(L2HMC_ITERATIONS)),
                                like=like)
  position = restored.chains.position
  got = _flat(restored)
  records["checkpoint"] = {
      "listing": pair["checkpoint/listing"].tolist(),
      "resumed_identical": bool(pair["checkpoint/resumed_identical"]),
      "restored_identical": all(np.array_equal(got[k], state[k]) for k in got),
      "continued_diff": _relative(state, continued),
      "restored_spec": str(position.sharding.spec),
      "restored_devices": len(position.sharding.device_set),
      "restored_processes": len({d.process_index for d in position.sharding.device_set}),
  }
  records["cpu_seconds"] = {"pair (process 0)": {k[4:]: round(float(v), 2) for k, v in
                                                 pair.items() if k.startswith("cpu/")},
                            "reference": {**{k: round(v, 2) for k, v in cpu.items()},
                                          "resume and restore": round(
                                              time.process_time() - clock, 2),
                                          "all": round(time.process_time(), 2)}}
  print(json.dumps(records))


if __name__ == "__main__" and "--worker" in sys.argv:
  _worker(int(sys.argv[2]), sys.argv[3], sys.argv[4])
elif __name__ == "__main__" and "--reference" in sys.argv:
  _reference(sys.argv[2])
