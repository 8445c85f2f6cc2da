"""How a step's loss is read: the scalar losses handed to ``backward()`` (through a
GradScaler's scaling), how the run log is told they were read, and the losses the program
read or its model returned that never reached ``backward()`` (see ``losses``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..._util.json_types import JsonObject
from ...locate.origin import user_line, user_line_holding
from .._safety import guarded, others_open
from ..attach import taps
from ..graph import AttentionReader, PolicyReader, losses, mechanics

if TYPE_CHECKING:
    from ..context import Internal
    from ..probes import WatchedOptimizer
    from .objectives import Objectives, Stepping


UNREAD_NO_BACKWARD = (
    "no backward() or torch.autograd.grad() call in the step: its gradients came another way "
    "(torch.func, a hand-written backward)"
)
UNREAD_HANDED = "backward() was handed no floating-point loss gradoc could read"
UNREAD_OTHERS = "its backward() calls belonged to another gradoc run open in the process"
RETURNED = "returned by the model's forward()"


class LossReader:
    """The losses of the open step, and what the run log says of how they are read."""

    def __init__(self, run: Internal) -> None:
        self.run = run
        self.micros: list[losses.Micro] = []
        """The step's losses, one per ``backward()`` of a scalar (micro-batches)."""
        self.backward_calls = 0
        """The step's ``backward()`` calls that belong to this run."""
        self.closure_open = False
        """A closure (LBFGS) was called within the step: its next losses are not the step's."""
        self.unbacked = losses.Unbacked()
        """Losses the program read or its model returned, until a ``backward()`` shows
        whether they were backpropagated."""
        self._fn_seen = False
        self._said: JsonObject = {}
        """How the loss is read (``meta['loss_read']``), said once it is known."""
        self._scaled: dict[int, tuple[Any, Tensor]] = {}
        """Losses a GradScaler scaled, by the scaled tensor's node (see ``losses.read``)."""
        self.policy = PolicyReader()
        self.facts: mechanics.Facts | None = None
        """What the step's losses show of its kind of training (``collect.graph.mechanics``), read
        until each objective's first step was (``_facts_done``), ``mechanics.READS_AT_MOST``
        losses at most: no step after pays for the walk."""
        self._facts_read = 0
        self._facts_done = False
        self.penalties = mechanics.Penalties()
        self.entropies: list[tuple[int, int, Tensor]] = []
        """(step, objective id, entropy on the device) of the policies read, waiting for the
        next transfer (``collect.graph.policy``)."""
        self.sharpness = AttentionReader()
        self.attention: list[tuple[int, int, Tensor]] = []
        """(step, site, (2, heads) on the device) of the attention calls read, waiting for
        the next transfer (``collect.graph.attention``)."""
        self.outputs: list[tuple[int, int, Tensor]] = []
        """(step, site, (3,) on the device) of the output logits read, waiting for the next
        transfer (``collect.graph.output_logits``)."""
        self._names: dict[int, str] = {}
        self._told: dict[str, JsonObject] = {}
        self.others = self.left = 0
        """The step's ``backward()`` calls left to another open run (``Steps.on_backward``);
        ``left``: the ended step's (:meth:`take`)."""
        self.unread: dict[str, int] = {}
        """Why the primary optimizer's steps had no loss read: the reason, how many steps."""

    def elsewhere(self) -> bool:
        """A ``backward()`` to leave to another run. With several runs open, a run takes only
        losses computed after its own model ran (a run attached later by ``gradoc run`` takes
        everything until it knows its model); alone, it takes every loss, whatever method of
        the model made it (a CRF's ``neg_log_likelihood`` beside a ``forward()`` that decodes)."""
        watched = self.run.watched
        if watched.prefixes and not watched.forward_seen and others_open(self.run):
            self.others += 1
            return True
        return False

    def read(self, root: Tensor, joined: bool = False, value: Tensor | None = None) -> None:
        """A scalar loss handed to ``backward()``: the step's. ``joined``: another term of
        the same iteration (a penalty's ``autograd.grad`` after the data term's), added to
        the step's loss rather than averaged with it as a micro-batch is. ``value``: the loss
        a non-scalar ``root`` stands for (``root.backward(g)``: ``(root * g).sum()``)."""
        micro = losses.read(root, self._scaled, value)
        micro.entropy = self.policy.read(root.grad_fn)
        if not self._facts_done and self._facts_read < mechanics.READS_AT_MOST:
            self._facts_read += 1
            self.facts = self.facts or mechanics.Facts()
            mechanics.reads(root.grad_fn, self.facts)
        self._read_attention(root)
        if micro.entropy is not None and "policy" not in self._said:
            self.say(None, policy={"actions": self.policy.actions, "entropy": "share of ln(k)"})
        if joined and self.micros:
            last = self.micros[-1]
            last.value = last.value + micro.value.to(last.value.dtype)  # on the device
            last.host = None
            last.entropy = micro.entropy if last.entropy is None else last.entropy
            return
        self.micros.append(micro)
        if not self._fn_seen:  # what the loss is says what its chance level is
            self._fn_seen = True
            self.say(micro, kind={**losses.kind(micro.node), **_backward_at(root)})

    def read_handed(self, tensors: Any, gradients: Any, joined: bool) -> None:
        """What a ``backward()`` of no one scalar loss computes the gradient of
        (``taps.handed``): each a loss of the step, the first as :meth:`read` would take it,
        the others added to it."""
        for i, (t, value) in enumerate(taps.handed(tensors, gradients)):
            self.read(t, joined=joined or i > 0, value=value)

    def say(self, micro: losses.Micro | None, **facts: Any) -> None:
        """Tell the run log how the loss is read (once, and when something new is known)."""
        read = dict(self._said)
        if micro is not None:
            read["from"] = "backward()"
            if micro.scaled:
                read["unscaled"] = "GradScaler"
        read |= facts
        if read != self._said:
            self._said = read
            kind = read.get("kind") or {}
            self.run.set_meta(loss_read=read, loss_fn=kind)

    def returned(self, output: Any, step: int) -> None:
        """A watched model returned: a loss it computed (nanoGPT's ``logits, loss``, a
        Hugging Face ``ModelOutput.loss``) is the step's, backpropagated or not."""
        loss = losses.returned_loss(output)
        if loss is not None:
            self.unbacked.add(loss, None, RETURNED, step)

    def backward(self, root: Any) -> None:
        """A ``backward()`` from ``root``: what the program read before it was backpropagated
        or not; a loss the model's forward returned, once backpropagated, is said to be how
        the loss is made (not a decode's score that ``forward()`` returned once, beside a
        loss another method made: the BiLSTM-CRF's ``neg_log_likelihood``)."""
        reached = self.unbacked.backward(root)
        if "returned" not in self._said and any(s.how == RETURNED for s in reached):
            self.say(None, returned="by the model's forward()")

    def scaled(self, loss: Tensor, scaled: Tensor) -> None:
        if scaled.grad_fn is not None:
            if len(self._scaled) > 16:  # scaled and never backpropagated: not kept for long
                self._scaled.clear()
            self._scaled[id(scaled.grad_fn)] = (scaled.grad_fn, loss)

    def credit(
        self, micros: list[losses.Micro], objectives: Objectives, optimizer: Any, step: int
    ) -> None:
        """The ``micros`` trained ``optimizer``'s objective at ``step``: their policy entropies
        (their mean) wait for the next transfer; a loss shared by two optimizers is counted
        once. A run with no policy returns at once."""
        if self.policy.actions is None:
            return
        read = [m.entropy for m in micros if m.entropy is not None]
        for m in micros:
            m.entropy = None
        if read:
            entropy = read[0] if len(read) == 1 else torch.stack(read).mean()
            self.entropies.append((step, objectives.id_of(optimizer), entropy))

    def _read_attention(self, root: Tensor) -> None:
        """This ``backward()``'s attention and output logits, when they are read
        (``collect.graph.attention``, ``collect.graph.output_logits``)."""
        reader, step = self.sharpness, self.run.steps.count
        if not reader.due(step):
            return
        if not self._names:  # the parameters' names, once the optimizers are known
            targets = self.run.steps.targets.values()
            self._names = {id(w.param): w.name for t in targets for w in t.params}
        read = reader.read(root.grad_fn, self._names)
        if reader.output is not None and reader.outputs is not None:
            self.outputs += [(step, site, v) for site, v in enumerate(reader.output)]
            self._tell("output_logits", layers=reader.outputs, dtypes=reader.dtypes)
        if read is not None and reader.layers is not None:
            self.attention += [(step, site, v) for site, v in enumerate(read)]
            self._tell("attention", layers=reader.layers)

    def _tell(self, key: str, **said: Any) -> None:
        """``meta[key]``: what the graph reads found and when they are read, written when it
        changes (the layers named once the parameters are known, the cadence once chosen)."""
        said["read"] = self.sharpness.said
        if said != self._told.get(key):
            self._told[key] = said
            self.run.set_meta(**{key: said})

    def take_attention(self) -> list[tuple[int, int, Tensor]]:
        taken, self.attention = self.attention, []
        return taken

    def take_outputs(self) -> list[tuple[int, int, Tensor]]:
        taken, self.outputs = self.outputs, []
        return taken

    def take_entropies(self) -> list[tuple[int, int, Tensor]]:
        taken, self.entropies = self.entropies, []
        return taken

    def step_ended(
        self, target: WatchedOptimizer, micros: list[losses.Micro], steps: Stepping
    ) -> list[losses.Micro]:
        """``target``'s optimizer stepped after ``micros``: the losses it trains (with
        several optimizers, ``objectives`` says whose they were); the run log hears what its
        losses showed (``collect.graph.mechanics``) and of a gradient penalty of the step that no
        ``backward()`` reached (``meta['penalties']``)."""
        facts, self.facts = self.facts, None
        objectives = steps.objectives
        if steps.several:
            micros = objectives.credit(target, micros, steps, facts)
            # read on until every optimizer stepped with a loss of its own (a generator
            # trained after a hundred critic iterations)
            made = max(len(steps.targets), len(taps.live_optimizers()))
            self._facts_done = not objectives.unseen(made)
        elif facts is not None:
            self._facts_done = True  # one objective: what its first step showed, once
            said = facts.to_json()
            if said:
                self.say(None, kind=dict(self._said.get("kind") or {}) | said)
        if self.penalties.open:
            told = self.penalties.step_ended(objectives.id_of(target.optimizer))
            if told is not None:
                self.run.set_meta(penalties=told)
        return micros

    def graph_gradients(self, grads: Any) -> None:
        """``autograd.grad`` returned ``grads`` (None from a ``backward()``: nothing to do,
        at no cost): those made with ``create_graph=True``, to differentiate again (a
        gradient penalty), are watched while wanted (``mechanics.Penalties``)."""
        if grads is not None and self.penalties.wanted():
            self._graph_gradients(grads)

    @guarded
    def _graph_gradients(self, grads: Any) -> None:
        if self.run.closed:
            return
        tensors = grads if isinstance(grads, (tuple, list)) else (grads,)
        if any(getattr(t, "requires_grad", False) for t in tensors):
            self.penalties.watch(tensors, user_line() if not self.penalties.open else None)

    def take(self) -> list[losses.Micro]:
        """The ended step's losses; the next step starts with none."""
        micros = self.micros
        self.micros, self.backward_calls, self.closure_open = [], 0, False
        self.left, self.others = self.others, 0
        return micros

    def missed(self, calls: int) -> tuple[None, None]:
        """A step of the primary optimizer ended with no loss read: why, counted (``calls``:
        its ``backward()`` calls that were this run's); no loss for its row."""
        if self.left:
            why = UNREAD_OTHERS
        elif calls:
            why = UNREAD_HANDED
        else:
            why = UNREAD_NO_BACKWARD
        self.unread[why] = self.unread.get(why, 0) + 1
        return None, None

    def unread_meta(self) -> JsonObject:
        """``meta['loss_unread']``: the steps with no loss read, by reason (none: ``{}``)."""
        return {"loss_unread": dict(self.unread)} if self.unread else {}

    def close(self, step: int) -> None:
        """The run ends: a loss backpropagated in a step that never ended is kept as one that
        never became a step's loss."""
        self.unbacked.close()
        for m in self.micros:
            how = "backpropagated; the step never ended"
            seen = losses.Seen(m.node, m.value, how, step, backpropagated=True)
            self.unbacked.unused.append(seen)
        self.micros = []


def _backward_at(loss: Tensor) -> JsonObject:
    """``{"at": ...}``: the user's line that called ``backward()`` on the loss, and the variable
    holding the loss there (``loss``: where ``gradoc fix`` reads how it was computed); read
    once, from the caller's frame."""
    at = user_line_holding("loss", lambda v: v is loss)
    return {"at": at} if at is not None else {}
