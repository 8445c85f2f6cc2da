"""The program's own measures, read where it logs them: no change to the program.

A loss handed to ``backward()`` is a fair measure of supervised training and no measure of an
agent's or a game's: the episode return, the validation accuracy, a discriminator's accuracy
are what the program itself watches, and it logs them somewhere. While a run is open the
logging calls below are wrapped (``_util.patch``, so a failure of gradoc's never reaches the
program) and each number they carry is appended to the run's ``metrics`` table, under the
name the program gave it, at the step in progress:

==============================  =================================================================
source                          what is read
==============================  =================================================================
``tensorboard``                 ``SummaryWriter.add_scalar`` / ``add_scalars`` (PyTorch's and
                                tensorboardX's)
``lightning``                   ``self.log`` / ``log_dict``, as Lightning hands them to its loggers
``hf``                          the ``Trainer``'s logs (``loss``, ``eval_loss``, ``eval_*``)
``wandb``                       ``wandb.log``
``mlflow``                      ``mlflow.log_metric`` / ``log_metrics``
``sb3``                         stable-baselines3's logger (``rollout/ep_rew_mean``, ...)
``gym``                         a gymnasium environment's rewards and episode ends
                                (``episode/return``, ``episode/length``), for any loop: an
                                environment from ``gymnasium.make``, or one the program makes
                                itself (from its first ``Env.reset``)
==============================  =================================================================

A library is wrapped when the program imports it (a post-import hook: nothing is imported
that the program does not import), and unwrapped when the last run closes. Only numbers
already computed are read: a Python or NumPy number, or a tensor the logging call itself
reads (a CUDA tensor handed to ``add_scalar`` is copied to the host by TensorBoard; gradoc
reads it after that copy). Values logged through a framework (Lightning's TensorBoard logger,
the HF ``Trainer``'s W&B callback) are recorded once, at the framework.

Per logged number the cost is one row handed to the run's writer, which stages and batches
records on the training thread and writes them on its own (``store.writer``).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import math
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

from ..._util.patch import Patch
from ...store import Source
from ...store.writer import Write, insert_rows

MAX_NAMES = 500
"""Distinct metric names recorded at most per run (a program logging per-sample scalars
would otherwise fill the log): later names are counted, not stored."""


class Logged:
    """One run's logged measures, each written to its ``metrics`` table as it comes."""

    def __init__(self, put: Callable[[Write], None], step: Callable[[], int]) -> None:
        """``put``: hands a record to the run's writer; ``step``: the step in progress."""
        self.put, self.step = put, step
        self.names: dict[str, str] = {}
        """Every name recorded, with its source."""
        self.dropped = 0
        self.declared: dict[str, dict[str, str]] = {}
        """A direction the program gave a name (a checkpoint's ``mode``), with where."""

    def add(self, name: str, source: str, value: float, own_step: int | None) -> None:
        if name not in self.names:
            if len(self.names) >= MAX_NAMES:
                self.dropped += 1
                return
            self.names[name] = source
        stored: float | str = value if not math.isnan(value) else "NaN"
        row = (name, source, self.step(), own_step, stored)
        self.put(lambda conn: insert_rows(conn, "metrics", [row]))  # staged and batched there

    def meta(self) -> dict[str, Any]:
        """What the run's ``meta`` says of them at its end."""
        out: dict[str, Any] = {"sources": dict(self.names)}
        if self.declared:
            out["declared"] = dict(self.declared)
        if self.dropped:
            out["dropped"] = self.dropped
        return out


_open: list[Logged] = []
_lock = threading.RLock()
_inside = threading.local()
"""How deep this thread is in a framework's logging call (its lower-level writes are its)."""


def open_for(put: Callable[[Write], None], step: Callable[[], int]) -> Logged:
    """Start reading the program's logged measures for a run (see :class:`Logged`)."""
    logged = Logged(put, step)
    with _lock:
        _open.append(logged)
        _install()
    return logged


def close(logged: Logged) -> dict[str, Any]:
    """Stop reading for ``logged``'s run; what the run's ``meta`` says of its measures
    (:meth:`Logged.meta`)."""
    with _lock:
        if logged in _open:
            _open.remove(logged)
        if not _open:
            _uninstall()
    return logged.meta()


