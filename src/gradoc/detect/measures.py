"""The program's own measures (``collect.logged``) and which way each one is better.

A measure's direction is known where the program says it (Lightning's
``ModelCheckpoint(monitor=..., mode=...)`` or ``EarlyStopping``, the Hugging Face
``Trainer``'s ``metric_for_best_model`` with ``greater_is_better``) or where its name leaves
no doubt: a reward, a return, an accuracy, an F1 or a BLEU is better up; a loss, an error, a
perplexity or a mean squared error is better down. A name with words of both kinds, or of
neither (``episode/length``, ``approx_kl``, ``entropy``), has no direction, and is said as
such: gradoc judges nothing by a measure whose direction it does not know.

Bookkeeping the loggers add (``epoch``, ``learning_rate``, ``grad_norm``, ``time/fps``,
``train_runtime``) is no measure of the run's health and is not listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..store import Series

# fmt: off
UP_WORDS = frozenset((
    "reward", "rewards", "rew", "return", "returns", "ret", "acc", "accuracy", "f1", "auc",
    "auroc", "bleu", "rouge", "rouge1", "rouge2", "rougel", "precision", "recall", "success",
    "iou", "miou", "map", "dice", "r2", "top1", "top5", "win",
))
"""Words of a name that make its measure better up."""
DOWN_WORDS = frozenset((
    "loss", "losses", "error", "err", "errors", "perplexity", "ppl", "mse", "mae", "rmse", "nll",
    "wer", "cer", "regret", "cost", "fid", "bpc", "bpd",
))
"""Words of a name that make its measure better down."""
BOOKKEEPING = frozenset((
    "epoch", "step", "steps", "global_step", "learning_rate", "lr", "grad_norm", "runtime", "fps",
    "time", "iterations", "total_timesteps", "time_elapsed", "samples_per_second",
    "steps_per_second", "total_flos", "n_updates", "train_samples_per_second",
    "train_steps_per_second", "train_runtime", "eval_runtime", "eval_samples_per_second",
    "eval_steps_per_second", "clip_range",
))
# fmt: on
"""Names (or last parts of names) loggers add that measure the run's progress, not its health."""


@dataclass(frozen=True, slots=True)
class Measure:
    """One measure the program logged, with the way it is better."""

    name: str
    source: str
    """Where it was read (``tensorboard``, ``lightning``, ``hf``, ``wandb``, ``mlflow``,
    ``sb3``, ``gym``)."""
    series: Series
    direction: str | None
    """``up`` or ``down`` (better that way), None where neither the program nor the name
    says."""
    why: str
    """Where the direction comes from, in words (``the name (accuracy)``,
    ``ModelCheckpoint(monitor='val_loss', mode='min')``), or why there is none."""


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def bookkeeping(name: str) -> bool:
    """A logger's count or rate (the epoch, the learning rate, frames per second)."""
    last = re.split(r"[/.]", name.lower())[-1]
    return name.lower() in BOOKKEEPING or last in BOOKKEEPING


def direction(name: str, declared: dict[str, Any] | None = None) -> tuple[str | None, str]:
    """Which way ``name``'s measure is better, and where that comes from (see the module
    docstring); ``declared``: what the program said of its measures (``meta.logged``)."""
    said = (declared or {}).get(name)
    if isinstance(said, dict) and said.get("direction") in ("up", "down"):
        return str(said["direction"]), str(said.get("from") or "the program")
    words = set(_words(name))
    up, down = sorted(words & UP_WORDS), sorted(words & DOWN_WORDS)
    if up and not down:
        return "up", f"the name ({up[0]})"
    if down and not up:
        return "down", f"the name ({down[0]})"
    if up and down:
        return None, f"the name says both ({up[0]}, {down[0]})"
    return None, "the name does not say"


def measures(
    logged: dict[str, tuple[str, Series]], declared: dict[str, Any] | None = None
) -> list[Measure]:
    """The measures of a run, bookkeeping left out, in the order they were first logged."""
    out = []
    for name, (source, series) in logged.items():
        if bookkeeping(name) or not len(series):
            continue
        way, why = direction(name, declared)
        out.append(Measure(name, source, series, way, why))
    return out
