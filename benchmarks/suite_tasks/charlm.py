"""Task 3: character-level transformer language model on the Python standard library's source.

Text: a fixed list of modules under ``sysconfig.get_paths()["stdlib"]`` (read in
that order, so the data are deterministic for a given Python version; 452k characters
on Python 3.11), or with ``corpus="stdlib"`` every ``.py`` file of the standard library
outside its tests, ``idlelib`` and ``site-packages``, in sorted order (~12M characters on
Python 3.11: a 1.3M-parameter model sees it less than twice in 5,000 steps of 32 × 128
characters, where it sees the 14 modules ~50 times and overfits them), characters
outside printable ASCII mapped to ``?``; the first 90 % is the train split, the
last 10 % the validation split. Model: a pre-LayerNorm causal transformer
(:class:`Shape`: layers, width, heads, context; learned positions, untied output
head). Minibatches: ``batch`` random windows. Metric: validation loss in bits per
character on fixed windows covering the validation split; train loss (nats) on
fixed train windows. With ``held_out_test=True`` the held-out 10 % is cut in two:
its first half is the validation split (``"val"``, for choosing settings), its
second half the test split (``"test"``, reported).

Blockwise step sizes use four layer groups: embeddings / attention / MLP / output.
"""

from __future__ import annotations

import math
from typing import NamedTuple
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
EVAL_WINDOWS = 64


class Shape(NamedTuple):
  """The transformer's size and its minibatch."""

  width: int = 32
  layers: int = 2
  heads: int = 2
  context: int = 32
  batch: int = 8


#: The suite's small model (26k parameters).
SMALL = Shape()
#: The learning-rate-free protocol's transformer: 4 layers of width 160, context 128,
#: batch 32 (1.27M parameters).
LARGE = Shape(width=160, layers=4, heads=4, context=128, batch=32)


def num_params(shape: Shape = SMALL) -> int:
  return sum(x.size for x in jax.tree.leaves(jax.eval_shape(
      lambda k: init_params(k, shape), jax.random.key(0))))
GROUPS = ("embeddings", "attention", "MLP", "output")


def load_text(corpus: str = "modules") -> str:
  """The text: ``"modules"`` (``FILES``) or ``"stdlib"`` (the standard library's source)."""
  root = pathlib.Path(sysconfig.get_paths()["stdlib"])
  if corpus == "modules":
    files = [root / f for f in FILES]
  elif corpus == "stdlib":
    skip = {"test", "tests", "idlelib", "site-packages"}
    files = sorted(p for p in root.rglob("*.py")
                   if not skip.intersection(p.relative_to(root).parts))
  else:
    raise ValueError(f"corpus must be 'modules' or 'stdlib', got {corpus!r}")
  return "".join(f.read_text(encoding="utf-8", errors="replace") for f in files)


def encode(text: str) -> np.ndarray:
  codes = np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8).astype(np.int32)
  out = np.full(codes.shape, ord("?") - 30, np.int32)
  printable = (codes >= 32) & (codes <= 126)
  out[printable] = codes[printable] - 30  # ' ' -> 2 ... '~' -> 96
  out[codes == 9] = 0
  out[codes == 10] = 1
  return out


def init_params(key, shape: Shape = SMALL):
  width, layers_, context = shape.width, shape.layers, shape.context
  keys = iter(jax.random.split(key, 4 + 4 * layers_))
  normal = lambda shape, scale: jax.random.normal(next(keys), shape) * scale
  layers = []
  for _ in range(layers_):
    layers.append({
        "attention": {"ln": {"g": jnp.ones(width), "b": jnp.zeros(width)},
                      "qkv": normal((width, 3 * width), width ** -0.5),
                      "out": normal((width, width), (2 * layers_ * width) ** -0.5)},
        "mlp": {"ln": {"g": jnp.ones(width), "b": jnp.zeros(width)},
                "fc1": normal((width, 4 * width), width ** -0.5), "b1": jnp.zeros(4 * width),
                "fc2": normal((4 * width, width), (2 * layers_ * 4 * width) ** -0.5),
                "b2": jnp.zeros(width)},
    })
  return {"embed": {"tokens": normal((VOCAB, width), 0.1), "positions": normal((context, width), 0.02)},
          "layers": layers,
          "head": {"ln": {"g": jnp.ones(width), "b": jnp.zeros(width)},
                   "w": normal((width, VOCAB), width ** -0.5), "b": jnp.zeros(VOCAB)}}


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


