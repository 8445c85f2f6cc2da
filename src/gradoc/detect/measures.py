"""The program's own measures (``collect.attach.logged``) and which way each one is better.

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
from collections.abc import Callable
from dataclasses import dataclass
from math import isfinite, sqrt
from statistics import fmean, median, variance
from typing import Any

from ..store import RAW_SOURCES, Series

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
    "eval_steps_per_second", "clip_range", "hp_metric",
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


# -- what a measure says of the run ------------------------------------------------------------
HELD_OUT_WORDS = frozenset(("val", "valid", "validation", "eval", "evaluation", "test", "dev"))
"""Words of a name that make it a measure on data the model does not train on."""
RETURN_WORDS = frozenset(("reward", "rewards", "rew", "return", "returns", "ret"))
"""Words of a name that make it an agent's reward or return."""
MIN_POINTS = 5
"""Values a measure needs before its trend is read (a start, an end, and between)."""
WINDOW = 0.05
"""The share of a measure's values read as its start and as its end (their medians, at least
one value): a logged measure is an average already (a validation epoch, SB3's mean of the last
100 episodes)."""
RAW_WINDOW = 0.2
"""... for a raw series of episodes (``gym``), each one a single draw of a noisy return (read
as the means of :data:`BLOCKS` blocks)."""
CHANGE = 0.25
"""A move of the end's median from the start's, or from the best, of at least this share of
the measure's range (that of its running medians) is a change; less is flat. A return that
rose from 21 to 161 moved by the whole of its range; one that wanders about 20 moves by
little of it. A fall from its best of twice that (half its range) is a worsening too."""


@dataclass(frozen=True, slots=True)
class Trend:
    """What a measure did over the run, in its own units."""

    measure: Measure
    start: float
    """The median of its first values (:data:`WINDOW` of them)."""
    end: float
    """The median of its last values."""
    best: float
    """The best of its running medians (over as many values as the start's)."""
    best_step: int
    verdict: str
    """``improved``, ``worsened`` (its end worse than its start, or than its best by a change),
    or ``flat``."""

    def said(self) -> str:
        """The trend in words, with the measure's numbers."""
        m, f = self.measure, _num
        if self.verdict == "improved":
            way = "rose" if m.direction == "up" else "fell"
            return f"the program's {m.name} {way} from {f(self.start)} to {f(self.end)}"
        if self.verdict == "worsened":
            if (self.best - self.start) * (1 if m.direction == "up" else -1) > 0:
                return (
                    f"the program's {m.name} went from its best, {f(self.best)} at step "
                    f"{self.best_step:,}, to {f(self.end)} at the end"
                )
            way = "fell" if m.direction == "up" else "rose"
            return f"the program's {m.name} {way} from {f(self.start)} to {f(self.end)}"
        return f"the program's {m.name} stayed about {f(self.end)}"


def _num(x: float) -> str:
    return f"{x:.4g}"


def role(name: str) -> str:
    """``held_out`` (validation, test), ``return`` (an agent's reward), or ``training``."""
    words = set(_words(name))
    if words & RETURN_WORDS:
        return "return"
    if words & HELD_OUT_WORDS:
        return "held_out"
    return "training"


def trend(m: Measure) -> Trend | None:
    """What ``m`` did over the run (see :data:`CHANGE`), None without a direction or with
    fewer than :data:`MIN_POINTS` finite values."""
    pairs = [(s, v) for s, v in zip(m.series.steps, m.series.values) if isfinite(v)]
    if m.direction is None or len(pairs) < MIN_POINTS:
        return None
    raw = m.source in RAW_SOURCES
    noise = 0.0
    if raw:  # single episodes: their means over blocks, as an agent's logger averages them
        noise = _noise([v for _, v in pairs])
        pairs = _blocks(pairs, max(1, len(pairs) // BLOCKS))
    values = [v for _, v in pairs]
    k = max(1, round(len(values) * (RAW_WINDOW if raw else WINDOW)))
    start, end = median(values[:k]), median(values[-k:])
    sign = 1.0 if m.direction == "up" else -1.0
    # the best of its running medians over k values: one lucky episode is no level it held
    smooth = [(pairs[i + k // 2][0], median(values[i : i + k])) for i in range(len(values) - k + 1)]
    best_step, best = max(smooth, key=lambda p: sign * p[1])
    spread = max(v for _, v in smooth) - min(v for _, v in smooth)
    if spread <= 0:
        return Trend(m, start, end, best, best_step, "flat")
    last = values[-k:]
    fell = sign * (best - end) >= max(CHANGE * spread * 2, noise) and _most(
        last, lambda v: sign * (best - v) > 0
    )
    if fell or (
        sign * (end - start) <= -max(CHANGE * spread, noise)
        and _most(last, lambda v: sign * (start - v) > 0)
    ):
        verdict = "worsened"  # fell back from its best by half its range, or below its start
    elif sign * (end - start) >= max(CHANGE * spread, noise) and _most(
        last, lambda v: sign * (v - start) > 0
    ):
        verdict = "improved"
    else:
        verdict = "flat"
    return Trend(m, start, end, best, best_step, verdict)


BLOCKS = 20
"""A raw series of episodes is read as the means of this many blocks of them: a return of +1
or -1 an episode has no median worth reading, its mean is the agent's level."""


Z = 3.0
"""A raw series' change counts only beyond this many standard errors of the difference of
its first and last :data:`RAW_WINDOW` of episodes: a coin-flip return of +1 or -1 whose
block means wander by 0.1 did not change."""


def _noise(values: list[float]) -> float:
    """:data:`Z` standard errors of the difference of the means of the first and last
    :data:`RAW_WINDOW` of ``values`` (single episodes)."""
    k = max(2, round(len(values) * RAW_WINDOW))
    first, last = values[:k], values[-k:]
    if len(first) < 2 or len(last) < 2:
        return 0.0
    return Z * sqrt(variance(first) / len(first) + variance(last) / len(last))


def _blocks(pairs: list[tuple[int, float]], size: int) -> list[tuple[int, float]]:
    """The means of consecutive blocks of ``size`` values, at each block's last step."""
    return [
        (pairs[min(i + size, len(pairs)) - 1][0], fmean(v for _, v in pairs[i : i + size]))
        for i in range(0, len(pairs), size)
    ]


MOST = 0.75
"""A change holds for at least this share of the end's values (a window of 5 or more): the
end of a return that wanders between 8 and 11 is not better than its start of 9 because its
median is 10."""


def _most(values: list[float], better: Callable[[float], bool]) -> bool:
    return len(values) < 5 or sum(map(better, values)) >= MOST * len(values)
