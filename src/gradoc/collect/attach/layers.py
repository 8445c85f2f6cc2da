"""Names and metadata of what a run watches: parameters and module outputs."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch.nn as nn
from torch.optim import Optimizer

from ..._util import objects
from ..._util.objects import IdMap
from ...stats import saturation_rule
from ...stats.activations import SaturationRule

# Not watched by default: pure containers (their output is a child's, recorded already),
# and dropout, whose output is its input with zeros (its zero fraction is just p).
SKIPPED = (
    nn.Sequential,
    nn.ModuleList,
    nn.ModuleDict,
    nn.Identity,
    nn.modules.dropout._DropoutNd,
)


@dataclass(slots=True)
class WatchedParam:
    id: int
    param: nn.Parameter
    name: str
    module: str
    group: int


@dataclass(slots=True)
class WatchedModule:
    id: int
    name: str
    saturation: SaturationRule | None


def assign_prefixes(
    prefixes: IdMap[nn.Module, str], new_roots: Sequence[nn.Module], several: bool = False
) -> None:
    """Give each new root a name prefix, kept for the whole run so names never change.

    A run that watches one model names things exactly as ``model.named_modules()`` does;
    when there are several (or ``several``: other optimizers will bring theirs), each is
    prefixed with the name the program calls it by (``critic.3``, ``generator.0``: the
    attribute or global that holds it, see :func:`program_name`), else its class name,
    with an index where names repeat (``linear0.``, ``linear1.``).
    """
    if not prefixes and len(new_roots) == 1 and not several:
        prefixes[new_roots[0]] = ""
        return
    names = [program_name(r) or type(r).__name__.lower() for r in new_roots]
    taken = set(prefixes.values())
    for root, name in zip(new_roots, names):
        prefix, i = (f"{name}." if names.count(name) == 1 else f"{name}0."), 0
        while prefix in taken:
            i += 1
            prefix = f"{name}{i}."
        prefixes[root] = prefix
        taken.add(prefix)


def program_name(module: nn.Module) -> str | None:
    """The name the program holds ``module`` by: the attribute of the module or object that
    holds it (``self.critic``, ``agent.actor``, a LightningModule's ``generator``), else the
    global (``discriminator = nn.Sequential(...)``); None when it has none of these (a local
    variable, an item of a list). Read once when the module is first watched: the objects
    that refer to it, by ``gc.get_referrers`` (one pass over the tracked objects)."""
    found: dict[int, str] = {}  # preference (0 best) -> name
    for referrer in gc.get_referrers(module):
        # an object's attributes are a dict, or held inline (Python 3.11+: the object)
        holder = referrer if isinstance(referrer, dict) else objects.instance_dict(referrer)
        if not isinstance(holder, dict) or isinstance(referrer, type):
            continue
        for key, value in holder.items():
            if value is not module or not isinstance(key, str):
                continue
            if key.startswith("_") or not key.isidentifier():
                continue
            # a parent module's child or an object's attribute before a module's global
            rank = 2 if "__name__" in holder else 1
            found.setdefault(rank, key)
    return found[min(found)].lower() if found else None


def qualified(prefix: str, name: str) -> str:
    return (prefix + name).rstrip(".") if prefix else name


def owner_names(prefixes: IdMap[nn.Module, str]) -> dict[int, tuple[str, str, str]]:
    """id(parameter) -> (its name, its module's name, the module's type), for the roots."""
    owner: dict[int, tuple[str, str, str]] = {}
    for root, prefix in prefixes.items():
        for mod_name, module in objects.named_modules(root):
            for p_name, p in objects.named_parameters(module, recurse=False):
                owner.setdefault(
                    id(p),
                    (
                        qualified(prefix, f"{mod_name}.{p_name}" if mod_name else p_name),
                        qualified(prefix, mod_name),
                        type(module).__name__,
                    ),
                )
    return owner


def param_row(w: WatchedParam, module_type: str | None, optimizer_index: int) -> tuple[object, ...]:
    """The ``layers`` row of a watched parameter."""
    p = w.param
    shape = json.dumps(list(p.shape))
    return (
        w.id,
        "param",
        w.name,
        w.module,
        module_type,
        shape,
        p.numel(),
        w.group,
        optimizer_index,
    )


def param_rows(
    prefixes: IdMap[nn.Module, str], optimizer: Optimizer, optimizer_index: int, first_id: int
) -> tuple[list[WatchedParam], list[tuple[object, ...]]]:
    """The optimizer's parameters in param-group order, named after the modules owning them."""
    owner = owner_names(prefixes)
    watched: list[WatchedParam] = []
    rows: list[tuple[object, ...]] = []
    seen: set[int] = set()
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            if id(p) in seen:
                continue
            seen.add(id(p))
            name, module, mtype = owner.get(id(p), (f"group{g}.param{i}", "", None))
            w = WatchedParam(first_id + len(watched), p, name, module, g)
            watched.append(w)
            rows.append(param_row(w, mtype, optimizer_index))
    return watched, rows


def module_rows(
    roots: Sequence[nn.Module],
    prefixes: IdMap[nn.Module, str],
    first_id: int,
    include: Callable[[str, nn.Module], bool] | None,
) -> tuple[IdMap[nn.Module, WatchedModule], list[tuple[object, ...]]]:
    """The modules whose outputs are watched: all but containers and dropout, unless
    ``include`` says otherwise."""
    watched: IdMap[nn.Module, WatchedModule] = IdMap()
    rows: list[tuple[object, ...]] = []
    for root in roots:
        for mod_name, module in objects.named_modules(root):
            name = qualified(prefixes[root], mod_name)
            keep = include(name, module) if include else not isinstance(module, SKIPPED)
            if not keep or module in watched:
                continue
            lid = first_id + len(rows)
            watched[module] = WatchedModule(lid, name, saturation_rule(module))
            rows.append((lid, "module", name, name, type(module).__name__, None, None, None, None))
    return watched, rows
