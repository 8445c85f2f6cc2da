"""The cost of watching fast steps, as users run it: ``python train.py`` against
``gradoc.watch`` in the script and ``gradoc run train.py``, each a whole process.

Models (``--models``):

- ``mlp``          a 3-layer MLP (32 -> 64 -> 64 -> 1), Adam, batch 64: ~0.5 ms steps
- ``tensors100``   100 parameter tensors of ~8 values (50 tiny Linear layers), SGD
- ``tensors2000``  2,000 parameter tensors (the width benchmark's chain, ~400k values), SGD
- ``transformer``  the reference workload of ``overhead.py`` (6-layer encoder, AdamW)

Each variant runs as its own process, the variants interleaved over ``--rounds`` rounds in
a shuffled order, one torch thread each (``OMP_NUM_THREADS=1``). Two ratios to plain:

- ``loop``: the training loop's time, measured by the script around its loop (what each
  step costs: the hooks, the statistics, the writer thread beside it);
- ``process``: the whole process's wall time (imports, start-up, the loop, the close that
  writes the report), what a user waits for.

The table shows the median over rounds (the first round warms the disk cache and is
dropped) and the added milliseconds per step.

    python benchmarks/tiny.py                        # every model
    python benchmarks/tiny.py --models mlp --steps 6000
    python benchmarks/tiny.py --quick                # a smoke run
    python benchmarks/tiny.py --parts --models mlp   # the cost of a step, part by part
    python benchmarks/tiny.py --inside               # the time inside gradoc's hook points
    python benchmarks/tiny.py --cycle --models mlp   # where in a cycle of 50 steps it lands
    python benchmarks/tiny.py --cycle --flush 60     # ... each kind of step apart
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPT = """
import os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
MODEL, STEPS = {model!r}, {steps}
if MODEL == "mlp":
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    batches = lambda step: (x, y)
    loss_fn = F.mse_loss
elif MODEL.startswith("tensors"):
    sys.path.insert(0, {bench!r})
    from width import chain
    n = int(MODEL[len("tensors"):])
    model, width = chain(n, 400_000 if n >= 1000 else 4 * n)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(16, width)
    batches = lambda step: (x, x)
    loss_fn = F.mse_loss
else:
    sys.path.insert(0, {bench!r})
    from overhead import Classifier
    model = Classifier(8000, 256, 4, 6)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randint(0, 8000, (16, 64), generator=g),
             torch.randint(0, 2, (16,), generator=g)) for _ in range(10)]
    batches = lambda step: data[step % 10]
    loss_fn = F.cross_entropy
run = None
PART = os.environ.get("TINY_PART")
if os.environ.get("TINY_WATCH"):
    import gradoc
    never = dict(params=gradoc.never(), activations=gradoc.never())
    kw = never if PART == "unsampled" else {{}}
    if PART == "inside":  # the writer thread's CPU time, around each record it applies
        from gradoc.store.writer import RunWriter
        thread_s = [0.0]
        def on_thread(f):
            def timed(*a):
                t = time.thread_time()
                try:
                    return f(*a)
                finally:
                    thread_s[0] += time.thread_time() - t
            return timed
        RunWriter._apply = on_thread(RunWriter._apply)
        RunWriter._commit = on_thread(RunWriter._commit)
    if os.environ.get("TINY_FLUSH"):  # --cycle --flush: transfers apart from sampled steps
        kw["flush_every_steps"] = int(os.environ["TINY_FLUSH"])
    run = gradoc.watch(model, opt, out=os.environ["TINY_WATCH"], **kw)
inside = {{}}
if PART == "inside":  # the time spent inside gradoc's hook points, each wrapped here
    def clocked(name, f):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                inside[name] = inside.get(name, 0.0) + time.perf_counter() - t
        return timed
    points = (("forward", model._forward_pre_hooks), ("forward", model._forward_hooks),
              ("statistics point", opt._optimizer_step_pre_hooks),
              ("step end", opt._optimizer_step_post_hooks))
    for name, hooks in points:
        for key in list(hooks):
            hooks[key] = clocked(name, hooks[key])
    steps_ = run.steps  # the backward tap's receiver: what gradoc does around backward()
    steps_.on_backward = clocked("backward()", steps_.on_backward)
    steps_.after_backward = clocked("backward()", steps_.after_backward)
