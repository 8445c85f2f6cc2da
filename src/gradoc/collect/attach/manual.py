"""Steps of a program that trains without ``torch.optim``.

The from-scratch loops of textbooks (``with torch.no_grad(): w -= lr * w.grad``), research
code that calls ``torch.autograd.grad`` and moves tensors itself, input optimisation: no
optimizer step to count. When no ``torch.optim`` optimizer exists, a step is one direct
``backward()`` or ``torch.autograd.grad`` call; its statistics are read when that call
returns, and the step ends at the next call (or at the end of the program), when the
tensors' change since is the step's update. An iteration that calls twice (a data term's
gradient, then a penalty's) is one step: a call from a line that has not called yet in the
open step joins it. The tensors that receive gradients are the
step's parameters: those the call names (``inputs``), else the leaves of the loss's
autograd graph; they are named after the module owning them, else after the variable of
the user's code that holds them, else by order and shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from ..._util import objects
from ..._util.objects import IdMap
from ...locate.origin import user_frame_object
from ...store import EventKind
from ...store.writer import insert_rows
from .._safety import guarded, without_grad
from ..graph import graph_leaves
from . import taps
from .layers import WatchedParam, owner_names, param_row

if TYPE_CHECKING:
    from ..context import Internal
    from ..probes import Activations, WatchedOptimizer


class StepProtocol(Protocol):
    """What hand-written steps use of the run's step protocol (``steps.Steps``)."""

    targets: IdMap[Any, WatchedOptimizer]
    primary: Any
    device: torch.device | None
    count: int

    @property
    def activations(self) -> Activations: ...

    def add(
        self, optimizer: Any, params: list[WatchedParam], manual: bool = False
    ) -> WatchedOptimizer: ...

    def remove(self, optimizer: Any) -> None: ...

    def counted_by(self, how: str) -> None: ...

    def statistics(self, target: WatchedOptimizer) -> None: ...

    def post_step(self, optimizer: Any) -> None: ...


class HandWritten:
    """Stands in for the optimizer of a program that updates its tensors itself: what a
    watched run reads of an optimizer (``param_groups``), with no learning rate."""

    def __init__(self) -> None:
        self.param_groups: list[dict[str, Any]] = [{"params": []}]

    def __repr__(self) -> str:
        return "<hand-written updates>"


def _as_list(tensors: Any) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        return [tensors]
    if isinstance(tensors, (list, tuple)):
        return [t for t in tensors if isinstance(t, Tensor)]
    return []


def step_leaves(outputs: Any, inputs: Any) -> list[Tensor]:
    """The tensors a ``backward(outputs, inputs=...)`` or ``autograd.grad(outputs, inputs)``
    gives gradients to: ``inputs`` when named, else the leaves of the graph (its
    ``AccumulateGrad`` nodes), in the order a walk from the outputs meets them."""
    named = _as_list(inputs)
    if named:
        return named
    roots = [t.grad_fn for t in _as_list(outputs) if t.grad_fn is not None]
    # a leaf handed to backward() itself
    handed = [t for t in _as_list(outputs) if t.grad_fn is None and t.requires_grad]
    return handed + graph_leaves(roots)


def variable_names(tensors: Sequence[Tensor]) -> dict[int, str]:
    """The names the user's code holds ``tensors`` by (``w``, ``params[0]``,
    ``weights['fc']``), read from the innermost frame of the user's code and its module's
    globals; once per new tensor, never per step."""
    wanted = {id(t) for t in tensors}
    found: dict[int, str] = {}
    frame = user_frame_object(1)
    if frame is None:
        return found
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in list(scope.items()):
            if name.startswith("__"):
                continue
            for label, t in _held(name, value):
                if id(t) in wanted and id(t) not in found:
                    found[id(t)] = label
        if len(found) == len(wanted):
            break
    return found


def _held(name: str, value: Any) -> Iterable[tuple[str, Tensor]]:
    if isinstance(value, Tensor):
        yield name, value
    elif isinstance(value, (list, tuple)) and len(value) <= 1000:
        for i, v in enumerate(value):
            if isinstance(v, Tensor):
                yield f"{name}[{i}]", v
    elif isinstance(value, dict) and len(value) <= 1000:
        for k, v in value.items():
            if isinstance(v, Tensor) and isinstance(k, (str, int)):
                yield f"{name}[{k!r}]", v