def record(name: str, source: str, value: Any, own_step: Any = None) -> None:
    """Append ``value`` (a number already on the host) under ``name`` to every open run."""
    number = _number(value)
    if number is None or not _open:
        return
    step = own_step if isinstance(own_step, int) and not isinstance(own_step, bool) else None
    for logged in list(_open):
        logged.add(str(name), source, number, step)


def declare(name: str, direction: str, said: str) -> None:
    """The program says ``name`` is better ``up`` or ``down`` (``said``: where)."""
    for logged in list(_open):
        logged.declared.setdefault(name, {"direction": direction, "from": said})


def record_all(items: Iterable[tuple[str, Any]], source: str, own_step: Any = None) -> None:
    for name, value in items:
        record(name, source, value, own_step)


def _number(value: Any) -> float | None:
    """``value`` as a float where it is a number on the host: Python, NumPy, or a tensor of
    one element already in host memory. Anything else (an image, a histogram, text, a tensor
    on a device) is not read."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    kind = type(value).__module__
    if kind == "numpy" and getattr(value, "size", 0) == 1:
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    if (
        kind == "torch"
        and hasattr(value, "device")
        and value.device.type == "cpu"
        and value.numel() == 1
        and not value.is_complex()
    ):
        from .taps import raw_item  # the program's own reads are tapped; this is not one

        return float(raw_item(value.detach()))
    return None


class _Framework:
    """A framework's logging call: the writes it makes through lower-level loggers (its
    TensorBoard logger's ``add_scalar``) are its own and not recorded again."""

    def __enter__(self) -> None:
        _inside.depth = getattr(_inside, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _inside.depth -= 1


def _under_framework() -> bool:
    return getattr(_inside, "depth", 0) > 0


# -- the libraries --------------------------------------------------------------------------
def _tensorboard(module: ModuleType) -> list[Patch]:
    writer = getattr(module, "SummaryWriter", None)
    if writer is None:
        return []

    def add_scalar(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(
            self: Any, tag: str, scalar_value: Any, global_step: Any = None, *a: Any, **k: Any
        ) -> Any:
            result = call(self, tag, scalar_value, global_step, *a, **k)
            if not _under_framework():
                record(tag, Source.TENSORBOARD, _host(scalar_value), global_step)
            return result

        return wrapper

    def add_scalars(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(
            self: Any, main_tag: str, values: Any, global_step: Any = None, *a: Any, **k: Any
        ) -> Any:
            result = call(self, main_tag, values, global_step, *a, **k)
            if not _under_framework() and isinstance(values, dict):
                for tag, v in values.items():
                    record(f"{main_tag}/{tag}", Source.TENSORBOARD, _host(v), global_step)
            return result

        return wrapper

    return [Patch(writer, "add_scalar", add_scalar), Patch(writer, "add_scalars", add_scalars)]


def _host(value: Any) -> Any:
    """A tensor that a logging call has just copied to the host, read from its host copy:
    TensorBoard reads ``scalar_value`` itself (``make_np``); a second read of the same
    finished value waits on nothing."""
    if type(value).__module__ == "torch" and hasattr(value, "device") and value.numel() == 1:
        return value.detach().to("cpu")
    return value


def _lightning(module: ModuleType) -> list[Patch]:
    connector = getattr(module, "_LoggerConnector", None)
    if connector is None:
        return []
    held: list[Any] = []

    def log_metrics(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, metrics: Any, step: Any = None) -> Any:
            _monitored(getattr(self, "trainer", None))
            held.append(None)
            try:
                with _Framework():
                    return call(self, metrics, step)
            finally:
                held.pop()

        return wrapper

    def convert(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(data: Any) -> Any:
            scalars = call(data)
            if held and isinstance(scalars, dict):
                record_all(((k, v) for k, v in scalars.items() if k != "step"), Source.LIGHTNING)
            return scalars

        return wrapper

    patches = [Patch(connector, "log_metrics", log_metrics)]
    if hasattr(module, "convert_tensors_to_scalars"):
        patches.append(Patch(module, "convert_tensors_to_scalars", convert))
    return patches


def _monitored(trainer: Any) -> None:
    """The directions a Lightning trainer's checkpoint and early-stopping callbacks give
    the measures they monitor (``mode='min'`` / ``'max'``)."""
    for cb in getattr(trainer, "callbacks", None) or []:
        monitor, mode = getattr(cb, "monitor", None), getattr(cb, "mode", None)
        if isinstance(monitor, str) and mode in ("min", "max"):
            way = "down" if mode == "min" else "up"
            declare(monitor, way, f"{type(cb).__name__}(monitor={monitor!r}, mode={mode!r})")


def _best_model(args: Any) -> None:
    """The direction the Hugging Face ``TrainingArguments`` give their best model's metric."""
    metric, greater = (
        getattr(args, "metric_for_best_model", None),
        getattr(args, "greater_is_better", None),
    )
    if isinstance(metric, str) and isinstance(greater, bool):
        name = metric if metric.startswith("eval_") else f"eval_{metric}"
        said = f"metric_for_best_model={metric!r}, greater_is_better={greater}"
        declare(name, "up" if greater else "down", said)


def _hf(module: ModuleType) -> list[Patch]:
    trainer = getattr(module, "Trainer", None)
    if trainer is None:
        return []

    def log(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, logs: Any, *a: Any, **k: Any) -> Any:
            if isinstance(logs, dict):
                _best_model(getattr(self, "args", None))
                state = getattr(self, "state", None)
                own = getattr(state, "global_step", None)
                record_all(logs.items(), Source.HF, own)
            with _Framework():
                return call(self, logs, *a, **k)

        return wrapper

    return [Patch(trainer, "log", log)]


def _wandb(module: ModuleType) -> list[Patch]:
    run = getattr(module, "Run", None)
    if run is None:
        return []

    def log(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, data: Any = None, step: Any = None, *a: Any, **k: Any) -> Any:
            if not _under_framework() and isinstance(data, dict):
                record_all(_flat(data), Source.WANDB, step)
            return call(self, data, step, *a, **k)

        return wrapper

    return [Patch(run, "log", log)]


def _flat(data: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for k, v in data.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


def _mlflow(module: ModuleType) -> list[Patch]:
    def log_metric(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(key: str, value: Any, step: Any = None, *a: Any, **k: Any) -> Any:
            if not _under_framework():
                record(key, Source.MLFLOW, value, step)
            return call(key, value, step, *a, **k)

        return wrapper

    def log_metrics(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(metrics: Any, step: Any = None, *a: Any, **k: Any) -> Any:
            if not _under_framework() and isinstance(metrics, dict):
                record_all(metrics.items(), Source.MLFLOW, step)
            return call(metrics, step, *a, **k)

        return wrapper

    return [
        Patch(module, name, make)
        for name, make in (("log_metric", log_metric), ("log_metrics", log_metrics))
        if callable(getattr(module, name, None))
    ]


def _sb3(module: ModuleType) -> list[Patch]:
    logger = getattr(module, "Logger", None)
    if logger is None:
        return []

    def dump(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, step: Any = 0, *a: Any, **k: Any) -> Any:
            values = getattr(self, "name_to_value", None)
            if isinstance(values, dict):
                record_all(list(values.items()), Source.SB3, step)
            with _Framework():
                return call(self, step, *a, **k)

        return wrapper

    return [Patch(logger, "dump", dump)]


# -- a gymnasium environment's episodes --------------------------------------------------------
class _Episodes:
    """The return and length of each watched environment's episode under way."""

    def __init__(self) -> None:
        self.of: weakref.WeakKeyDictionary[Any, list[float]] = weakref.WeakKeyDictionary()
        self.inner: weakref.WeakSet[Any] = weakref.WeakSet()
        """The environments inside a watched ``make``'s wrappers: their episodes are the
        outer one's (its time limit ends them)."""
        self.classes: dict[type, Patch] = {}

    def made(self, env: Any) -> None:
        """``gymnasium.make`` returned ``env``: its outermost wrapper is watched."""
        with contextlib.suppress(TypeError, AttributeError):
            self.inner.add(env.unwrapped)
        self.watch(env)

    def reset(self, env: Any) -> None:
        """An environment the program made itself (no ``make``) reset through
        ``gymnasium.Env.reset``: watched from its first reset."""
        with contextlib.suppress(TypeError):
            if env in self.of or env in self.inner:
                return
        self.watch(env)

    def watch(self, env: Any) -> None:
        try:
            self.of[env] = [0.0, 0]
        except TypeError:
            return  # not weakly referable: not watched
        cls = type(env)
        if cls not in self.classes and callable(getattr(cls, "step", None)):
            patch = Patch(cls, "step", self._step)
            self.classes[cls] = patch
            patch.install()

    def _step(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(env: Any, *a: Any, **k: Any) -> Any:
            result = call(env, *a, **k)
            held = self.of.get(env)
            if held is not None and isinstance(result, tuple) and len(result) == 5:
                reward, terminated, truncated = result[1], result[2], result[3]
                if isinstance(reward, int | float):
                    held[0] += reward
                    held[1] += 1
                    if terminated is True or truncated is True:
                        record("episode/return", Source.GYM, held[0])
                        record("episode/length", Source.GYM, held[1])
                        held[0], held[1] = 0.0, 0
            return result

        return wrapper

    def remove(self) -> None:
        for patch in self.classes.values():
            patch.remove()
        self.classes.clear()
        self.of = weakref.WeakKeyDictionary()
        self.inner = weakref.WeakSet()


_episodes = _Episodes()


def _gymnasium(module: ModuleType) -> list[Patch]:
    def make(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            env = call(*a, **k)
            if _open:
                _episodes.made(env)
            return env

        return wrapper

    def reset(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(env: Any, *a: Any, **k: Any) -> Any:
            if _open:
                _episodes.reset(env)
            return call(env, *a, **k)

        return wrapper

    owners = [module, sys.modules.get("gymnasium.envs.registration")]
    made = [
        Patch(o, "make", make)
        for o in owners
        if o is not None and callable(getattr(o, "make", None))
    ]
    base = getattr(module, "Env", None)
    return made + ([Patch(base, "reset", reset)] if isinstance(base, type) else [])


LIBRARIES: dict[str, Callable[[ModuleType], list[Patch]]] = {
    "torch.utils.tensorboard.writer": _tensorboard,
    "tensorboardX.writer": _tensorboard,
    "lightning.pytorch.trainer.connectors.logger_connector.logger_connector": _lightning,
    "pytorch_lightning.trainer.connectors.logger_connector.logger_connector": _lightning,
    "transformers.trainer": _hf,
    "wandb.sdk.wandb_run": _wandb,
    "mlflow": _mlflow,
    "stable_baselines3.common.logger": _sb3,
    "gymnasium": _gymnasium,
}
"""The modules whose logging calls are read: wrapped when the program imports them."""

_patches: dict[str, list[Patch]] = {}


def _patch(name: str, module: ModuleType) -> None:
    if name in _patches or not _open:
        return
    try:
        patches = LIBRARIES[name](module)
    except Exception:  # a library version gradoc does not know: not read
        patches = []
    for p in patches:
        p.install()
    _patches[name] = patches


def _install() -> None:
    for name, module in list(sys.modules.items()):
        if name in LIBRARIES and module is not None:
            _patch(name, module)
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


def _uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterImport)]
    for patches in _patches.values():
        for p in patches:
            p.remove()
    _patches.clear()
    _episodes.remove()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls :func:`_patch` once a module of :data:`LIBRARIES` has been imported: the spec
    the other finders give is handed back with its loader's ``exec_module`` followed by the
    patch (the module, its spec and its loader are otherwise theirs)."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in LIBRARIES or name in self._busy:
            return None
        self._busy.add(name)
        try:
            spec = next(
                (
                    s
                    for f in sys.meta_path
                    if f is not self
                    and hasattr(f, "find_spec")
                    and (s := f.find_spec(name, path, target)) is not None
                ),
                None,
            )
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Then(spec.loader, name)
        return spec


class _Then(importlib.abc.Loader):
    """A loader that runs another's ``exec_module``, then patches the module it made."""

    def __init__(self, loader: Any, name: str) -> None:
        self.loader, self.name = loader, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        with _lock:
            _patch(self.name, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
