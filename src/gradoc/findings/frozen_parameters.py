"""frozen_parameters: most of the model never trains.

Needs: the parameters the run watched (``layers``) and their gradient and update norms.

A parameter is frozen when it never received a gradient in the run (``requires_grad``
left False, a graph detached before it, a branch the loss never reaches). A gradient of
exactly 0 is not frozen: it is what dead units pass back (``dead_units``). Rule: frozen
parameters hold at least ``SHARE`` (50%) of the watched elements over at least
``MIN_STEPS`` (10) steps. A warning when the loss did not improve by ``IMPROVED`` (10%)
from its first 10% of steps to its last 25% (a small GPT whose blocks were left frozen:
1.5% of its parameters train, the loss stalls at ln 64; tests/shapes/frozen_gpt.py);
information when it did (fine-tuning a head on a frozen backbone, on purpose).

Parameters **left out of every optimizer** never train either, although they receive a
gradient each step (``meta['setup']``, read at early steps by ``collect/probes/setup.py``: a model's
towers whose optimizer was given only the head). That is the mechanism seen directly, and
their gradient is computed for nothing: a warning when they hold at least ``SHARE`` of the
watched models' elements, a whole model is in no optimizer (a generator whose optimizer was
given the discriminator's parameters: gradoc watches every model a loss trains through, held
or not; ``tests/mechanisms/gan_optimizer_typo.py``) or the loss stalled, information
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import early_late, finite, fmt, loss_trend, numel_of
from .facts import Facts
from .kind import Details, FindingKind

SHARE = 0.5
MIN_STEPS = 10
IMPROVED = 0.10


def _frozen(h: History, name: str) -> bool:
    return not h.param(name, "grad_norm").steps


def _gain(h: History) -> float | None:
    """The loss's relative improvement from its first 10% of steps to its last 25%."""
    _, values = finite(loss_trend(h)[0])
    if len(values) < MIN_STEPS:
        return None
    early, late = early_late(values)
    return (early - late) / abs(early) if early else None


@dataclass(slots=True)
class Frozen(Details):
    """The share of the parameters that never trained, and whether the loss stalled."""

    share: float
    frozen: list[str]
    """The frozen tensors' names (the first 50)."""
    gain: float | None
    """The loss's relative improvement over the run (None: not measured)."""
    stalled: bool
    left_out: bool = False
    """They received gradients that no optimizer applied (else: never a gradient)."""
    tensors: int = 0
    """How many tensors (``frozen`` names only the first ones); 0: as many as named."""
    idle: list[str] | None = None
    """An optimizer held only these, and none ever had a gradient: nothing it steps moves."""
    models: list[str] | None = None
    """Whole models left out of every optimizer (their names)."""


