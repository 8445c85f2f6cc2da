"""Gradient checkpointing: where to put it, what it costs, and applying it.

The *blocks* are a model's repeated layers (the children of its largest ``ModuleList`` or
``Sequential`` of same-type modules, e.g. ``encoder.layers``). Checkpointing "every k
blocks" splits them into segments of k consecutive blocks; each segment keeps only its
input during the forward pass and recomputes its activations in the backward pass
(``torch.utils.checkpoint``, non-reentrant, RNG state preserved so dropout repeats).
``k = 1`` is per-block checkpointing; ``k = round(sqrt(n))`` is the sqrt(n) segmentation
of Chen et al. (2016), which balances stored segment inputs against one recomputed
segment.

Measured, per block, without checkpointing: the bytes of the tensors autograd saves for
the backward pass (exactly: ``torch.autograd.graph.saved_tensors_hooks``, unique storages,
parameters excluded), the bytes of its input, its forward and backward time. Per setting:
the saved bytes at the end of the forward pass (the same accounting: what autograd saves
outside the checkpointed segments, plus the segment inputs the checkpoints hold), the step
time (median of ``repeats``), and the peak: on CUDA ``torch.cuda.max_memory_allocated``; on
the CPU, which has no allocator statistics, the saved bytes plus the largest segment's
activations recomputed during the backward pass.

The prediction for a setting, from the per-block profile alone:
``saved(k) = saved(none) - sum(block saved) + sum(segment inputs)``.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .._util import entry, objects
from .._util.tree import tensors as _tensors
from ..errors import GradocError
from ..report.results import BlockCost, Plan, PlanRow

MB = 2**20


def find_blocks(model: nn.Module, blocks: str | None = None) -> tuple[str, list[nn.Module]]:
    """The repeated blocks: ``blocks`` names their container, or the largest ModuleList /
    Sequential (by parameters) of at least two children of one type."""
    if blocks is not None:
        container = dict(objects.named_modules(model)).get(blocks)
        if container is None:
            raise GradocError(f"the model has no submodule {blocks!r}")
        kids = objects.children(container)
        if len(kids) < 1:
            raise GradocError(f"{blocks!r} has no child modules to checkpoint")
        return blocks, kids
    best: tuple[int, str, list[nn.Module]] | None = None
    for name, m in objects.named_modules(model):
        if not isinstance(m, (nn.ModuleList, nn.Sequential)):
            continue
        kids = objects.children(m)
        if len(kids) < 2 or len({type(k) for k in kids}) != 1:
            continue
        size = sum(p.numel() for p in objects.parameters(m))
        if size and (best is None or size > best[0]):
            best = (size, name, kids)
    if best is None:
        raise GradocError(
            "found no repeated blocks (a ModuleList/Sequential of same-type layers); "
            "name them with blocks='encoder.layers'"
        )
    return best[1], best[2]


def _segments(n: int, every: int) -> list[list[int]]:
    return [list(range(i, min(i + every, n))) for i in range(0, n, every)]


def apply_checkpointing(
    model: nn.Module, every: int = 1, blocks: str | None = None
) -> list[list[int]]:
    """Checkpoint the model's blocks in segments of ``every`` consecutive blocks, in place.

    The first block of a segment runs the whole segment under ``torch.utils.checkpoint``
    (non-reentrant, RNG preserved); the segment's other blocks then pass its output
    through. Parameters, their names and the state dict are unchanged; gradients are
    identical to the unwrapped model's. The model's forward must call a segment's blocks
    one after another on each other's output with the same extra arguments (as
    ``nn.TransformerEncoder``, ``nn.Sequential`` and most block stacks do); anything else
    is refused with an error. Returns the segments (block indices).
    """
    if every < 1:
        raise GradocError("every must be >= 1")
    _, mods = find_blocks(model, blocks)
    remove_checkpointing(model, blocks)
    segments = _segments(len(mods), every)
    for seg in segments:
        _wrap_segment([mods[i] for i in seg])
    return segments


def remove_checkpointing(model: nn.Module, blocks: str | None = None) -> None:
    """Undo :func:`apply_checkpointing`."""
    _, mods = find_blocks(model, blocks)
    for m in mods:
        if "forward" in m.__dict__ and getattr(m.__dict__["forward"], "_gradoc", False):
            del m.__dict__["forward"]


def _wrap_segment(mods: list[nn.Module]) -> None:
    originals = [m.forward for m in mods]
    state: dict[str, Any] = {"out": None, "left": 0}

    def run(x: Any, *args: Any, **kwargs: Any) -> Any:
        for f in originals:
            x = f(x, *args, **kwargs)
        return x

    def first(x: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            out = checkpoint(run, x, *args, use_reentrant=False, **kwargs)
        else:
            out = run(x, *args, **kwargs)
        state["out"], state["left"] = out, len(mods) - 1
        return out

    def passthrough(x: Any, *args: Any, **kwargs: Any) -> Any:
        if state["left"] <= 0 or x is not state["out"]:
            raise GradocError(
                "checkpointing a segment of several blocks needs them called one after "
                "another on each other's output; use every=1 for this model"
            )
        state["left"] -= 1
        return x

    first._gradoc = True  # type: ignore[attr-defined]
    passthrough._gradoc = True  # type: ignore[attr-defined]
    mods[0].forward = first  # type: ignore[method-assign]
    for m in mods[1:]:
        m.forward = passthrough  # type: ignore[method-assign]


# -- measuring ---------------------------------------------------------------------------
class _Saved:
    """Bytes autograd saves for the backward pass: unique storages, parameters left out."""

    def __init__(self, model: nn.Module) -> None:
        self.params = {p.untyped_storage().data_ptr() for p in objects.parameters(model)}
        self.stack: list[int] = []
        self.reset()

    def reset(self) -> None:
        """Fresh accounting for the next pass."""
        self.seen: set[int] = set()
        self.total = 0
        self.by: dict[int, int] = {}

    def add(self, t: Tensor, owner: int | None = None) -> int:
        s = t.untyped_storage()
        key = s.data_ptr()
        if key in self.params or key in self.seen or t.device.type == "meta":
            return 0
        self.seen.add(key)
        n = s.nbytes()
        self.total += n
        who = owner if owner is not None else (self.stack[-1] if self.stack else -1)
        self.by[who] = self.by.get(who, 0) + n
        return n

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        def pack(t: Tensor) -> Tensor:
            self.add(t)
            return t

        return entry.saved_tensors_hooks(pack)


def _counts_input(saved: _Saved) -> Callable[[nn.Module, Any], None]:
    """A segment's forward pre-hook: a checkpoint holds its segment's input."""

    def pre(module: nn.Module, args: Any) -> None:
        for t in _tensors(args)[:1]:
            saved.add(t, owner=-2)

    return pre


Step = Callable[[nn.Module], Tensor]
"""Runs the forward pass of a model and returns what to call backward on (a scalar)."""


def _step_fn(
    args: Sequence[Any], kwargs: dict[str, Any], loss_fn: Callable[[Any], Tensor] | None
) -> Step:
    def step(m: nn.Module) -> Tensor:
        out = m(*args, **kwargs)
        if loss_fn is not None:
            return loss_fn(out)
        first = _tensors(out)[0]
        return (first.float() * torch.ones_like(first.float())).sum()  # a unit output gradient

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CheckpointPlan(Plan):
    """The planner's measurements (:class:`gradoc.report.results.Plan`), with its chart and
    its page."""

    def plot(self, path: str | Path) -> Path:
        """Memory vs step time, one point per setting, as a PNG."""
        from ..report.charts import memory_time_chart, to_png

        path = Path(path)
        to_png(memory_time_chart(self.rows, f"checkpointing {self.blocks_name}"), path)
        return path

    def write(self, directory: str | Path, budget_bytes: float | None = None) -> Path:
        """``checkpoint-plan.json``, ``.png`` and ``.html`` in ``directory``; the HTML's path."""
        import json

        from ..report.html import write_checkpoint_plan

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        data = self.to_json(budget_bytes)
        (d / "checkpoint-plan.json").write_text(json.dumps(data, indent=2))
        self.plot(d / "checkpoint-plan.png")
        return write_checkpoint_plan(self, budget_bytes, d / "checkpoint-plan.html")