def _call_site() -> tuple[str, int] | None:
    """The line of the user's code that made the current backward()/autograd.grad call."""
    frame = user_frame_object(2)
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def fallback_name(index: int, t: Tensor) -> str:
    """A tensor nobody named: by its order of first use and its shape (``tensor0[784x10]``)."""
    return f"tensor{index}[{'x'.join(map(str, t.shape))}]"


class ManualSteps:
    """Counts a run's steps at ``backward()`` / ``torch.autograd.grad`` calls while no
    optimizer takes their gradients (see the module's docstring)."""

    def __init__(self, run: Internal, steps: StepProtocol) -> None:
        self.run, self.steps = run, steps
        self.target: WatchedOptimizer | None = None
        """The stand-in optimizer's target, once steps are counted here."""
        self.open = False
        """A step's statistics were read and the step has not ended yet."""
        self._leaves: list[Tensor] | None = None  # the step's tensors, between the taps
        self._names: dict[int, str] = {}
        self._stable = 0
        self._grads_before: dict[int, int] = {}
        self._probe: list[Tensor] = []
        self.joined = False
        """The last call joined the open step (see :meth:`_same_iteration`)."""
        self._sites: set[tuple[str, int]] = set()
        """The lines of the user's code that called backward()/autograd.grad in the open
        step."""

    def stop(self) -> None:
        """An optimizer stepped after all: from now on it counts the steps."""
        if self.target is None:
            return
        self.steps.remove(self.target.optimizer)
        self.target, self.open = None, False
        self.run.event(EventKind.STEPS_COUNTED, "an optimizer stepped: steps counted at its step()")

    def on_backward(self, tensors: Any, inputs: Any) -> None:
        """A direct call begins: the previous step ends (its update is done by now), unless
        the call is another of the same iteration (see :meth:`_same_iteration`)."""
        leaves = self._step_leaves(tensors, inputs) if self._maybe() else None
        self.joined = leaves is not None and self._same_iteration()
        if self.joined:
            return  # its loss is the step's too; its gradients are not the step's statistics
        if leaves is not None and self.target is None:  # decided when the call returns
            self._grads_before = taps.optimizer_grads()
            # what an optimizer may hold: the graph's leaves too, not only the ``inputs``
            # asked for (a gradient penalty's autograd.grad runs through the critic)
            self._probe = leaves if inputs is None else leaves + step_leaves(tensors, None)
            self._leaves = leaves
        elif leaves is not None and self._mode(leaves):
            matched = self._match(leaves)
            if self.open:
                # what this step's forward did is this step's, not the one that ends
                watched = self.run.watched
                seen, samples = watched.forward_seen, watched.samples
                self.end(matched)
                watched.forward_seen, watched.samples = seen, samples
            self._leaves = leaves

    def _same_iteration(self) -> bool:
        """An iteration may call ``autograd.grad`` (or ``backward()``) more than once (a
        data term's gradient and a penalty's): a call from a line of the user's code that
        has not called yet in the open step belongs to that step. A call from the line
        that opened the step, or from one that already called in it, begins the next
        step. One frame walk a call, in programs without an optimizer only."""
        site = _call_site()
        if self.open and site is not None and site not in self._sites:
            self._sites.add(site)
            return True
        self._sites = {site} if site is not None else set()
        return False

    def after_backward(self, grads: Any) -> None:
        leaves, self._leaves = self._leaves, None
        if leaves is not None and self._mode(leaves):
            self._open(leaves, grads)

    def _maybe(self) -> bool:
        """Steps may be counted at backward(): no optimizer attached (yet)."""
        if self.run.closed or self.run.locator.replaying:
            return False
        return self.target is not None or not self.steps.targets

    def _mode(self, leaves: list[Tensor]) -> bool:
        """No optimizer holds this step's tensors: the program updates them itself."""
        if not self._maybe():
            return False
        if self.target is not None:
            return len(self.steps.targets) == 1  # until an optimizer is attached after all
        probe, self._probe = self._probe or leaves, []
        return bool(leaves) and not taps.held_by_optimizer(probe, self._grads_before)

    def _step_leaves(self, tensors: Any, inputs: Any) -> list[Tensor]:
        """This step's tensors. NOTE: the autograd graph is walked until three steps in a
        row gave the same tensors (a model updated in place); from then on they are the
        watched ones, so a step costs no walk of a graph that grows with the model."""
        target = self.target
        if target is not None and self._stable >= 3 and inputs is None:
            return [w.param for w in target.params]
        leaves = step_leaves(tensors, inputs)
        prefixes = self.run.watched.prefixes
        if inputs is None and prefixes:  # the watched models' own, also where the graph
            # hides them (a reentrant checkpoint): those that get a gradient count
            owned = [p for root in prefixes for p in objects.parameters(root) if p.requires_grad]
            ids = {id(p) for p in owned}
            leaves = owned + [t for t in leaves if id(t) not in ids]
        if target is not None and inputs is None:
            same = [id(t) for t in leaves] == [id(w.param) for w in target.params]
            self._stable = self._stable + 1 if same else 0
        return leaves

    def _match(self, leaves: list[Tensor]) -> list[tuple[WatchedParam | None, Tensor]]:
        """This step's tensors against the watched ones: the same tensor, else (a program
        that rebinds ``w = w - lr * g`` makes a new one each step) the same name."""
        target = self.target
        by_id = {id(w.param): w for w in target.params} if target is not None else {}
        by_name = {w.name: w for w in target.params} if target is not None else {}
        unnamed = [t for t in leaves if id(t) not in by_id and id(t) not in self._names]
        if unnamed:
            self._names.update(self._names_of(unnamed))
        out: list[tuple[WatchedParam | None, Tensor]] = []
        for t in leaves:
            w = by_id.get(id(t))
            if w is None:
                old = by_name.get(self._names.get(id(t), ""))
                w = old if old is not None and old.param.shape == t.shape else None
            out.append((w, t))
        # only this step's tensors keep their names: ids of freed tensors are reused
        self._names = {id(t): n for t in leaves if (n := self._names.get(id(t)))}
        return out

    def _names_of(self, tensors: list[Tensor]) -> dict[int, str]:
        """Names for new tensors: the module owning them, else the user's variable."""
        watched = self.run.watched
        if self.run.find_owners is not None and not watched.prefixes:
            owners = self.run.find_owners({id(t) for t in tensors})
            if owners:
                watched.watch_modules(watched.roots(owners))
        names = {i: name for i, (name, _, _) in owner_names(watched.prefixes).items()}
        missing = [t for t in tensors if id(t) not in names]
        if missing:
            names |= variable_names(missing)
        return names

    @guarded
    @without_grad
    def _open(self, leaves: list[Tensor], grads: Any) -> None:
        """A direct backward()/autograd.grad returned: step ``k``'s statistics point."""
        run, watched = self.run, self.run.watched
        target = self.target
        if target is None:
            target = self.target = self.steps.add(HandWritten(), [], manual=True)
            self.steps.primary = target.optimizer
        self.steps.counted_by("torch.autograd.grad()" if grads is not None else "backward()")
        params, rows = [], []
        owners: dict[int, tuple[str, str, str]] | None = None
        taken = {w.name for w in target.params}
        for w, t in self._match(leaves):
            if w is None:  # a tensor seen for the first time
                owners = owners if owners is not None else owner_names(watched.prefixes)
                name = self._names.get(id(t)) or fallback_name(watched.next_id, t)
                while name in taken:
                    name += "'"
                _, module, mtype = owners.get(id(t), (name, "", None))
                w = WatchedParam(watched.next_id, t, name, module, 0)  # type: ignore[arg-type]
                rows.append(param_row(w, mtype, 0))
                watched.next_id += 1
                taken.add(name)
            w.param = t  # type: ignore[assignment]
            params.append(w)
        if rows:
            run.put(lambda conn: insert_rows(conn, "layers", rows))
        target.params = params
        target.optimizer.param_groups[0]["params"] = leaves
        if self.steps.device is None and params:
            self.steps.device = params[0].param.device
        target.given = {}
        if grads is not None:  # autograd.grad: the gradients are what it returned
            pairs = zip(params, grads if isinstance(grads, (tuple, list)) else [grads])
            target.given = {w.id: g for w, g in pairs if isinstance(g, Tensor)}
        activations = self.steps.activations
        if not activations.armed and activations.wanted(self.steps.count):
            activations.arm(True)
        self.open = True
        self.steps.statistics(target)

    def end(self, matched: list[tuple[WatchedParam | None, Tensor]] | None) -> None:
        """The step ends: the tensors' change since its statistics point is its update."""
        target = self.target
        self.open = False
        if target is None:
            return
        for w, t in matched or []:
            if w is not None:
                w.param = t  # type: ignore[assignment]  # a rebound tensor's new value
        self.steps.post_step(target.optimizer)
        target.given = {}
