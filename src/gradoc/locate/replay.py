"""Replay a failing step with op-level checks; trace a later step when the model was clean.

The tracer is a ``TorchDispatchMode``: it sees every aten op of the forward and, as the
autograd engine runs in the calling thread on the CPU, of the backward too. The birth of
a non-finite value is the first op whose floating-point inputs are all finite and whose
output is not. Module names come from forward hooks placed for the replay only; backward
ops are attributed to the autograd node running them (node pre-hooks), and that node to
the forward line that created it (anomaly mode's forward traceback, on during the replay
only).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .._util import entry, objects
from .._util.state import Anomaly, RngState, anomaly_state, kept, set_anomaly_state
from .._util.tree import arguments, tensors
from .._util.tree import floats as _floats
from .._util.wrappers import unwrap
from ..detect.finding import Mechanism, Origin, Reading
from . import mechanism
from .modules import ModuleStack, stance_eager, stance_restore
from .origin import Frame, frame_from_text, place, user_frame


def _bad(t: Tensor) -> int:
    return int((~torch.isfinite(t)).sum())


def _nan(t: Tensor) -> bool:
    return bool(torch.isnan(t).any())


# Ops that write infinities on purpose (attention masks, initial maxima): an inf they
# produce is not a bug; a NaN that follows (a softmax over a fully masked row) is.
_FILLS = {
    "full",
    "full_like",
    "fill",
    "fill_",
    "masked_fill",
    "masked_fill_",
    "where",
    "scalar_tensor",
    "new_full",
    "lift_fresh",
    "lift_fresh_copy",
    "_to_copy",
    "copy_",
    "clone",
    "detach",
    "alias",
}
# Ops that return uninitialised memory: whatever bits it holds (a NaN among them) were
# never computed, so they are no birth; tracing them made two runs of one script disagree.
_UNINITIALISED = {
    "empty",
    "empty_like",
    "new_empty",
    "empty_strided",
    "new_empty_strided",
    "empty_permuted",
    "resize_",
}


own_depth = [0]
"""Above 0 while gradoc's own hooks run: their ops are not the user's (every tracer)."""


@contextlib.contextmanager
def own_work() -> Iterator[None]:
    """gradoc's own ops (statistics in hooks) are invisible to every tracer."""
    own_depth[0] += 1
    try:
        yield
    finally:
        own_depth[0] -= 1


NUMBER_DENOMINATOR = "the denominator, a Python number"
"""The reading of a division by a number, not a tensor (``pos / (len(x) - 1)``)."""


def describe(func: Any, args: Sequence[Any], out: list[Tensor]) -> list[Reading]:
    """Evidence about the operands of the op that produced a non-finite value."""
    name = getattr(getattr(func, "overloadpacket", func), "__name__", str(func))
    tensors = [a for a in args if isinstance(a, Tensor)]
    ev: list[Reading] = [Reading("non-finite values in the output", sum(_bad(t) for t in out))]
    first = tensors[0] if tensors else None
    second = args[1] if len(args) > 1 else None
    if name in ("div", "div_", "true_divide") and isinstance(second, (int, float)):
        ev.append(Reading(NUMBER_DENOMINATOR, second))  # gradoc fix writes max(d, eps)
    elif name in ("div", "div_", "true_divide", "reciprocal") and isinstance(second, Tensor):
        zeros = second == 0
        ev.append(Reading("zeros in the denominator", int(zeros.sum())))
        if first is not None:
            with contextlib.suppress(RuntimeError):  # shapes that do not broadcast
                both = zeros & (first == 0)
                ev.append(Reading("0/0 positions", int(both.sum())))
    elif name in ("log", "log2", "log10", "log1p") and first is not None:
        edge = -1.0 if name == "log1p" else 0.0
        ev.append(Reading(f"{name} argument min", float(first.min())))
        ev.append(Reading(f"arguments <= {edge:g}", int((first <= edge).sum())))
    elif name in ("sqrt", "rsqrt") and first is not None:
        ev.append(Reading("sqrt argument min", float(first.min())))
        ev.append(Reading("negative arguments", int((first < 0).sum())))
    elif name in ("exp", "exp2", "expm1") and first is not None:
        ev.append(Reading(f"{name} argument max", float(first.max())))
    elif name == "pow" and first is not None:
        exponent = second if isinstance(second, (int, float)) else None
        ev.append(Reading("negative bases", int((first < 0).sum())))
        if exponent is not None:
            ev.append(Reading("exponent", exponent))
    elif name == "mul" and isinstance(second, Tensor) and first is not None:
        try:
            zero_inf = (first == 0) & second.isinf() | first.isinf() & (second == 0)
            ev.append(Reading("0 * inf positions", int(zero_inf.sum())))
        except RuntimeError:
            pass
    elif first is not None:
        ev.append(Reading("largest |input|", float(first.abs().max())))
    if first is not None and first.dtype in (torch.float16, torch.bfloat16):
        ev.append(Reading("dtype", str(first.dtype).replace("torch.", "")))
    return ev


