"""``gradoc amp-compare SCRIPT --steps N``: the script's first N steps in fp32 and under
autocast applied by gradoc, side by side.

Each run is a fresh subprocess (``python -m gradoc.tools.amp_compare --worker ...``) with
every RNG seeded the same way (as ``gradoc run`` does), so the two differ only by
precision. In the autocast run gradoc enters ``torch.autocast`` around each outermost
module call (the model's forward; the loss and backward stay in fp32, as PyTorch
recommends) — bf16 on the CPU, fp16 on CUDA — and, for fp16, does what
``torch.amp.GradScaler`` does without a change to the script: the loss is multiplied by
the scale at ``backward()``, gradients are unscaled at the optimizer step, a step with an
inf/NaN gradient is skipped and the scale halved, and the scale doubles after
``growth_interval`` clean steps (GradScaler's defaults: 2^16, 0.5, 2, 2000).

Reported: the loss of every step in both runs and their relative difference; per layer,
the relative error of the first step's gradient (same weights, same batch:
``|g_amp - g_fp32| / |g_fp32|``) and the first layer, in network order, beyond the
tolerance; GradScaler's skipped steps and scale history; the median step time and peak
memory of both (CUDA: ``max_memory_allocated``; CPU: the process's peak RSS).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..report.results import AmpComparison, LayerError, Precision

SCALE_INIT, BACKOFF, GROWTH, GROWTH_INTERVAL = 2.0**16, 0.5, 2.0, 2000


def _worker(ns: argparse.Namespace) -> int:
    import torch
    import torch.nn as nn

    from .._util import entry, objects
    from ..collect.attach import ModelFinder, taps
    from ..errors import GradocError
    from ..runtime.replay import seed_everything
    from ..runtime.runner import Stop, check_script, run_until

    script = check_script(ns.script)
    amp = ns.mode == "amp"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[ns.dtype]
    state: dict[str, Any] = {
        "depth": 0,
        "ctx": None,
        "scale": SCALE_INIT,
        "clean": 0,
        "steps": 0,
        "device": None,
    }
    rec: dict[str, Any] = {"loss": [], "scale": [], "skipped": [], "step_s": [], "grads0": None}
    scaling = amp and ns.dtype == "fp16"

    def pre(m: nn.Module, a: Any) -> None:
        if state["depth"] == 0 and amp and torch.is_grad_enabled():
            p = next(iter(objects.parameters(m)), None)
            device = p.device.type if p is not None else "cpu"
            state["device"] = state["device"] or device
            state["ctx"] = torch.autocast(device, dtype=dtype)
            state["ctx"].__enter__()
        state["depth"] += 1

    def post(m: nn.Module, a: Any, out: Any) -> None:
        state["depth"] -= 1
        if state["depth"] == 0 and state["ctx"] is not None:
            state["ctx"].__exit__(None, None, None)
            state["ctx"] = None

    class Losses(taps.TapReceiver):  # every scalar loss handed to backward()
        def on_backward(
            self, tensors: Any, inputs: Any = None, direct: bool = True, gradients: Any = None
        ) -> None:
            loss = taps.scalar_loss(tensors)
            if loss is not None:
                rec["loss"].append(float(loss.float()))

    def scaled(loss: torch.Tensor) -> torch.Tensor:
        return loss.float() * state["scale"] if scaling else loss

    def step_pre(opt: torch.optim.Optimizer, a: Any, kw: Any) -> None:
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        grads = [p.grad for p in params]
        if scaling and grads:
            torch._foreach_mul_(grads, 1.0 / state["scale"])
            finite = all(bool(torch.isfinite(g).all()) for g in grads)
            rec["scale"].append(state["scale"])
            if not finite:
                rec["skipped"].append(state["steps"])
                state["scale"] *= BACKOFF
                state["clean"] = 0
                for p in params:
                    p.grad = None  # GradScaler does not call step(); no grad, no update
            else:
                state["clean"] += 1
                if state["clean"] >= GROWTH_INTERVAL:
                    state["scale"] *= GROWTH
                    state["clean"] = 0
        if state["steps"] == 0:
            rec["grads0"] = {
                str(i): p.grad.detach().float().cpu()
                for i, p in enumerate(params)
                if p.grad is not None
            }
            named = {
                id(p): n for r in models.trained_by(opt) for n, p in objects.named_parameters(r)
            }
            rec["names"] = [named.get(id(p), f"param {i}") for i, p in enumerate(params)]

    def step_post(opt: torch.optim.Optimizer, a: Any, kw: Any) -> None:
        now = time.perf_counter()
        if "t" in state:
            rec["step_s"].append(now - state["t"])
        state["t"] = now
        state["steps"] += 1
        if state["steps"] >= ns.steps:
            raise Stop(None)

    handles = [
        entry.every_forward_pre_hook(pre),
        entry.every_forward_hook(post, always_call=True),
        entry.every_step_pre_hook(step_pre),
        entry.every_step_post_hook(step_post),
    ]
    sink = Losses()
    models = ModelFinder()  # which model the step trains: its parameters' names
    taps.add_receiver(sink)
    seed_everything()
    try:
        with taps.scaling_losses(scaled):
            run_until(script, list(ns.args))
    finally:
        taps.remove_receiver(sink)
        models.remove()
        for h in handles:
            h.remove()
    if entry.failures():  # a measurement whose hooks failed is no measurement
        raise GradocError(
            "amp-compare could not measure this script: an internal error of gradoc's"
        )
    cuda = state["device"] == "cuda"
    peak = (
        torch.cuda.max_memory_allocated()
        if cuda
        else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    )
    torch.save(rec.pop("grads0"), ns.grads)
    rec.update(steps=state["steps"], peak_bytes=peak, peak_kind="cuda" if cuda else "rss")
    Path(ns.result).write_text(json.dumps(rec))
    return 0


def compare(
    script: Path,
    args: list[str],
    steps: int,
    dtype: str,
    tolerance: float = 0.05,
    timeout: float = 600,
) -> AmpComparison:
    """Run both and compare (see the module docstring); raises GradocError when a run fails."""
    import torch

    from .._util.text import one_line
    from ..errors import GradocError

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("fp32", "amp"):
            result, grads = Path(tmp) / f"{mode}.json", Path(tmp) / f"{mode}.pt"
            cmd = [
                sys.executable,
                "-m",
                "gradoc.tools.amp_compare",
                "--worker",
                "--mode",
                mode,
                "--dtype",
                dtype,
                "--steps",
                str(steps),
                "--result",
                str(result),
                "--grads",
                str(grads),
                str(script),
                *args,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0 or not result.exists():
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise GradocError(
                    f"the {mode} run of {one_line(script)} failed: {one_line(tail[0])}"
                )
            out[mode] = json.loads(result.read_text())
            out[mode]["grads0"] = torch.load(grads)
    a, b = out["fp32"], out["amp"]
    if not a["steps"] or a["grads0"] is None:
        raise GradocError(
            f"{one_line(script)} took no torch.optim optimizer step: amp-compare compares a "
            "script's first optimizer steps, so there is nothing to compare"
        )
    n = min(len(a["loss"]), len(b["loss"]))
    loss_rel = [abs(b["loss"][i] - a["loss"][i]) / (abs(a["loss"][i]) or 1.0) for i in range(n)]
    layers = []
    names = a.get("names", [])
    for key, g32 in a["grads0"].items():
        gam = b["grads0"].get(key)
        if gam is None:
            continue
        denom = float(g32.norm()) or 1.0
        err = float((gam - g32).norm()) / denom
        layers.append(LayerError(names[int(key)] if int(key) < len(names) else key, err))
    beyond = next((x.layer for x in layers if not err_ok(x.rel_error, tolerance)), None)

    def median(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    fp16 = dtype == "fp16"
    return AmpComparison(
        dtype=dtype,
        steps=n,
        tolerance=tolerance,
        fp32=Precision(a["loss"][:n], median(a["step_s"]), a["peak_bytes"]),
        amp=Precision(b["loss"][:n], median(b["step_s"]), b["peak_bytes"]),
        loss_rel_diff=loss_rel,
        layers=layers,
        first_layer_beyond_tolerance=beyond,
        peak_kind=a["peak_kind"],
        scaler_skipped=b["skipped"] if fp16 else None,
        scale_history=b["scale"] if fp16 else None,
    )


def err_ok(err: float, tolerance: float) -> bool:
    return math.isfinite(err) and err <= tolerance


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gradoc.tools.amp_compare")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode", choices=["fp32", "amp"])
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--result")
    ap.add_argument("--grads")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    from ..errors import GradocError

    try:
        return _worker(ns)
    except GradocError as exc:  # the script's own error: its traceback is printed already
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
