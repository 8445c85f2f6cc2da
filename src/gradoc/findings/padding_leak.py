"""padding_leak: the output at real positions changes when only the padding changes.

Needs: ``gradoc run --check padding`` / ``watch(check_padding=True)``: the padding audit
(``locate/padding.py``) runs the model on a batch twice, the second time with only the
padded positions changed, and records what it finds as ``padding_audit`` events.

Rule: each audit finding is reported once (per layer), at the first step it was seen. The
audit names the first module whose real outputs change by more than its tolerance; where
that module's inputs had changed already, its parent's own code.
"""

from __future__ import annotations

from ..detect.finding import Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import audited
from .facts import Facts
from .kind import FindingKind

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

    def check(self, h: History) -> list[Finding]:
        return audited(h, self.name)

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
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