def _bad_rows(t: Tensor, limit: int = 16) -> tuple[int, list[int]]:
    """(size of dim 0, the first indices along it holding a non-finite value)."""
    if t.dim() == 0:
        return 0, []
    rows = (~torch.isfinite(t)).reshape(t.shape[0], -1).any(1).nonzero().flatten()
    return t.shape[0], rows[:limit].tolist()


def batch_evidence(
    root: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], rows: tuple[int, list[int]]
) -> list[Reading]:
    """What the failing batch's per-sample integer inputs (lengths, counts, ids) looked like,
    and their values for the samples where the value was born: "the short posts"."""
    bound = arguments(root, args, kwargs)
    size, bad = rows
    ev: list[Reading] = []
    for name, value in bound.items():
        if not (isinstance(value, Tensor) and value.dim() == 1 and value.numel() > 1):
            continue
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            continue
        v = value.detach().cpu()
        ev.append(
            Reading(
                f"`{name}` in the failing batch (min / median / max)",
                f"{int(v.min())} / {int(v.median())} / {int(v.max())}",
                {"argument": name},
            )
        )
        if bad and size == v.numel():
            ev.append(
                Reading(
                    f"`{name}` of the samples where the value was born",
                    [int(v[i]) for i in bad],
                    {"argument": name},
                )
            )
    return ev


@dataclass(slots=True)
class Birth:
    """The first op a :class:`Tracer` saw make a NaN/Inf from finite inputs."""

    op: str
    module: str | None
    """The innermost module running (its qualified name), None outside the model."""
    node: Any
    """The autograd node running it in a backward (None in a forward)."""
    frame: Frame | None
    """The user's line that ran it (file, line, code)."""
    evidence: list[Reading]
    rows: tuple[int, list[int]]
    """The output's size along dim 0 and the first rows holding the NaN/Inf."""
    mechanism: Mechanism | None = None
    """Why its value was non-finite (``locate.mechanism``), read when it was found."""


