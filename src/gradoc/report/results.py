"""The results of gradoc's tools as the report renders them: the checkpointing planner's
settings and blocks (``gradoc.tools.checkpointing`` makes them). Each record writes itself
to the planner's JSON beside its fields."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .._util.json_types import JsonObject


@dataclass(slots=True)
class PlanRow:
    """One checkpointing setting, measured on a copy of the model."""

    setting: str
    """``none`` or ``every k``."""
    every: int | None
    segments: int
    saved_bytes: int
    """Activations saved for the backward, measured."""
    predicted_saved_bytes: int
    """... predicted from the blocks' profile."""
    peak_bytes: int
    step_s: float
    time_ratio: float | None = None
    """Its step time over the step time without checkpointing."""

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class BlockCost:
    """One block of the model, without checkpointing."""

    block: str
    saved_bytes: int
    input_bytes: int
    fwd_s: float | None
    bwd_s: float | None

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(slots=True)
class Plan:
    """The planner's measurements; ``rows[0]`` is the model without checkpointing."""

    blocks_name: str
    blocks: list[BlockCost]
    rows: list[PlanRow]
    device: str
    peak_measured: bool
    """True on CUDA (max_memory_allocated); on the CPU the peak is saved + largest segment."""
    notes: list[str] = field(default_factory=list)

    def recommend(self, budget_bytes: float | None) -> PlanRow | None:
        """The fastest setting whose peak fits ``budget_bytes`` (None: the knee: least
        memory for at most 1.5x the step time)."""
        if budget_bytes is not None:
            fits = [r for r in self.rows if r.peak_bytes <= budget_bytes]
            return min(fits, key=lambda r: r.step_s) if fits else None
        base = self.rows[0].step_s
        ok = [r for r in self.rows if r.step_s <= 1.5 * base]
        return min(ok, key=lambda r: r.peak_bytes) if ok else self.rows[0]

    def to_json(self, budget_bytes: float | None = None) -> JsonObject:
        best = self.recommend(budget_bytes)
        return {
            "blocks_name": self.blocks_name,
            "blocks": [b.to_json() for b in self.blocks],
            "rows": [r.to_json() for r in self.rows],
            "device": self.device,
            "peak_measured": self.peak_measured,
            "notes": self.notes,
            "recommended": best.to_json() if best is not None else None,
        }


@dataclass(frozen=True, slots=True)
class LayerError:
    """The first step's gradient of one layer under autocast against fp32: |g_amp - g| / |g|."""

    layer: str
    rel_error: float

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Precision:
    """One side of an fp32-against-autocast comparison: its losses, step and peak memory."""

    loss: list[float]
    step_s: float | None
    """The median step."""
    peak_bytes: int


@dataclass(frozen=True, slots=True)
class AmpComparison:
    """``gradoc amp-compare``: a script's first steps in fp32 and under autocast."""

    dtype: str
    steps: int
    tolerance: float
    fp32: Precision
    amp: Precision
    loss_rel_diff: list[float]
    layers: list[LayerError]
    first_layer_beyond_tolerance: str | None
    peak_kind: str
    """``cuda`` (the allocator's peak) or ``rss`` (the process's)."""
    scaler_skipped: Any = None
    """fp16: the steps GradScaler skipped (None in bf16, which needs no scaler)."""
    scale_history: list[float] | None = None

    @property
    def max_loss_rel_diff(self) -> float | None:
        return max(self.loss_rel_diff) if self.loss_rel_diff else None

    @property
    def speedup(self) -> float | None:
        fp32, amp = self.fp32.step_s, self.amp.step_s
        return fp32 / amp if fp32 and amp else None

    def to_json(self) -> JsonObject:
        fp16 = self.dtype == "fp16"
        scaler = {"skipped_steps": self.scaler_skipped, "scale_history": self.scale_history}
        return {
            "schema": "gradoc.amp-compare/1",
            "dtype": self.dtype,
            "steps": self.steps,
            "tolerance": self.tolerance,
            "loss": {"fp32": self.fp32.loss, "amp": self.amp.loss, "rel_diff": self.loss_rel_diff},
            "max_loss_rel_diff": self.max_loss_rel_diff,
            "layers": [x.to_json() for x in self.layers],
            "first_layer_beyond_tolerance": self.first_layer_beyond_tolerance,
            "grad_scaler": scaler if fp16 else None,
            "step_s": {"fp32": self.fp32.step_s, "amp": self.amp.step_s},
            "speedup": self.speedup,
            "peak_bytes": {"fp32": self.fp32.peak_bytes, "amp": self.amp.peak_bytes},
            "peak_kind": self.peak_kind,
        }