floor = PART == "floor"
if PART in ("floor", "hooked"):  # what every watched step must do: the gradients' norms
    import math                  # in one reduction, one host read of them and the loss
    from gradoc.stats import norms, plan
    params = list(model.parameters())
    layout = plan(params)
    def vitals(loss):  # returns None: a step pre-hook's result replaces the step's arguments
        grads = [p.grad for p in params]
        math.isfinite(loss.item() + norms(grads, plan=layout).sum().item())
if PART == "hooked":  # the same, from empty hooks where gradoc's are: a wrapped backward(),
    import functools     # the root's forward pre- and post-hooks, the step's pre/post-hooks
    seen = {{}}
    _backward = torch.Tensor.backward
    @functools.wraps(_backward)
    def backward(self, *args, **kwargs):
        seen["loss"] = self.detach()
        return _backward(self, *args, **kwargs)
    torch.Tensor.backward = backward
    model.register_forward_pre_hook(lambda module, args: None)
    model.register_forward_hook(lambda module, args, kwargs, out: None, with_kwargs=True)
    opt.register_step_pre_hook(lambda o, args, kwargs: vitals(seen["loss"]))
    opt.register_step_post_hook(lambda o, args, kwargs: None)
if PART == "minimal":  # the least a watcher of gradoc's contract does a step (see PARTS)
    import math, queue, sqlite3, tempfile, threading
    class Minimal:
        def __init__(self):
            self.params = [p for g in opt.param_groups for p in g["params"]]
            self.count, self.rows, self.norms, self.host, self.call = 0, [], [], 0.0, None
            self.queue = queue.Queue()
            db = sqlite3.connect(tempfile.mkdtemp() + "/m.db", check_same_thread=False,
                                 isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE steps (step INT, t REAL, loss REAL, norms BLOB, lr REAL)")
            self.db, self.t0 = db, time.monotonic()
            self.writer = threading.Thread(target=self.write, daemon=True)
            self.writer.start()
            model.register_forward_pre_hook(self.called)
            model.register_forward_hook(self.returned, with_kwargs=True)
            opt.register_step_pre_hook(self.statistics)
            opt.register_step_post_hook(self.ended)
            backward, me = torch.Tensor.backward, self
            def tapped(self, *args, **kwargs):  # the loss, read where it is backpropagated
                if self.grad_fn is not None and self.dim() == 0:
                    me.host = self.detach().item()
                    me.bad = not math.isfinite(me.host)
                return backward(self, *args, **kwargs)
            torch.Tensor.backward = tapped
        def called(self, module, args):  # kept for a replay: the inputs
            self.call = [args, None, []]
        def returned(self, module, args, kwargs, out):  # the output, its gradient when read
            self.call[1] = out.detach()
            if self.count % 2 == 0 and out.grad_fn is not None:
                out.grad_fn.register_prehook(self.call[2].append)
        def statistics(self, opt, args, kwargs):  # every 2nd step: the norms, one reduction
            if self.count % 2 == 0:
                norms = torch.stack(torch._foreach_norm([p.grad for p in self.params]))
                self.bad = not math.isfinite(norms.sum().item())
                self.norms.append(norms)
        def ended(self, opt, args, kwargs):  # a row; every 50 steps, to the writer thread
            lr = opt.param_groups[0]["lr"]
            self.rows.append((self.count, time.monotonic() - self.t0, self.host, lr))
            self.count += 1
            if len(self.rows) >= 50:
                rows, self.rows, norms, self.norms = self.rows, [], self.norms, []
                self.queue.put((rows, torch.cat(norms).numpy()))
        def write(self):
            while (item := self.queue.get()) is not None:
                rows, norms = item
                k, values = len(self.params), []
                for i, (step, t, loss, lr) in enumerate(rows):
                    blob = norms[i // 2 * k:(i // 2 + 1) * k].tobytes() if i % 2 == 0 else None
                    values += [step, t, loss, blob, lr]
                self.db.execute("BEGIN")
                self.db.execute("INSERT INTO steps VALUES " + ",".join(["(?,?,?,?,?)"] * len(rows)),
                                values)
                self.db.execute("COMMIT")
        def close(self):
            self.queue.put(None)
            self.writer.join()
    run = Minimal()
def train(first, n):
    for step in range(first, first + n):
        x, y = batches(step)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        if floor:
            vitals(loss.detach())
        opt.step()
if os.environ.get("TINY_BLOCKS"):  # --parts: STEPS steps whenever the parent says so
    done = 0
    for line in sys.stdin:
        t = time.perf_counter()
        train(done, STEPS)
        done += STEPS
        print(time.perf_counter() - t, flush=True)
elif PART == "cycle":  # --cycle: each step's own time; whether it sampled, transferred
    import json
    took, cadence, transfers = [], run.steps.cadence, run.steps.transfers
    for step in range(STEPS):
        last = transfers._last
        t = time.perf_counter()
        train(step, 1)
        took.append((time.perf_counter() - t, bool(cadence and cadence.sampled(step)),
                     transfers._last != last))
    print("CYCLE", json.dumps(took), file=sys.stderr)
else:
    t = time.perf_counter()
    train(0, STEPS)
    print("LOOP", time.perf_counter() - t, file=sys.stderr)
if PART == "inside":
    import json
    inside["writer thread (CPU)"] = thread_s[0]
    print("INSIDE", json.dumps({{k: v / STEPS * 1e3 for k, v in inside.items()}}), file=sys.stderr)
if run is not None:
    run.close()
"""

MODELS = {"mlp": 6000, "tensors100": 3000, "tensors2000": 300, "transformer": 60}
"""Each model's default steps: a loop of a few seconds (the transformer's 240 ms steps:
about 15 s)."""

VARIANTS = ("plain", "watch", "gradoc run")


def _gradoc() -> list[str]:
    exe = shutil.which("gradoc", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "gradoc"]


PARTS = ("plain", "floor", "hooked", "unsampled", "watch", "minimal")
"""``--parts``: ``floor`` is the plain loop plus what every watched step cannot do without
(the gradients' norms, one reduction, and one host read of them and the loss); ``hooked``
does the same from empty hooks at the points where gradoc's are (a wrapped ``backward()``,
the root's forward hooks, the optimizer's step hooks): what any watcher built on PyTorch's
Python hooks pays before doing anything; ``unsampled`` is ``gradoc.watch`` with weights,
updates and activations never sampled; ``minimal`` is the least a watcher of gradoc's
contract does a step, written in the script with no probe, sampling or cadence: the root's
inputs and output kept for a replay (the gradient reaching the output on read steps), the
loss read and checked where it is backpropagated, the gradients' norms every 2nd step in one
reduction, read and checked, and a row a step to a writer thread that inserts 50 at a time
into SQLite (a ruler for gradoc's own cost, not a design)."""


def once(variant: str, script: Path, tmp: Path, k: int) -> tuple[float, float]:
    """(loop seconds, process seconds) of one variant's run."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TINY_PART", None)
    out = tmp / f"run-{k}"
    if variant in ("plain", "floor"):
        cmd = [sys.executable, str(script)]
        if variant == "floor":
            env["TINY_PART"] = "floor"
    elif variant in ("watch", "unsampled"):
        cmd = [sys.executable, str(script)]
        env["TINY_WATCH"] = str(out)
        if variant == "unsampled":
            env["TINY_PART"] = "unsampled"
    else:
        cmd = [*_gradoc(), "run", "--out", str(out), str(script)]
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
    took = time.perf_counter() - t
    loop = [line for line in done.stderr.splitlines() if line.startswith("LOOP ")]
    if done.returncode or not loop:
        raise SystemExit(f"{' '.join(cmd)} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return float(loop[-1].split()[1]), took


def _runs(
    model: str, steps: int, rounds: int, variants: tuple[str, ...]
) -> dict[str, list[tuple[float, float]]]:
    """Each variant's (loop, process) seconds per round, the first round dropped."""
    bench = str(Path(__file__).resolve().parent)
    times: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    rng = random.Random(model)
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        script = tmp / "train.py"
        script.write_text(SCRIPT.format(model=model, steps=steps, bench=bench))
        k = 0
        for r in range(rounds):
            order = list(variants)
            rng.shuffle(order)  # no variant always runs first
            for v in order:
                k += 1
                times[v].append(once(v, script, tmp, k))
            print(f"  {model}: round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    keep = slice(1, None) if rounds > 1 else slice(None)
    return {v: t[keep] for v, t in times.items()}


def measure(model: str, steps: int, rounds: int) -> dict[str, object]:
    times = _runs(model, steps, rounds, VARIANTS)
    row: dict[str, object] = {"model": model, "steps": steps}
    for i, what in enumerate(("loop", "process")):
        plain = [t[i] for t in times["plain"]]
        row[f"plain_{what}_s"] = statistics.median(plain)
        for v in VARIANTS[1:]:
            mine = [t[i] for t in times[v]]
            row[f"{v}_{what}_ratio"] = statistics.median([m / p for m, p in zip(mine, plain)])
            row[f"{v}_{what}_ms_per_step"] = (
                statistics.median([m - p for m, p in zip(mine, plain)]) / steps * 1e3
            )
    return row


def _blocks(model: str, steps: int, rounds: int) -> dict[str, list[float]]:
    """``--parts``: each variant trains in one process that lives through every round, a
    block of ``steps`` steps when asked, the variants' blocks interleaved in a shuffled
    order (this machine's speed drifts over minutes: a block of each variant in turn sees
    the same drift). The first round warms up (and takes the budget's early, denser
    sampling) and is dropped: ms per step of each variant's later blocks."""
    bench = str(Path(__file__).resolve().parent)
    rng = random.Random(model)
    loops: dict[str, list[float]] = {v: [] for v in PARTS}
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        script = tmp / "train.py"
        script.write_text(SCRIPT.format(model=model, steps=steps, bench=bench))
        procs = {}
        for v in PARTS:
            env = {**os.environ, "OMP_NUM_THREADS": "1", "TINY_BLOCKS": "1"}
            env.pop("TINY_PART", None)
            env.pop("TINY_WATCH", None)
            if v in ("floor", "hooked", "unsampled", "minimal"):
                env["TINY_PART"] = v
            if v in ("watch", "unsampled"):
                env["TINY_WATCH"] = str(tmp / f"run-{v}")
            procs[v] = subprocess.Popen(
                [sys.executable, str(script)],
                cwd=tmp,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        try:
            for r in range(rounds + 1):
                order = list(PARTS)
                rng.shuffle(order)
                for v in order:
                    proc = procs[v]
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write("\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        raise SystemExit(f"the {v} variant failed (rc {proc.wait()})")
                    if r:
                        loops[v].append(float(line) / steps * 1e3)
                print(f"  {model}: round {r}/{rounds}", file=sys.stderr, flush=True)
        finally:
            for proc in procs.values():
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=300)
    return loops


def parts(model: str, steps: int, rounds: int) -> dict[str, object]:
    """What a watched step costs, part by part (the training loop's time, ms per step): the
    per-step ops every watched step needs (``floor`` - plain), the same ops called from
    hooks at gradoc's points (``hooked`` - ``floor``), gradoc's Python in those hooks and
    its writer thread (``unsampled`` - ``hooked``), and the sampled statistics,
    amortised (``watch`` - ``unsampled``); each the median over rounds of the difference
    within a round, so the parts add up to the total only roughly. ``minimal``: what the
    least watcher of gradoc's contract adds (see ``PARTS``), gradoc's ruler."""
    loops = _blocks(model, steps, rounds)

    def added(v: str, over: str) -> float:
        """The median over rounds of what ``v`` adds to ``over`` in the same round (the
        machine's speed drifts between rounds more than the parts measured)."""
        return statistics.median(a - b for a, b in zip(loops[v], loops[over]))

    return {
        "model": model,
        "steps": steps,
        "plain_ms": statistics.median(loops["plain"]),
        "ops_ms": added("floor", "plain"),
        "hooks_ms": added("hooked", "floor"),
        "python_ms": added("unsampled", "hooked"),
        "sampled_ms": added("watch", "unsampled"),
        "total_ms": added("watch", "plain"),
        "minimal_ms": added("minimal", "plain"),
        "ratio": statistics.median(a / b for a, b in zip(loops["watch"], loops["plain"])),
    }


def _watched(model: str, steps: int, rounds: int, part: str) -> list[Any]:
    """``rounds`` fresh processes of ``model`` under ``gradoc.watch`` with ``TINY_PART=part``:
    what each printed on its ``PART`` line (JSON)."""
    bench = str(Path(__file__).resolve().parent)
    said: list[Any] = []
    tag = part.upper() + " "
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        script = tmp / "train.py"
        script.write_text(SCRIPT.format(model=model, steps=steps, bench=bench))
        for r in range(rounds):
            env = {**os.environ, "OMP_NUM_THREADS": "1", "TINY_PART": part}
            env["TINY_WATCH"] = str(tmp / f"run-{r}")
            done = subprocess.run(
                [sys.executable, str(script)], cwd=tmp, capture_output=True, text=True, env=env
            )
            found = [line for line in done.stderr.splitlines() if line.startswith(tag)]
            if done.returncode or not found:
                raise SystemExit(f"--{part} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
            said.append(json.loads(found[-1].split(" ", 1)[1]))
            shutil.rmtree(tmp / f"run-{r}", ignore_errors=True)
            print(f"  {model}: round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    return said


def inside(model: str, steps: int, rounds: int) -> dict[str, object]:
    """``--inside``: the time spent inside gradoc's own hook points under ``gradoc.watch``,
    each wrapped in the script (ms per step, every step of the loop from its first: the
    early dense samples and the sampled steps amortised), and the writer thread's CPU time;
    the median over ``rounds`` fresh processes. Less noisy than whole-process ratios on a
    shared machine (it times gradoc's work only, not the training's), it is what says
    whether gradoc's cost grows with the number of tensors. Not counted: the taps'
    wrappers around ``backward()`` (a few us) and what gradoc's work does to the training's
    own ops (caches)."""
    runs: list[dict[str, float]] = _watched(model, steps, rounds, "inside")
    row: dict[str, object] = {"model": model, "steps": steps}
    for point in INSIDE_POINTS:
        row[point] = statistics.median(run.get(point, 0.0) for run in runs)
    row["hook points"] = statistics.median(
        sum(run.get(p, 0.0) for p in INSIDE_POINTS[:-1]) for run in runs
    )
    return row


CYCLE = 50
"""``--cycle``'s period: the steps one transfer carries (``flush_every_steps``), and on the
MLP the sampling's (``meta.sampling.every``)."""


def cycle(model: str, steps: int, rounds: int) -> dict[str, object]:
    """``--cycle``: where in a cycle of ``CYCLE`` steps gradoc's cost lands, under
    ``gradoc.watch`` with each step timed: each step's excess over the run's median step (the
    steady step, gradoc's per-step work included), averaged per position in the cycle
    (``step % CYCLE``), from step 200 on (past the early dense samples and the cadence's
    choice), the median over ``rounds`` fresh processes. What the median step does not show:
    a sampled step, a transfer, the writer thread's record stalling the steps after it."""
    per_run: list[tuple[float, float, list[float], dict[str, float]]] = []
    for record in _watched(model, steps, rounds, "cycle"):
        first = min(200, len(record) // 2)
        kept = [t for t, _, _ in record[first:]]
        median = statistics.median(kept)
        by = [
            [t - median for k, t in enumerate(kept, first) if k % CYCLE == p] for p in range(CYCLE)
        ]
        per_run.append(
            (
                median,
                statistics.fmean(t - median for t in kept),
                [statistics.fmean(b) if b else 0.0 for b in by],
                _by_kind(record[first:], median),
            )
        )
    kinds = sorted({k for run in per_run for k in run[3]})
    return {
        "model": model,
        "steps": steps,
        "median_ms": statistics.median(run[0] for run in per_run) * 1e3,
        "excess_us": statistics.median(run[1] for run in per_run) * 1e6,
        "by_position_us": [
            statistics.median(run[2][k] for run in per_run) * 1e6 for k in range(CYCLE)
        ],
        "by_kind_us": {
            k: statistics.median(run[3].get(k, 0.0) for run in per_run) * 1e6 for k in kinds
        },
    }


AFTER = 3
"""The steps after a transfer counted as its aftermath (the writer's record beside them, and
the caches the transfer took)."""


KINDS = {(True, False): "sampled", (False, True): "transfer", (True, True): "both"}
"""A step's kind by (whether it sampled, whether it transferred)."""


def _by_kind(steps: list[list[Any]], median: float) -> dict[str, float]:
    """Each kind of step's mean excess over the median step, and its share of every step
    (``... a step``): a sampled step, a transfer's, the ``AFTER`` steps after a transfer
    (their excess summed). Apart only where the transfers' period is not the sampling's
    (``--flush``)."""
    kinds: dict[str, list[float]] = {"sampled": [], "transfer": [], "both": [], "after": []}
    for k, (t, sampled, moved) in enumerate(steps):
        kind = KINDS.get((sampled, moved))
        if kind is not None:
            kinds[kind].append(t - median)
        if moved and k + AFTER < len(steps):
            kinds["after"].append(sum(s[0] - median for s in steps[k + 1 : k + 1 + AFTER]))
    out: dict[str, float] = {}
    for kind, excess in kinds.items():
        if excess:
            out[kind] = statistics.fmean(excess)
            out[kind + " a step"] = sum(excess) / len(steps)
    return out


def _cycle_lines(row: dict[str, object]) -> list[str]:
    by = row["by_position_us"]
    assert isinstance(by, list)
    top = sorted(range(CYCLE), key=lambda k: -by[k])[:5]
    spread = ", ".join(f"{k}: {by[k]:+.0f} us" for k in top)
    return [
        f"{row['model']:<12} median step {row['median_ms']:.4f} ms, mean excess over it "
        f"{row['excess_us']:+.1f} us a step",
        f"{'':<12} dearest positions in a cycle of {CYCLE} steps (step % {CYCLE}): {spread}",
        f"{'':<12} by kind (mean excess; its share a step): {_kinds_said(row)}",
    ]


def _kinds_said(row: dict[str, object]) -> str:
    kinds = row["by_kind_us"]
    assert isinstance(kinds, dict)
    said = {"sampled": "sampled", "transfer": "transfer", "both": "sampled and transfer"}
    said["after"] = f"the {AFTER} after a transfer"
    return ", ".join(
        f"{label} {kinds[k]:+.0f} us ({kinds[k + ' a step']:+.1f})"
        for k, label in said.items()
        if k in kinds
    )


INSIDE_POINTS = ("forward", "backward()", "statistics point", "step end", "writer thread (CPU)")


def _inside_table(rows: list[dict[str, object]]) -> str:
    head = f"{'model':<12}" + "".join(f"{p:>21}" for p in (*INSIDE_POINTS, "hook points"))
    lines = [head, " " * 12 + "(ms per step inside gradoc, median over rounds)"]
    for row in rows:
        cells = [row[p] for p in (*INSIDE_POINTS, "hook points")]
        lines.append(f"{row['model']:<12}" + "".join(f"{c:>21.4f}" for c in cells))
    return "\n".join(lines)


PARTS_HEADER = (
    f"{'model':<12}{'plain ms':>9}{'per-step ops':>14}{'hook points':>13}{'python+writer':>15}"
    f"{'sampled':>9}"
    f"{'total':>9}{'ratio':>8}{'minimal':>9}\n"
    + " " * 21
    + "(ms added per step, the training loop's time)"
)


def _parts_line(row: dict[str, object]) -> str:
    g = {k: v for k, v in row.items() if isinstance(v, float)}
    return (
        f"{row['model']:<12}{g['plain_ms']:>9.3f}{g['ops_ms']:>+14.3f}{g['hooks_ms']:>+13.3f}"
        f"{g['python_ms']:>+15.3f}"
        f"{g['sampled_ms']:>+9.3f}{g['total_ms']:>+9.3f}{g['ratio']:>7.3f}x"
        f"{g['minimal_ms']:>+9.3f}"
    )


def _line(row: dict[str, object]) -> str:
    def g(key: str) -> float:
        value = row[key]
        assert isinstance(value, float)
        return value

    steps = row["steps"]
    assert isinstance(steps, int)
    plain_ms = g("plain_loop_s") / steps * 1e3
    cells = [f"{row['model']:<12}{steps:>7}{plain_ms:>9.3f}"]
    for v in VARIANTS[1:]:
        for what in ("loop", "process"):
            ratio, added = g(f"{v}_{what}_ratio"), g(f"{v}_{what}_ms_per_step")
            cells.append(f"{ratio:>7.3f}x{added:>+8.3f}")
    return "".join(cells)


HEADER = (
    f"{'model':<12}{'steps':>7}{'plain ms':>9}"
    f"{'watch loop':>16}{'watch process':>16}{'run loop':>16}{'run process':>16}"
    "\n" + " " * 28 + "   (ratio to plain, added ms per step)"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {list(MODELS)}")
    ap.add_argument("--steps", type=int, help="steps per run (default: per model)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (the first warms up)")
    ap.add_argument("--quick", action="store_true", help="mlp, 300 steps, 2 rounds")
    ap.add_argument(
        "--parts",
        action="store_true",
        help="what a watched step costs, part by part (in-process loops): the per-step ops, "
        "gradoc's Python and writer, the sampled statistics",
    )
    ap.add_argument(
        "--inside",
        action="store_true",
        help="the time spent inside gradoc's hook points and its writer thread, per step "
        "(in process, gradoc.watch): whether it grows with the number of tensors",
    )
    ap.add_argument(
        "--cycle",
        action="store_true",
        help=f"where in a cycle of {CYCLE} steps gradoc's cost lands (gradoc.watch, each step "
        "timed): the sampled step, the transfer, the writer's record",
    )
    ap.add_argument(
        "--flush",
        type=int,
        metavar="N",
        help="--cycle: transfer every N steps (flush_every_steps), apart from the sampled "
        "steps, so that each kind of step's cost shows on its own",
    )
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.quick:
        models, args.steps, args.rounds = ["mlp"], 300, 2
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    if args.flush is not None:
        if not args.cycle or args.flush < 1:
            ap.error("--flush N goes with --cycle, N >= 1")
        os.environ["TINY_FLUSH"] = str(args.flush)
    if args.cycle:
        rows = [cycle(m, args.steps or MODELS[m], args.rounds) for m in models]
        for row in rows:
            print("\n".join(_cycle_lines(row)))
    elif args.inside:
        rows = [inside(m, args.steps or MODELS[m], args.rounds) for m in models]
        print(_inside_table(rows))
    elif args.parts:
        rows = [parts(m, args.steps or MODELS[m], args.rounds) for m in models]
        print(PARTS_HEADER)
        for row in rows:
            print(_parts_line(row))
    else:
        rows = [measure(m, args.steps or MODELS[m], args.rounds) for m in models]
        print(HEADER)
        for row in rows:
            print(_line(row))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