class FrozenParameters(FindingKind):
    """Most of the model's parameters never train."""

    name = "frozen_parameters"
    harm = (
        "Parameters that never train holding most of the model, on a loss that did not improve by "
        "10%, or parameters a gradient reaches that no optimizer holds. On a loss that improved "
        "(a frozen backbone on purpose) it is information."
    )
    link = 30
    example_details = Frozen(share=0.9, frozen=[], gain=None, stalled=False)

    def check(self, h: History) -> list[Finding]:
        if h.num_steps < MIN_STEPS or not h.params:
            return []
        idle = self._idle(h)
        return idle or [*self._never(h), *self._left_out(h)]

    def _idle(self, h: History) -> list[Finding]:
        """An optimizer none of whose parameters ever had a gradient: it trains nothing, and
        the gradients the loss does produce (left out of it) are the story's evidence."""
        setup = h.meta.setup or {}
        idle = setup.get("idle") or {}
        recorded = {p.name for p in h.params}
        if not idle or not all(_frozen(h, n) for n in idle["names"] if n in recorded):
            return []  # a gradient was recorded for one of them: it trained
        left = setup.get("left_out") or {}
        names = list(idle["names"])
        gain = _gain(h)
        elsewhere = (
            f"; the gradients the loss produces go to {left['tensors']} tensors no optimizer "
            f"holds (e.g. {', '.join(left['names'][:3])})"
            if left
            else ""
        )
        return [
            self.found(
                severity="error",
                step=0,
                summary=(
                    f"the optimizer trains nothing: none of the {idle['tensors']} tensors it holds "
                    f"(e.g. {', '.join(names[:3])}) ever received a gradient, so no step moves "
                    f"a weight{elsewhere}"
                    + (f"; the loss improved {gain:.1%}" if gain is not None else "")
                ),
                evidence=[
                    Evidence(
                        "tensors the optimizer holds that never had a gradient", idle["tensors"]
                    ),
                    Evidence(
                        "tensors with a gradient that no optimizer holds", left.get("tensors", 0)
                    ),
                    Evidence("steps at which this was read", setup.get("checks")),
                ],
                details=Frozen(
                    1.0,
                    list(left.get("names") or [])[:50],
                    gain,
                    gain is not None and gain < IMPROVED,
                    left_out=bool(left),
                    tensors=int(left.get("tensors") or 0),
                    idle=names,
                ),
            )
        ]

    def _left_out(self, h: History) -> list[Finding]:
        setup = h.meta.setup or {}
        left, total = setup.get("left_out") or {}, setup.get("elements") or 0
        if not left or not total:
            return []
        share = left["elements"] / total
        gain = _gain(h)
        stalled = gain is not None and gain < IMPROVED
        names = list(left["names"])
        models = list(left.get("models") or [])
        return [
            self.found(
                severity="warning" if share >= SHARE or stalled or models else "info",
                step=0,
                summary=(
                    f"parameters left out of the optimizer: {share:.1%} of the model's parameters "
                    f"({left['tensors']} tensors, e.g. {', '.join(names[:3])}) receive a gradient "
                    "every step that no optimizer applies"
                    + (
                        f"; no optimizer holds any parameter of {', '.join(models)}, which a "
                        "loss trains through"
                        if models
                        else ""
                    )
                    + (f"; the loss improved {gain:.1%}" if gain is not None else "")
                ),
                evidence=[
                    Evidence("share of parameter elements no optimizer holds", fmt(share)),
                    Evidence("tensors with a gradient that no optimizer holds", left["tensors"]),
                    Evidence("steps at which this was read", setup.get("checks")),
                ]
                + ([Evidence("relative improvement of the loss", round(gain, 4))] if gain else []),
                details=Frozen(
                    share,
                    names[:50],
                    gain,
                    stalled,
                    left_out=True,
                    tensors=left["tensors"],
                    models=models or None,
                ),
            )
        ]

    def _never(self, h: History) -> list[Finding]:
        total = sum(numel_of(p) for p in h.params)
        frozen = [p for p in h.params if _frozen(h, p.name)]
        share = sum(numel_of(p) for p in frozen) / total if total else 0.0
        if share < SHARE or len(frozen) == len(h.params):
            return []  # nothing trained at all: no step of this model was watched
        gain = _gain(h)
        stalled = gain is not None and gain < IMPROVED
        names = [p.name for p in frozen]
        return [
            self.found(
                severity="warning" if stalled else "info",
                step=0,
                summary=(
                    f"frozen parameters: {share:.1%} of the model's parameters never trained "
                    f"({len(frozen)} of {len(h.params)} tensors, e.g. {', '.join(names[:3])})"
                    + (f"; the loss improved {gain:.1%}" if gain is not None else "")
                ),
                evidence=[
                    Evidence("share of parameter elements that never trained", fmt(share)),
                    Evidence("tensors that never received a gradient", len(frozen)),
                    Evidence("tensors watched", len(h.params)),
                ]
                + (
                    [Evidence("relative improvement of the loss", round(gain, 4))]
                    if gain is not None
                    else []
                ),
                details=Frozen(share, names[:50], gain, stalled),
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Frozen.of(f.details)
        names = d.frozen
        count = d.tensors or len(names)
        f.symptom = (
            "nothing the optimizer holds ever changes, so the model does not learn"
            if d.idle
            else f"{d.share:.0%} of the model's parameters never change, so the model cannot "
            "learn with them"
        )
        off = Hypothesis(
            Family.LOOP,
            "parameters left frozen: requires_grad=False (a fine-tuning recipe applied to a model "
            "that must train), or left out of the optimizer",
            "print sum(p.numel() for p in model.parameters() if p.requires_grad) and compare with "
            "the parameters the optimizer holds",
            base=0.3,
        )
        cut = Hypothesis(
            Family.LOOP,
            "the graph cut before them: a .detach(), torch.no_grad() or .item() between those "
            "layers and the loss",
            "check that loss.grad_fn reaches the frozen layers (torch.autograd.grad(loss, p) "
            "for one)",
            base=0.1,
        )
        if d.idle:
            off.cause = (
                "everything the optimizer holds is frozen: requires_grad=False on the very "
                "parameters it was given (a freeze loop run after the new head was attached), "
                "or the loss does not reach them"
            )
            off.seen(
                f"none of the {len(d.idle)} tensors the optimizer holds had a gradient at any "
                f"step read, e.g. {', '.join(d.idle[:3])}",
                Weight.DECISIVE,
            )
            if d.left_out:
                off.seen(
                    f"{count} tensors no optimizer holds had gradients, e.g. "
                    + ", ".join(names[:3]),
                    Weight.STRONG,
                )
                cut.against(
                    "the loss does produce gradients, elsewhere in the model", Weight.MODERATE
                )
        elif d.left_out:
            off.cause = (
                f"{', '.join(d.models)} left out of every optimizer: the optimizer meant for it "
                "was built on another model's parameters (optimizer_g = Adam(net_d.parameters()))"
                if d.models
                else "parameters left out of the optimizer: it was given only part of the model "
                "(Adam(model.head.parameters())), so the rest receives gradients it never applies"
            )
            off.seen(
                f"{count} tensors ({fmt(d.share)} of the parameters) had a gradient after "
                f"backward() at each step read and were held by no optimizer, e.g. "
                f"{', '.join(names[:3])}",
                Weight.DECISIVE,
            )
            cut.against("they received gradients: the graph reaches them", Weight.DECISIVE)
        else:
            never = (
                f"{count} tensors ({fmt(d.share)} of the parameters) never received a "
                f"gradient, e.g. {', '.join(names[:3])}"
            )
            off.seen(never, Weight.DECISIVE)
            cut.seen(never, Weight.MODERATE)
        if d.stalled:
            off.seen(f"the loss improved only {d.gain or 0:.1%} over the run", Weight.MODERATE)
        if d.idle:
            f.fixes.append(
                Fix(
                    Horizon.IMMEDIATE,
                    "unfreeze what the optimizer holds (the new head: "
                    f"{(d.idle[0].rpartition('.')[0] or 'head')}.requires_grad_(True)), or freeze "
                    "before attaching it; build the optimizer from what must train: "
                    "[p for p in model.parameters() if p.requires_grad]",
                )
            )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "give the optimizer every parameter that must train (model.parameters(), or one "
                "parameter group per part); what must stay frozen: p.requires_grad_(False), so "
                "its gradient is not computed",
            )
            if d.left_out
            else Fix(
                Horizon.IMMEDIATE,
                "unfreeze what must train: for p in model.parameters(): p.requires_grad_(True), "
                "and give the optimizer model.parameters()",
            ),
            Fix(
                Horizon.LONG_TERM,
                "log the trainable parameter count at start-up and assert it in a test",
            ),
        ]
        f.monitoring.append(
            "trainable parameter count, and the share of parameters updated per step"
        )
        return [off, cut]
