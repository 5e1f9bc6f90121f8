"""Data-parallel training loops over 8 (forced host) devices, as on one device: L2O
meta-training (tasks sharded) and L2HMC sampler training (chains sharded). One
subprocess runs both."""

import json
import os
import subprocess
import sys
import textwrap
import pytest

# One subprocess serves the whole module: keep it on one pytest-xdist worker, started first.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("parallel_loops")]

_SCRIPT = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from metaoptax import l2o
    mesh = Mesh(np.array(jax.devices()), ("tasks",))
    family = l2o.tasks.ellipse()
    config = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4)
    kw = dict(meta_steps=3, tasks_per_step=16, horizon=4, unroll=2, log_loss=True, seed=3,
              progress=None, meta_optimizer=l2o.default_meta_optimizer())
    one = l2o.meta_train(config, family, **kw)
    many = l2o.meta_train(config, family, mesh=mesh, **kw)

    def l2hmc_record():
        import os, shutil, tempfile, time
        from metaoptax import l2hmc
        start = time.process_time()
        # chains split 4 ways over "chains", replicated over "other"
        chain_mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("chains", "other"))
        target = l2hmc.targets.strongly_correlated_gaussian()
        config = l2hmc.L2HMCConfig(dim=2, num_steps=3, hidden=8)
        kw = dict(num_iterations=5, num_chains=16, seed=2, progress=None)
        one = l2hmc.train(target, config, **kw)
        directory = tempfile.mkdtemp()
        many = l2hmc.train(target, config, mesh=chain_mesh, chain_axis="chains",
                           checkpoint_dir=directory, checkpoint_every=2, **kw)
        for later in ("4", "5"):  # interrupted after iteration 2: resume from the sharded state
            shutil.rmtree(os.path.join(directory, later))
        resumed = l2hmc.train(target, config, mesh=chain_mesh, chain_axis="chains",
                              checkpoint_dir=directory, **kw)
        bits = lambda x: np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(
            x.dtype, jax.dtypes.prng_key) else x)
        def diff(a, b):  # max |a - b| relative to max(1, max |a|), over the leaves
            return max([0.0] + [float(np.max(np.abs(np.asarray(x) - np.asarray(y)))
                                      / max(1.0, float(np.max(np.abs(np.asarray(x))))))
                                for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))])
        chains = many.state.chains.position
        return {
            "loss_diff": diff(one.losses, many.losses),
            "acceptance_diff": diff(one.acceptance, many.acceptance),
            "param_diff": diff(one.params, many.params),
            "opt_state_diff": diff(one.state.opt_state, many.state.opt_state),
            "chain_diff": diff(one.state.chains, many.state.chains),
            "skipped": [one.skipped_updates, many.skipped_updates],
            "chain_spec": str(chains.sharding.spec),
            "chain_shards": sorted({tuple(s.data.shape) for s in chains.addressable_shards}),
            "chain_devices": len(chains.sharding.device_set),
            "params_replicated": all(
                x.sharding.is_fully_replicated and len(x.sharding.device_set) == 8
                for x in jax.tree.leaves((many.state.params, many.state.opt_state))),
            "resumed_identical": all(np.array_equal(bits(x), bits(y)) for x, y in zip(
                jax.tree.leaves(resumed.state), jax.tree.leaves(many.state))),
            "resumed_chain_spec": str(resumed.state.chains.position.sharding.spec),
            "cpu_seconds": time.process_time() - start,
        }

    step = jax.jit(l2o.build_meta_step(config, family, tasks_per_step=16, horizon=4, unroll=2,
                                       meta_optimizer=kw["meta_optimizer"], mesh=mesh))
    state = jax.device_put(l2o.init_meta_training(config, seed=3),
                           NamedSharding(mesh, PartitionSpec()))
    _, info = step(state)
    print(json.dumps({
        "devices": len(jax.devices()),
        "loss_diff": float(np.max(np.abs(one.meta_losses - many.meta_losses))),
        "param_diff": max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(
            jax.tree.leaves(one.network_params), jax.tree.leaves(many.network_params))),
        "skipped": [one.skipped_updates, many.skipped_updates],
        "task_spec": str(info.task_losses.sharding.spec),
        "task_shards": sorted({tuple(s.data.shape) for s in info.task_losses.addressable_shards}),
        "task_devices": len(info.task_losses.sharding.device_set),
        "net_replicated": all(x.sharding.is_fully_replicated and len(x.sharding.device_set) == 8
                              for x in jax.tree.leaves(many.state.network_params)),
        "l2hmc": l2hmc_record(),
    }))
""")


def _run() -> dict:
  from tests.conftest import xla_flags  # not at the top: the worker runs this file alone
  env = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=8"),
             JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                       text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def record(tmp_path_factory):
  from tests.conftest import computed_once  # not at the top: the worker runs this file alone
  return computed_once(tmp_path_factory, "parallel_loops_record", _run)


def test_l2o_meta_training_sharded_over_8_devices_matches_one_device(record):
  r = record
  assert r["devices"] == 8
  assert r["task_devices"] == 8 and r["task_spec"] == "P('tasks',)"
  assert r["task_shards"] == [[2]]  # 16 tasks, 2 per device
  assert r["net_replicated"]
  assert r["skipped"] == [0, 0]
  # float32 sums over tasks in another order: agreement to a few ulps of O(1) values
  assert r["loss_diff"] < 1e-6, r
  assert r["param_diff"] < 1e-6, r


def test_l2hmc_training_with_chains_sharded_matches_one_device(record):
  r = record["l2hmc"]
  assert r["chain_devices"] == 8 and r["chain_spec"] == "P('chains',)", r
  assert r["chain_shards"] == [[4, 2]]  # 16 chains, 4 per device of the "chains" axis
  assert r["params_replicated"]
  assert r["skipped"] == [0, 0]
  # a checkpoint of the sharded state restores sharded and the run resumes bit for bit
  assert r["resumed_identical"] and r["resumed_chain_spec"] == "P('chains',)", r
  # float32 means over chains summed in another order. Measured (max |diff| relative to
  # max(1, max |value|)): losses 9e-8, acceptance 6e-8, parameters 2e-9, Adam state 2e-7,
  # chains 5e-7.
  for name in ("loss_diff", "acceptance_diff", "param_diff", "opt_state_diff", "chain_diff"):
    assert r[name] < 1e-6, (name, r)