def plan_checkpointing(
    model: nn.Module,
    example_inputs: Any,
    loss_fn: Callable[[Any], Tensor] | None = None,
    *,
    blocks: str | None = None,
    settings: Sequence[int] | None = None,
    repeats: int = 3,
    kwargs: dict[str, Any] | None = None,
) -> CheckpointPlan:
    """Measure each block and each checkpointing setting (see the module docstring).

    ``example_inputs``: the model's positional input (a tensor or a tuple of them);
    ``loss_fn(output) -> scalar`` (default: the sum of the first output, a unit gradient).
    The model is not changed: settings are measured on copies.
    """
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    step = _step_fn(args, kwargs or {}, loss_fn)
    name, mods = find_blocks(model, blocks)
    n = len(mods)
    device = objects.parameters(model)[0].device
    ks = sorted(
        {k for k in (settings or (1, 2, 4, 8)) if 1 <= k <= n} | {max(1, round(math.sqrt(n)))}
    )

    # per block, no checkpointing
    failures = entry.failures()
    saved = _Saved(model)
    inputs: dict[int, int] = {}
    fwd: dict[int, list[float]] = {i: [] for i in range(n)}
    bwd: dict[int, list[float]] = {i: [] for i in range(n)}
    t0: dict[int, float] = {}
    handles = []
    for i, m in enumerate(mods):

        def pre(mod: nn.Module, a: Any, i: int = i) -> None:
            saved.stack.append(i)
            inputs.setdefault(i, sum(t.untyped_storage().nbytes() for t in _tensors(a)[:1]))
            _sync(device)
            t0[i] = time.perf_counter()

        def post(mod: nn.Module, a: Any, out: Any, i: int = i) -> None:
            _sync(device)
            fwd[i].append(time.perf_counter() - t0[i])
            saved.stack.pop()

        def bpre(mod: nn.Module, g: Any, i: int = i) -> None:
            t0[-1 - i] = time.perf_counter()

        def bpost(mod: nn.Module, gi: Any, go: Any, i: int = i) -> None:
            bwd[i].append(time.perf_counter() - t0.get(-1 - i, time.perf_counter()))

        handles += [
            entry.forward_pre_hook(m, pre),
            entry.forward_hook(m, post),
            entry.backward_pre_hook(m, bpre),
            entry.backward_hook(m, bpost),
        ]
    try:
        with warnings.catch_warnings():  # hooks on blocks whose input needs no grad
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            for _ in range(repeats):
                saved.reset()
                with saved.hooks():
                    loss = step(model)
                loss.backward()
                objects.zero_grad(model)
            base_saved, by_block = saved.total, dict(saved.by)
    finally:
        for h in handles:
            h.remove()
    block_rows = [
        BlockCost(
            block=f"{name}.{i}",
            saved_bytes=by_block.get(i, 0),
            input_bytes=inputs.get(i, 0),
            fwd_s=statistics.median(fwd[i]) if fwd[i] else None,
            bwd_s=statistics.median(bwd[i]) if bwd[i] else None,
        )
        for i in range(n)
    ]
    rows = [_measure(model, step, blocks, None, repeats, device, by_block, inputs, n, base_saved)]
    for k in ks:
        rows.append(
            _measure(model, step, blocks, k, repeats, device, by_block, inputs, n, base_saved)
        )
    if entry.failures() > failures:  # a measurement whose hooks failed is no measurement
        raise GradocError("could not plan checkpointing: an internal error of gradoc's")
    base_t = rows[0].step_s
    for row in rows:
        row.time_ratio = row.step_s / base_t if base_t else None
    return CheckpointPlan(name, block_rows, rows, str(device), device.type == "cuda")


