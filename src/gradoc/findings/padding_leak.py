"""padding_leak: the output at real positions changes when only the padding changes.

Needs: ``gradoc run --check padding`` / ``watch(check_padding=True)``: the padding audit
(``locate/padding.py``) runs the model on a batch twice, the second time with only the
padded positions changed, and records what it finds as ``padding_audit`` events.

Rule: each audit finding is reported once (per layer), at the first step it was seen. The
audit names the first module whose real outputs change by more than its tolerance; where
that module's inputs had changed already, its parent's own code.

Seen in the inputs, by default and at no cost (``meta['lengths']``, ``collect/probes/lengths.py``):
the batch holds the model's pad token (its embedding's ``padding_idx``, or the pad token its
Hugging Face config names) and the call gives no padding mask, although the model's forward
takes one (``attention_mask``). A model that takes a mask attends over every position it
is not told to skip: real tokens attend to the pads. A warning "seen in the inputs", which
``--check padding`` confirms and measures (a BERT fed by a hand-written collator that pads
``input_ids`` and passes no ``attention_mask``: Hugging Face warns of exactly this).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import audited, fmt
from .facts import Facts
from .kind import Details, FindingKind

ATTENTION = (
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "TransformerDecoderLayer",
    "TransformerDecoder",
    "Transformer",
)
RECURRENT = ("RNN", "LSTM", "GRU")
NORMS = ("BatchNorm1d", "BatchNorm2d")


def _kind_of(f: Finding, h: History) -> str:
    """What the leaking module is: its recorded type first, its name where no type was
    recorded (a module gradoc did not list)."""
    t = h.module_type(f.layer) if f.layer is not None else None
    name = (f.layer or "").lower()
    if t in ATTENTION or (t is None and ("attn" in name or "attention" in name)):
        return "attention"
    if t in RECURRENT or (t is None and any(k in name for k in ("rnn", "lstm", "gru"))):
        return "recurrent"
    if t in NORMS or (t is None and ("norm" in name or "bn" in name)):
        return "norm"
    if t is None and ("pool" in name or "mean" in name):
        return "pool"
    return "other"


class PaddingLeak(FindingKind):
    """The output for real tokens depends on what the padded positions hold
    (the padding audit, ``locate/padding.py``). Which mechanism leaks follows from the type
    of the module the audit names."""

    name = "padding_leak"
    harm = (
        "The mechanism itself: a real position's output changes when only the pads change (the "
        "audit), or pads reach a model that takes a mask with no mask given."
    )

    def check(self, h: History) -> list[Finding]:
        return audited(h, self.name) or _in_the_inputs(h)

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        unmasked = Unmasked.in_(f)
        if unmasked is not None:
            return _explain_unmasked(f, unmasked)
        where = f.layer or "(model)"
        f.symptom = "the output for real tokens depends on what the padded positions hold"
        what = _kind_of(f, h)
        attn = Hypothesis(
            Family.MASKING,
            "attention without a padding mask: real tokens attend to the pads",
            "pass the mask (src_key_padding_mask=tokens == pad_id, attention_mask=...) and "
            "re-audit",
            base=0.2,
        )
        pool = Hypothesis(
            Family.MASKING,
            "a mean (or sum) over the sequence that includes the padded positions",
            "compare with a masked mean: (h * mask).sum(1) / mask.sum(1)",
            base=0.2,
        )
        rnn = Hypothesis(
            Family.MASKING,
            "a recurrent layer run over the pads (its final state has read them)",
            "pack the batch: nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)",
            base=0.1,
        )
        norm = Hypothesis(
            Family.MASKING,
            "a BatchNorm over the sequence axis: pads enter the batch statistics",
            "normalise over real positions only, or use LayerNorm",
            base=0.1,
        )
        chosen = {"attention": attn, "pool": pool, "recurrent": rnn, "norm": norm}.get(what)
        if chosen is not None:
            chosen.seen(
                f"the first module whose real-token output changed is {where} ({what})",
                Weight.STRONG,
            )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                f"mask the padding at {where}: a key padding / attention mask, a masked mean, or "
                "pack_padded_sequence for RNNs",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "add gradoc.audit_padding(model, batch, pad_mask=...) to the model's tests",
            ),
            Fix(
                Horizon.LONG_TERM,
                "bucket batches by length (gradoc.data.LengthBucketSampler) so less padding is "
                "computed at all",
            ),
        ]
        f.monitoring += ["the padding ratio per batch", "gradoc run --check padding on new models"]
        return [attn, pool, rnn, norm]


@dataclass(slots=True, kw_only=True)
class Unmasked(Details):
    """Seen in the inputs: pads in the batch and no mask, although the model takes one."""

    seen: str = "inputs"
    pads: str
    """How the pads were found (``padding_idx 0, no mask``)."""
    mask_param: str
    padding_ratio: float


def _in_the_inputs(h: History) -> list[Finding]:
    lengths = h.meta.lengths or {}
    ratio, param = lengths.get("padding_ratio"), lengths.get("mask_param")
    if not (lengths.get("unmasked") and param and isinstance(ratio, float) and ratio > 0):
        return []
    d = Unmasked(pads=str(lengths.get("source")), mask_param=str(param), padding_ratio=ratio)
    return [
        Finding(
            kind="padding_leak",
            severity="warning",
            step=0,
            layer=None,
            summary=(
                f"padding leak seen in the inputs: {ratio:.0%} of the positions are pads "
                f"({d.pads}) and no {param} was passed, which the model's forward takes: "
                "real tokens attend to the pads (confirm and measure: gradoc run --check padding)"
            ),
            evidence=[
                Evidence("positions that are pads", fmt(ratio)),
                Evidence("pads found by", d.pads, type="code"),
                Evidence("mask argument the model takes, not given", param, type="code"),
            ],
            details=d,
        )
    ]


def _explain_unmasked(f: Finding, d: Unmasked) -> list[Hypothesis]:
    f.symptom = "the model is fed pads with no mask: every real token attends to them"
    attn = Hypothesis(
        Family.MASKING,
        f"the collator pads the inputs but passes no {d.mask_param}: the model attends to pads",
        f"pass {d.mask_param}=(input_ids != pad_id).long() and compare the outputs at real "
        "positions (gradoc run --check padding measures it)",
        base=0.3,
    )
    attn.seen(
        f"{d.padding_ratio:.0%} of the positions were pads ({d.pads}) and no {d.mask_param} "
        "was given, although the model's forward takes one",
        Weight.DECISIVE,
    )
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            f"return {d.mask_param} from the collator (a Hugging Face tokenizer's padding does: "
            "tokenizer(..., padding=True) or DataCollatorWithPadding)",
        ),
        Fix(Horizon.SHORT_TERM, "run gradoc run --check padding once on the fixed pipeline"),
    ]
    f.monitoring.append("the padding ratio per batch, and whether a mask is passed")
    return [attn]