def logits_fn(params, tokens, heads=SMALL.heads):
  t = tokens.shape[-1]
  width = params["embed"]["tokens"].shape[-1]
  x = params["embed"]["tokens"][tokens] + params["embed"]["positions"][:t]
  mask = jnp.tril(jnp.ones((t, t), bool))
  split_heads = lambda z: z.reshape(*z.shape[:-1], heads, width // heads)
  for layer in params["layers"]:
    a = layer["attention"]
    q, k, v = (split_heads(z) for z in jnp.split(_ln(a["ln"], x) @ a["qkv"], 3, -1))
    scores = jnp.einsum("...qhd,...khd->...hqk", q, k) / math.sqrt(width // heads)
    scores = jnp.where(mask, scores, -1e9)
    att = jnp.einsum("...hqk,...khd->...qhd", jax.nn.softmax(scores, -1), v)
    x = x + att.reshape(*x.shape) @ a["out"]
    m = layer["mlp"]
    x = x + jax.nn.gelu(_ln(m["ln"], x) @ m["fc1"] + m["b1"]) @ m["fc2"] + m["b2"]
  h = params["head"]
  return _ln(h["ln"], x) @ h["w"] + h["b"]


def nats(params, windows, heads=SMALL.heads):
  """Mean next-character cross-entropy (nats) over windows of ``context + 1`` codes."""
  logits = logits_fn(params, windows[..., :-1], heads)
  logp = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(logp, windows[..., 1:, None], -1))


def make_problem(shape: Shape = SMALL, held_out_test: bool = False, name="charlm",
                 corpus: str = "modules") -> Problem:
  context = shape.context
  codes = encode(load_text(corpus))
  split = int(0.9 * len(codes))
  train, held_out = jnp.asarray(codes[:split]), codes[split:]
  offsets = jnp.arange(context + 1)

  def windows(text, count):
    """Fixed evaluation windows, evenly spaced over ``text``."""
    starts = np.linspace(0, len(text) - context - 2, count).astype(np.int32)
    return jnp.asarray(np.asarray(text)[starts[:, None] + np.arange(context + 1)])

  train_windows = windows(codes[:split], EVAL_WINDOWS)
  if held_out_test:
    half = len(held_out) // 2
    val_windows, test_windows = windows(held_out[:half], 2 * EVAL_WINDOWS), windows(
        held_out[half:], 2 * EVAL_WINDOWS)
  else:
    val_windows = test_windows = windows(held_out, 4 * EVAL_WINDOWS)
  loss = lambda params, batch: nats(params, batch, shape.heads)
  bits = lambda params, w: loss(params, w) / math.log(2.0)

  def draw(text):
    def batch(key):
      starts = jax.random.randint(key, (shape.batch,), 0, text.shape[0] - context - 1)
      return text[starts[:, None] + offsets]
    return batch

  batch = draw(train)

  def evaluate(params):
    out = {"train_loss": loss(params, train_windows), "test": bits(params, test_windows)}
    if held_out_test:
      out["val"] = bits(params, val_windows)
    return out

  init = lambda key: init_params(key, shape)
  return Problem(
      name=name, init=init, loss=loss, batch=batch, evaluate=evaluate,
      test_name="test bits/char" if held_out_test else "validation bits/char",
      higher_is_better=False, train_loss_floor=0.0,
      blocks=group_labels(jax.eval_shape(init, jax.random.key(0))), block_names=GROUPS,
      val_batch=draw(jnp.asarray(held_out[:len(held_out) // 2])) if held_out_test else None)


CONFIG = protocol.TaskConfig(
    title="Task 3: character transformer on Python stdlib source",
    description=__doc__,
    steps=20_000, quick_steps=200, chunk=500, quick_chunk=100,
    select_by="test", blockwise_presets=("(AdamW, Adam)", "(SGD+mom, Adam)"),
    blocks_label="layer groups")


def run(*, quick, seeds, out_dir, progress, replot=False):
  return protocol.run_task(make_problem(), CONFIG, quick=quick, seeds=seeds,
                           out_dir=out_dir, progress=progress, replot=replot)