def _measure(
    model: nn.Module,
    step: Step,
    blocks: str | None,
    every: int | None,
    repeats: int,
    device: torch.device,
    by_block: dict[int, int],
    inputs: dict[int, int],
    n: int,
    base_saved: int,
) -> PlanRow:
    m = copy.deepcopy(model)
    segments = apply_checkpointing(m, every, blocks) if every else [[i] for i in range(n)]
    _, mods = find_blocks(m, blocks)
    saved = _Saved(m)
    if every:  # a checkpoint holds its segment's input: count it as its own
        for seg in segments:
            entry.forward_pre_hook(mods[seg[0]], _counts_input(saved))
    times, peaks = [], []
    step(m).backward()  # warm-up: the first checkpointed pass pays one-off costs
    objects.zero_grad(m)
    for _ in range(repeats):
        saved.reset()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            start = torch.cuda.memory_allocated(device)
        _sync(device)
        t = time.perf_counter()
        with saved.hooks():
            loss = step(m)
        held = saved.total
        loss.backward()
        _sync(device)
        times.append(time.perf_counter() - t)
        if device.type == "cuda":
            peaks.append(torch.cuda.max_memory_allocated(device) - start)
        objects.zero_grad(m)
    block_total = sum(by_block.get(i, 0) for i in range(n))
    if every:
        predicted = base_saved - block_total + sum(inputs.get(seg[0], 0) for seg in segments)
        largest = max(sum(by_block.get(i, 0) for i in seg) for seg in segments)
    else:
        predicted, largest = base_saved, 0
    return PlanRow(
        setting=f"every {every}" if every else "none",
        every=every,
        segments=len(segments) if every else 0,
        saved_bytes=held,
        predicted_saved_bytes=predicted,
        peak_bytes=max(peaks) if peaks else held + largest,
        step_s=statistics.median(times),
    )


def capture_first_step(
    script: Path, args: list[str]
) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """Run a training script up to its first optimizer step; return the model that owns the
    optimizer's parameters and the arguments of its last forward call."""
    from ..collect.attach import ModelFinder
    from ..runtime.runner import Stop, run_until

    finder = ModelFinder(calls=True)

    def step(opt: torch.optim.Optimizer, a: Any, kw: Any) -> None:
        for m in finder.trained_by(opt):
            call = finder.last_call(m)
            if call is not None:
                raise Stop((m, *call))

    handle = entry.every_step_pre_hook(step)
    try:
        found = run_until(script, args)
    finally:
        handle.remove()
        finder.remove()
    if found is None:
        raise GradocError(f"{script} took no optimizer step: nothing to plan")
    return found  # type: ignore[return-value]