class Tracer(entry.ObservingMode):
    """Records the first op whose finite inputs gave a non-finite output; ``on_found`` is
    called right after (``check_numerics`` raises from it, at the user's line). A replay's
    tracer runs inside gradoc's own work and so ``replays``: it sees the ops gradoc runs.
    ``--check numerics`` runs it through the program: an entry point (``_util.entry``)."""

    where = "locate.replay.Tracer.observe"

    def __init__(
        self,
        modules: list[str] | None = None,
        on_found: Callable[[], None] | None = None,
        replays: bool = False,
    ) -> None:
        super().__init__()
        self.replays = replays
        self.modules = modules if modules is not None else []
        self.node: Any = None
        self.found: Birth | None = None
        self.on_found = on_found
        self.recent = mechanism.Recent()
        """The last ops seen (weakly): what made the birth's operands."""

    def observe(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        if self.found is None and (self.replays or not own_depth[0]):
            outs = _floats(out)
            self.recent.add(func, args, tensors(out))  # integer ones too: lengths - 1
            if outs and any(_bad(t) for t in outs):
                inputs = _floats((args, kwargs))
                name = getattr(getattr(func, "overloadpacket", func), "__name__", "")
                if name in _UNINITIALISED:
                    return
                if any(_nan(t) for t in outs):  # a NaN is born where no input had one
                    born = not any(_nan(t) for t in inputs)
                else:  # an infinity is born from finite inputs, unless written on purpose
                    born = name not in _FILLS and not any(_bad(t) for t in inputs)
                if born:
                    # in a backward the engine runs this thread's ops inside a node: name it
                    node = self.node or torch._C._current_autograd_node()
                    self.found = Birth(
                        op=str(func),
                        module=self.modules[-1] if self.modules else None,
                        node=node,
                        frame=user_frame(),
                        evidence=describe(func, args, outs),
                        rows=_bad_rows(next(t for t in outs if _bad(t))),
                        mechanism=self._mechanism(func, args, outs, node),
                    )
                    if self.on_found is not None:
                        self.on_found()

    def _mechanism(self, func: Any, args: Any, outs: list[Tensor], node: Any) -> Mechanism | None:
        """Why the birth's value was non-finite: in a backward, from the node running it (a
        square root's derivative at 0); in a forward, from its operands and their makers."""
        with own_work():
            if node is not None:
                running = mechanism.from_node(node)
                return None if running is None else mechanism.explain(running, node_phase=True)
            return mechanism.explain(self.recent.op(str(func), list(args), outs[0]))


def _running(tracer: Tracer, node: Any) -> Callable[[Any], None]:
    """A node's pre-hook: the tracer knows which node runs (a backward op's module)."""

    def prehook(grad_outputs: Any) -> None:
        tracer.node = node

    return prehook


def _graph_nodes(roots: list[Any]) -> list[Any]:
    seen, todo, out = set(), list(roots), []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        out.append(node)
        todo.extend(fn for fn, _ in node.next_functions)
    return out


def check_inputs(step: int, inputs: Any) -> Origin | None:
    """Phase ``input``: the data handed to the model was already non-finite."""
    for t in _floats(inputs):
        bad = ~torch.isfinite(t)
        n = int(bad.sum())
        if not n:
            continue
        ev: list[Reading] = [Reading("non-finite values in the input batch", n)]
        if t.dim() >= 2:
            per_feature = bad.reshape(-1, t.shape[-1]).sum(0)
            ev.append(
                Reading(
                    "feature with the most",
                    int(per_feature.argmax()),
                    {"count": int(per_feature.max())},
                )
            )
            rows = bad.reshape(t.shape[0], -1).any(1).nonzero().flatten().tolist()
            ev.append(Reading("samples affected", len(rows), {"rows": rows[:8]}))
            feature = f", feature {int(per_feature.argmax())}" if t.dim() == 2 else ""
            where = f" ({_rows(rows)} of the batch{feature})"
        else:
            where = ""
        dtype = str(t.dtype).removeprefix("torch.")
        held = f"{n} of the {t.numel()} values of a {dtype} input{where}"
        return Origin(
            phase="input",
            step=step,
            evidence=ev,
            mechanism=mechanism.inherited(
                held, f"were already NaN/Inf when the model took it at step {step}", ev[0]
            ),
        )
    return None


def _rows(rows: list[int]) -> str:
    """``row 3``, ``rows 3, 4, 9`` or ``rows 12-16`` (a run), the first 8 of them."""
    if len(rows) == 1:
        return f"row {rows[0]}"
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"rows {rows[0]}-{rows[-1]}"
    shown = ", ".join(map(str, rows[:8]))
    return "rows " + shown + (f" and {len(rows) - 8} more" if len(rows) > 8 else "")


LARGE_UPDATE = 0.5
"""An update above half the norm of the weights it produced dwarfed them (healthy: ~1e-3)."""


def check_weights(
    step: int,
    params: Sequence[tuple[str, str, Tensor]],
    last_update: dict[str, float],
    update_ratios: dict[str, tuple[int, float]] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> Origin | None:
    """Phase ``optimizer``: the weights were already non-finite before this step's forward,
    or the last recorded update of a weight matrix dwarfed it (the weights blew up without
    going non-finite, and the forward overflows on them)."""
    bad = [(name, module, _bad(p), p) for name, module, p in params if _bad(p.detach())]
    if not bad:
        return _large_update(step, params, update_ratios or {})
    name, module, n, param = bad[0]
    ev: list[Reading] = [
        Reading(
            f"weights already non-finite after the step {step - 1} update",
            len(bad),
            {"names": [b[0] for b in bad][:10]},
        ),
        Reading(f"non-finite values in {name}", n),
    ]
    for key, value in last_update.items():
        if value is not None and math.isfinite(value):
            ev.append(Reading(key, value))
    if optimizer is not None:
        ev += eps_evidence(optimizer, name, param)
    return Origin(
        phase="optimizer",
        step=step - 1,
        op="optimizer.step",
        module=module or None,
        evidence=ev,
        mechanism=mechanism.inherited(
            f"{len(bad)} weights ({name} first)",
            f"were already NaN/Inf before the forward of step {step}: the update of step "
            f"{step - 1} wrote them",
            ev[0],
        ),
        note=f"the update of step {step - 1} wrote non-finite weights; later non-finite "
        "values are its consequence",
    )


DENOMINATORS = ("exp_avg_sq", "square_avg", "sum", "exp_inf")
"""Optimizer state an update divides by (Adam/AdamW/NAdam/RAdam, RMSprop/Adadelta,
Adagrad, Adamax): ``sqrt(state) + eps``."""


def eps_evidence(optimizer: torch.optim.Optimizer, name: str, param: Tensor) -> list[Reading]:
    """Why an update could write NaN/Inf from finite gradients: the ``eps`` that keeps its
    division finite is 0 in the weights' dtype (Adam's 1e-8 in float16, whose smallest
    value is 6e-8, or an eps set to 0), so where the state it divides by is exactly 0 (a
    squared gradient that underflowed, or a gradient of 0) the update is x/0 or 0/0."""
    group = next((g for g in optimizer.param_groups if any(p is param for p in g["params"])), None)
    eps = group.get("eps") if group is not None else None
    if isinstance(eps, tuple):  # Adafactor/Adadelta-like pairs: the first divides
        eps = eps[0]
    if not isinstance(eps, (int, float)) or float(torch.tensor(eps, dtype=param.dtype)) != 0:
        return []
    dtype = str(param.dtype).removeprefix("torch.")
    ev: list[Reading] = [
        Reading(f"eps of {type(optimizer).__name__} as {dtype}", 0.0, {"eps": eps, "dtype": dtype})
    ]
    state = optimizer.state.get(param, {})
    for key in DENOMINATORS:
        held = state.get(key)
        if isinstance(held, Tensor) and held.is_floating_point():
            zeros = int((held == 0).sum())
            ev.append(
                Reading(
                    f"exact zeros in {key} of {name}", zeros, {"of": held.numel(), "state": key}
                )
            )
    return ev


def _large_update(
    step: int, params: Sequence[tuple[str, str, Tensor]], ratios: dict[str, tuple[int, float]]
) -> Origin | None:
    big = sorted(((s, -r, name) for name, (s, r) in ratios.items() if r > LARGE_UPDATE))
    if not big:
        return None
    at, _, name = big[0]
    modules = {n: m for n, m, _ in params}
    return Origin(
        phase="optimizer",
        step=at,
        op="optimizer.step",
        module=modules.get(name) or None,
        evidence=[
            Reading(f"update norm / weight norm of {n} at step {s}", -r) for s, r, n in big[:10]
        ],
        note=f"the update of step {at} moved {name} by {-big[0][1]:.3g} of its norm (healthy "
        f"~1e-3); the weights it produced overflow later: the non-finite values from "
        f"step {step} are its consequence",
    )


def locate_step(
    step: int,
    roots: Sequence[nn.Module],
    names: Mapping[nn.Module, str],
    inputs: tuple[tuple[Any, ...], dict[str, Any]] | None,
    rng: RngState | None,
    out_grad: Tensor | None,
    loss_bad: bool = False,
) -> Origin | None:
    """Replay the model's forward (and backward) of ``step`` with op-level checks."""
    if inputs is None or not roots:
        return None
    args, kwargs = inputs
    origin = check_inputs(step, (args, kwargs))
    if origin is not None:
        return origin
    root = unwrap(roots[0])  # on one rank (no all-reduce to wait on), eagerly
    modules = ModuleStack(names)
    tracer = Tracer(modules.stack, replays=True)
    # the user's anomaly flag, RNG and buffers are put back, whatever the replay did
    with contextlib.ExitStack() as restore:
        restore.enter_context(kept(roots, start=rng))
        restore.callback(stance_restore, stance_eager(load=False))
        anomaly_on()
        restore.enter_context(modules)
        restore.enter_context(warnings.catch_warnings())  # anomaly mode warns it is on
        restore.enter_context(torch.enable_grad())  # optimizer hooks run under no_grad
        warnings.simplefilter("ignore")
        with tracer:
            out = root(*args, **kwargs)
        if tracer.found is not None:
            origin = origin_from(step, tracer.found, "forward")
            origin.evidence += batch_evidence(root, args, kwargs, tracer.found.rows)
            return origin
        first = _floats(out)
        params = [p for r in roots for p in objects.parameters(r) if p.requires_grad]
        if out_grad is not None and first and first[0].requires_grad and params:
            if _bad(out_grad) and loss_bad:
                return None  # the loss itself was non-finite: born in its forward
            if _bad(out_grad):
                return Origin(
                    phase="backward",
                    step=step,
                    module=None,
                    evidence=[
                        Reading(
                            "non-finite gradient values reaching the model output", _bad(out_grad)
                        )
                    ],
                    note="the loss's backward produced it, outside the model",
                )
            nodes = _graph_nodes([first[0].grad_fn])
            handles = [entry.node_prehook(n, _running(tracer, n)) for n in nodes]
            try:
                with tracer:
                    torch.autograd.grad(first[0], params, out_grad, allow_unused=True)
            finally:
                for h in handles:
                    h.remove()
            if tracer.found is not None:
                return origin_from(step, tracer.found, "backward")
    return None


def origin_from(step: int, found: Birth, phase: str | None = None) -> Origin:
    """The Origin of a Tracer's record; the phase is backward when an autograd node was
    running, unless the caller knows it."""
    node = found.node
    phase = phase or ("backward" if node is not None else "forward")
    origin = Origin(
        phase=phase,
        step=step,
        op=found.op,
        module=found.module,
        evidence=list(found.evidence),
        mechanism=found.mechanism,
    )
    if phase == "backward" and node is not None:
        origin.op = node.name()
        origin.evidence.insert(0, Reading("aten op inside the backward", found.op))
        origin.module = node.metadata.get("gradoc_module")
        place(origin, frame_from_text(node.metadata.get("traceback_", [])))
    else:
        place(origin, found.frame)
    return origin


class ArmedTrace:
    """Tracing armed across whole steps (forward, the loss in the loop, backward), for a
    non-finite value born outside the model: entered after one step's statistics, left at
    the next; ops are attributed to the innermost module running (see ``ModuleStack``).
    Also the tracing of ``check_numerics`` (``load_compiler``: make compiled code eager even
    when torch.compile is not loaded yet) and of a closure's replay (``replays``)."""

    def __init__(
        self,
        names: Mapping[nn.Module, str] | None = None,
        on_found: Callable[[], None] | None = None,
        replays: bool = False,
        load_compiler: bool = False,
    ) -> None:
        self.modules = ModuleStack(names)
        self.tracer = Tracer(self.modules.stack, on_found=on_found, replays=replays)
        self.active = False
        self._load = load_compiler

    def start(self) -> None:
        if not self.active:
            # anomaly mode (without its NaN check) records where each autograd node was
            # created, so an op born in the backward is given its forward line
            self._saved = (anomaly_on(), stance_eager(load=self._load))
            self.modules.__enter__()
            self.tracer.__enter__()
            self.active = True

    def stop(self) -> Birth | None:
        if self.active:
            self.tracer.__exit__(None, None, None)
            self.modules.__exit__()
            anomaly, stance = self._saved
            set_anomaly_state(anomaly)
            stance_restore(stance)
            self.active = False
        return self.tracer.found


def anomaly_on() -> Anomaly:
    """Anomaly mode on without its NaN check; returns the user's setting to restore
    (``kept`` restores it around a replay; a trace of live steps, with ``stop``)."""
    before = anomaly_state()
    torch.set_anomaly_enabled(True, False)
    return before


def rerun_closure(
    step: int,
    closure: Callable[[], Any],
    rng: RngState,
    roots: Sequence[nn.Module],
    names: Mapping[nn.Module, str],
    params: Sequence[tuple[str, str, Tensor]],
) -> Origin | None:
    """Call an optimizer step's closure (LBFGS) again under op-level checks, from the RNG
    state of its first call: the closure computes the forward, the loss and the backward,
    so the whole step is replayed, the loss written in the training loop included. Nothing
    of the user's state changes: gradients, buffers and the RNG are put back, and what the
    closure prints is not printed twice."""
    import io

    trace = ArmedTrace(names, replays=True)
    with kept(roots, [p for _, _, p in params], start=rng):
        sink = io.StringIO()
        with (
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
            warnings.catch_warnings(),
            torch.enable_grad(),
        ):
            warnings.simplefilter("ignore")
            trace.start()
            try:
                closure()
            except Exception:  # fails when called again: nothing found
                pass
            finally:
                found = trace.stop()
    if found is None:
        return None
    origin = origin_from(step, found)
    origin.note = (
        f"the step's closure was called again with op-level checks at step {step} (the "
        "loss is computed inside it)"
    )
    return origin
