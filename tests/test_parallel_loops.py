"""Data-parallel meta-training: tasks sharded over 8 (forced host) devices, as on one device."""

import json
import os
import subprocess
import sys
import textwrap

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
    }))
""")


def test_l2o_meta_training_sharded_over_8_devices_matches_one_device():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                       text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  r = json.loads(out.stdout.strip().splitlines()[-1])
  assert r["devices"] == 8
  assert r["task_devices"] == 8 and r["task_spec"] == "P('tasks',)"
  assert r["task_shards"] == [[2]]  # 16 tasks, 2 per device
  assert r["net_replicated"]
  assert r["skipped"] == [0, 0]
  # float32 sums over tasks in another order: agreement to a few ulps of O(1) values
  assert r["loss_diff"] < 1e-6, r
  assert r["param_diff"] < 1e-6, r
