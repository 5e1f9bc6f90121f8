"""The leapfrog with the networks off: one kick-drift-kick per step, as the general path.

With ``use_networks=False`` each step is computed as the plain leapfrog with the
step sizes negated for the backward direction. The general path (two masked
position half-updates, each direction's closed form selected) with networks
whose outputs are exactly zero (their output layers' initialisation: S = Q = T
= 0) is the independent oracle: equal up to rounding (XLA fuses ``x + eps * v``
into a multiply-add in one and not the other), float64.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from tests.l2hmc.test_l2hmc import run as leapfrog
from tests.l2hmc.paper import paper_config, paper_training


@pytest.mark.parametrize("step_sizes", ["shared", "per_step"])
@pytest.mark.parametrize("direction", [1, -1])
def test_networks_off_equals_the_general_path_with_zero_networks(step_sizes, direction):
  with jax.enable_x64(True):
    target = l2hmc.targets.gaussian(jnp.array([[1.0, 0.3, 0.0], [0.3, 2.0, 0.2],
                                               [0.0, 0.2, 0.5]]))
    config = paper_config(dim=3, num_steps=4, step_sizes=step_sizes)
    params = jax.tree.map(lambda a: a.astype(jnp.float64),
                          l2hmc.init_params(jax.random.key(0), config))
    n = params.log_step_size_x.shape[0]  # distinct step sizes: the backward order matters
    params = params._replace(log_step_size_x=jnp.log(0.2 + 0.05 * jnp.arange(n)),
                             log_step_size_v=jnp.log(0.15 + 0.03 * jnp.arange(n)))
    masks = l2hmc.make_masks(jax.random.key(1), config)
    x, v = jnp.array([0.7, -1.2, 0.4]), jnp.array([0.5, 1.0, -0.8])

    general = leapfrog(config, params, masks, x, v, direction, target)
    plain = leapfrog(config._replace(use_networks=False), params, masks, x, v, direction,
                     target)
    assert float(jnp.abs(general[0] - x).max()) > 0.1  # it moves
    for a, b in zip(plain, general):
      np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    assert float(plain[4]) == 0.0  # log|det J| of the plain leapfrog

    x_back, v_back, *_ = leapfrog(config._replace(use_networks=False), params, masks,
                                  plain[0], plain[1], -direction, target)
    np.testing.assert_allclose(x_back, x, atol=1e-13)
    np.testing.assert_allclose(v_back, v, atol=1e-13)
