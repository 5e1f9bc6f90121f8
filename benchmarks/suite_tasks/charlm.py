"""Task 3: character-level transformer language model on the Python standard library's source.

Text: a fixed list of modules under ``sysconfig.get_paths()["stdlib"]`` (read in
that order, so the data are deterministic for a given Python version), characters
outside printable ASCII mapped to ``?``; the first 90 % is the train split, the
last 10 % the validation split. Model: a pre-LayerNorm causal transformer
(``LAYERS`` layers, width ``WIDTH``, ``HEADS`` heads, context ``CONTEXT``,
learned positions, untied output head). Minibatches: ``BATCH`` random windows.
Metric: validation loss in bits per character on fixed windows covering the
validation split; train loss (nats) on fixed train windows.

Blockwise step sizes use four layer groups: embeddings / attention / MLP / output.
"""

from __future__ import annotations

import math
import pathlib
import sysconfig

import jax
import jax.numpy as jnp
import numpy as np

from suite_tasks import protocol
from suite_tasks.problem import Problem

FILES = ("textwrap.py", "argparse.py", "functools.py", "string.py", "heapq.py", "bisect.py",
         "fractions.py", "statistics.py", "json/decoder.py", "json/encoder.py",
         "collections/__init__.py", "contextlib.py", "dataclasses.py", "shlex.py")
VOCAB = 97  # tab, newline, ' ' .. '~'
WIDTH, LAYERS, HEADS, CONTEXT, BATCH = 32, 2, 2, 32, 8
EVAL_WINDOWS = 64
GROUPS = ("embeddings", "attention", "MLP", "output")


def load_text() -> str:
  root = pathlib.Path(sysconfig.get_paths()["stdlib"])
  return "".join((root / f).read_text(encoding="utf-8") for f in FILES)


def encode(text: str) -> np.ndarray:
  codes = np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8).astype(np.int32)
  out = np.full(codes.shape, ord("?") - 30, np.int32)
  printable = (codes >= 32) & (codes <= 126)
  out[printable] = codes[printable] - 30  # ' ' -> 2 ... '~' -> 96
  out[codes == 9] = 0
  out[codes == 10] = 1
  return out


def init_params(key):
  keys = iter(jax.random.split(key, 4 + 4 * LAYERS))
  normal = lambda shape, scale: jax.random.normal(next(keys), shape) * scale
  layers = []
  for _ in range(LAYERS):
    layers.append({
        "attention": {"ln": {"g": jnp.ones(WIDTH), "b": jnp.zeros(WIDTH)},
                      "qkv": normal((WIDTH, 3 * WIDTH), WIDTH ** -0.5),
                      "out": normal((WIDTH, WIDTH), (2 * LAYERS * WIDTH) ** -0.5)},
        "mlp": {"ln": {"g": jnp.ones(WIDTH), "b": jnp.zeros(WIDTH)},
                "fc1": normal((WIDTH, 4 * WIDTH), WIDTH ** -0.5), "b1": jnp.zeros(4 * WIDTH),
                "fc2": normal((4 * WIDTH, WIDTH), (2 * LAYERS * 4 * WIDTH) ** -0.5),
                "b2": jnp.zeros(WIDTH)},
    })
  return {"embed": {"tokens": normal((VOCAB, WIDTH), 0.1), "positions": normal((CONTEXT, WIDTH), 0.02)},
          "layers": layers,
          "head": {"ln": {"g": jnp.ones(WIDTH), "b": jnp.zeros(WIDTH)},
                   "w": normal((WIDTH, VOCAB), WIDTH ** -0.5), "b": jnp.zeros(VOCAB)}}


def group_labels(params):
  """Layer-group labels: 0 embeddings, 1 attention, 2 MLP, 3 output."""
  return {"embed": jax.tree.map(lambda _: 0, params["embed"]),
          "layers": [{"attention": jax.tree.map(lambda _: 1, l["attention"]),
                      "mlp": jax.tree.map(lambda _: 2, l["mlp"])} for l in params["layers"]],
          "head": jax.tree.map(lambda _: 3, params["head"])}


def _ln(p, x):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["g"] + p["b"]


def logits_fn(params, tokens):
  t = tokens.shape[-1]
  x = params["embed"]["tokens"][tokens] + params["embed"]["positions"][:t]
  mask = jnp.tril(jnp.ones((t, t), bool))
  for layer in params["layers"]:
    a = layer["attention"]
    q, k, v = jnp.split(_ln(a["ln"], x) @ a["qkv"], 3, -1)
    heads = lambda z: z.reshape(*z.shape[:-1], HEADS, WIDTH // HEADS)
    q, k, v = heads(q), heads(k), heads(v)
    scores = jnp.einsum("...qhd,...khd->...hqk", q, k) / math.sqrt(WIDTH // HEADS)
    scores = jnp.where(mask, scores, -1e9)
    att = jnp.einsum("...hqk,...khd->...qhd", jax.nn.softmax(scores, -1), v)
    x = x + att.reshape(*x.shape) @ a["out"]
    m = layer["mlp"]
    x = x + jax.nn.gelu(_ln(m["ln"], x) @ m["fc1"] + m["b1"]) @ m["fc2"] + m["b2"]
  h = params["head"]
  return _ln(h["ln"], x) @ h["w"] + h["b"]


def nats(params, windows):
  """Mean next-character cross-entropy (nats) over windows of ``CONTEXT + 1`` codes."""
  logits = logits_fn(params, windows[..., :-1])
  logp = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(logp, windows[..., 1:, None], -1))


def make_problem(context=CONTEXT) -> Problem:
  codes = encode(load_text())
  split = int(0.9 * len(codes))
  train, val = jnp.asarray(codes[:split]), codes[split:]
  offsets = jnp.arange(context + 1)
  # Fixed evaluation windows: evenly spaced over each split.
  val_starts = np.linspace(0, len(val) - context - 2, 4 * EVAL_WINDOWS).astype(np.int32)
  val_windows = jnp.asarray(val[val_starts[:, None] + np.arange(context + 1)])
  train_starts = jnp.asarray(np.linspace(0, split - context - 2, EVAL_WINDOWS).astype(np.int32))
  train_windows = train[train_starts[:, None] + offsets]

  def batch(key):
    starts = jax.random.randint(key, (BATCH,), 0, train.shape[0] - context - 1)
    return train[starts[:, None] + offsets]

  def evaluate(params):
    return {"train_loss": nats(params, train_windows),
            "test": nats(params, val_windows) / math.log(2.0)}

  return Problem(
      name="charlm", init=init_params, loss=nats, batch=batch, evaluate=evaluate,
      test_name="validation bits/char", higher_is_better=False, train_loss_floor=0.0,
      blocks=group_labels(jax.eval_shape(init_params, jax.random.key(0))), block_names=GROUPS)


CONFIG = protocol.TaskConfig(
    title="Task 3: character transformer on Python stdlib source",
    description=__doc__,
    steps=20_000, quick_steps=200, chunk=500, quick_chunk=100,
    select_by="test", blockwise_presets=("(AdamW, Adam)", "(SGD+mom, Adam)"),
    blocks_label="layer groups")


def run(*, quick, seeds, out_dir, progress, replot=False):
  return protocol.run_task(make_problem(), CONFIG, quick=quick, seeds=seeds,
                           out_dir=out_dir, progress=progress, replot=replot)
