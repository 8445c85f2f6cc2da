"""Cost against the number of parameter tensors: does monitoring grow with the model's width?

Four models with the same number of parameters (~400k) split into 10, 100, 1,000 and 5,000
parameter tensors (chains of ``Linear`` layers, weight + bias each), each trained plain,
plain plus gradoc's per-step gradient pass alone (``floor``: what an every-step check of
the gradients cannot avoid), under ``gradoc.watch`` with the defaults, and with
``guard=True``, each in its own process;
blocks of ``--steps`` steps run interleaved (shuffled order), and the table shows the
median over rounds of each one's ms per step and its ratio to plain. The slope is gradoc's
added time per extra tensor, from the first and last rows.

``--long`` also measures what a long, wide run costs after training: a 20,000-step
(``--long-steps``) run of 2,000 tensors is logged, then its ``close()`` (in the process
that trained, whose peak memory is shown before and after it), ``gradoc report`` and
``gradoc report --html`` are timed, each in a fresh process that reports its own peak
memory, with the run log's size in bytes per step per tensor.

    python benchmarks/width.py
    python benchmarks/width.py --quick
    python benchmarks/width.py --long
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

import gradoc
from gradoc.stats import norms, plan

PARAMS = 400_000


def chain(tensors: int, params: int = PARAMS) -> tuple[nn.Sequential, int]:
    """``tensors // 2`` Linear layers (weight + bias) holding about ``params`` parameters."""
    layers = max(1, tensors // 2)
    width = max(2, round(math.sqrt(params / layers)))
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]), width


def peak_mb() -> float:
    """This process's peak resident memory (MB). ``VmHWM`` rather than ``ru_maxrss``: Linux
    carries the parent's ``ru_maxrss`` across ``fork``/``exec``, so a child of a large
    benchmark process would report the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource  # not Linux: the best there is

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


VARIANTS = ("plain", "floor", "default", "guard")
"""``floor``: the plain loop plus only what the default's every-step checks cannot do without:
gradoc's own gradient pass (``stats.norms``, stacked by its plan where it has one) and one
host read of its sum. What the defaults cost above it is everything else."""


def per_step(counts: list[int], rounds: int, steps: int, batch: int) -> list[dict[str, float]]:
    """Median ms per step of each variant for each tensor count.

    NOTE: each variant trains in its own process, the rounds interleaved (shuffled order)
    by the parent: gradoc's activation hook is global to a process (PyTorch's
    ``register_module_forward_hook``), so a plain model trained beside a watched one would
    pay for it, and two watched runs would pay for each other's writer thread."""
    rows = []
    for n in counts:
        workers = {v: _Worker(n, v, batch) for v in VARIANTS}
        rng = random.Random(n)
        means: dict[str, list[float]] = {v: [] for v in VARIANTS}
        try:
            for _ in range(rounds):
                order = list(VARIANTS)
                rng.shuffle(order)  # no variant always runs first (caches, frequency)
                for v in order:
                    means[v].append(workers[v].run(steps))
        finally:
            for w in workers.values():
                w.stop()
        keep = slice(1, None) if rounds > 1 else slice(None)  # the first round warms up
        row = {"tensors": float(n)}
        for v in VARIANTS:
            row[v] = statistics.median(means[v][keep]) * 1e3
        rows.append(row)
        print(_line(row), file=sys.stderr, flush=True)
    return rows


class _Worker:
    """One variant training in its own process: ``run(steps)`` returns its mean s/step."""

    def __init__(self, tensors: int, variant: str, batch: int) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        cmd = [sys.executable, __file__, "--worker", str(tensors), variant, str(batch)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def run(self, steps: int) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"benchmark worker failed (rc {self.proc.wait()})")
        return float(line)

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=300)


def worker(tensors: int, variant: str, batch: int) -> None:
    """Train one variant, ``steps`` at a time as the parent asks (a line on stdin)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, width = chain(tensors)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width)
    params = list(model.parameters())
    layout = plan(params)
    with tempfile.TemporaryDirectory() as tmp:
        run = None
        if variant in ("default", "guard"):
            run = gradoc.watch(model, opt, out=Path(tmp) / "run", guard=variant == "guard")
        for line in sys.stdin:
            steps = int(line)
            t = time.perf_counter()
            for _ in range(steps):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                if variant == "floor":
                    grads = [p.grad for p in params]
                    math.isfinite(norms(grads, plan=layout).sum().item())  # one host read
                opt.step()
            # a mean over the block: activation and weight steps (1 in 10) count
            print((time.perf_counter() - t) / steps, flush=True)
        if run is not None:
            run.close()


def _line(row: dict[str, float]) -> str:
    p = row["plain"]
    return f"{int(row['tensors']):>8}{p:>10.2f}" + "".join(
        f"{row[v]:>10.2f}{row[v] / p:>8.3f}x" for v in VARIANTS[1:]
    )


HEADER = f"{'tensors':>8}{'plain ms':>10}" + "".join(f"{v:>10}{'ratio':>9}" for v in VARIANTS[1:])

# The long run, in its own process: log it, then time its close.
_LOG = """
import sys, time, torch, torch.nn as nn, gradoc
sys.path.insert(0, {bench!r})
from width import chain, peak_mb
torch.manual_seed(0)
model, width = chain({tensors}, {params})
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
run = gradoc.watch(model, opt, out={out!r})
x = torch.randn(4, width)
t = time.perf_counter()
for step in range({steps}):
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
train = time.perf_counter() - t
trained = peak_mb()  # the process before its close: model, optimizer, the run's buffers
t = time.perf_counter()
run.close()
close = time.perf_counter() - t
# VmHWM is read through the kernel's per-CPU RSS counters, which lag by a few pages: a
# later read can come back a fraction of a MB lower. The peak with the close is at least
# the peak before it.
print("RESULT", train, close, max(peak_mb(), trained), trained)
"""

# A command timed with its own peak memory (ru_maxrss of the child that ran it).
_PEAK = """
import runpy, sys, time
sys.path.insert(0, {bench!r})
from width import peak_mb
sys.argv = sys.argv[1:]
t = time.perf_counter()
code = 0
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
took = time.perf_counter() - t
print("RESULT", took, peak_mb(), code, file=sys.stderr)
"""


def _result(proc: subprocess.CompletedProcess[str], stream: str) -> list[float]:
    text = proc.stdout if stream == "stdout" else proc.stderr
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return [float(v) for v in line.split()[1:]]
    raise SystemExit(f"benchmark child failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")


def long_run(tensors: int, steps: int) -> dict[str, float]:
    """Close, report and HTML report of a long, wide run: seconds and peak MB each."""
    bench = str(Path(__file__).resolve().parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "run")
        code = _LOG.format(bench=bench, tensors=tensors, params=PARAMS, out=out, steps=steps)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        train, close, close_peak, train_peak = _result(proc, "stdout")
        log = Path(out) / "run.db"
        size = sum(p.stat().st_size for p in Path(out).glob("run.db*"))
        res = {"steps": steps, "tensors": tensors, "train_s": train, "close_s": close}
        res |= {"close_peak_mb": close_peak, "train_peak_mb": train_peak, "log_bytes": size}
        res["bytes_per_step_tensor"] = size / (steps * tensors)
        for name, extra in (("report", []), ("html", ["--html", str(Path(tmp) / "r.html")])):
            peak = _PEAK.format(bench=bench)
            cmd = [sys.executable, "-c", peak, "gradoc", "report", str(log), *extra]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            took, peak, code = _result(proc, "stderr")
            if code:  # a report that failed measures nothing
                raise SystemExit(f"gradoc report failed (exit {code}):\n{proc.stderr[-3000:]}")
            res[f"{name}_s"], res[f"{name}_peak_mb"] = took, peak
    return res


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(int(argv[1]), argv[2], int(argv[3]))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    ap.add_argument("--counts", default="10,100,1000,5000")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--long", action="store_true", help="also time close/report of a long run")
    ap.add_argument("--long-steps", type=int, default=20_000)
    ap.add_argument("--long-tensors", type=int, default=2_000)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    if args.quick:
        args.counts, args.rounds, args.steps = "10,100", 2, 10
        args.long_steps, args.long_tensors = 30, 20
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    result: dict[str, object] = {}
    rows = []
    if counts:
        print(HEADER, file=sys.stderr)
        rows = per_step(counts, args.rounds, args.steps, args.batch)
        print(HEADER)
        for row in rows:
            print(_line(row))
        result["rows"] = rows
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        slope = {
            v: (hi[v] - hi["plain"] - (lo[v] - lo["plain"])) / (hi["tensors"] - lo["tensors"])
            for v in ("default", "guard")
        }
        result["slope_us_per_tensor"] = {v: s * 1e3 for v, s in slope.items()}
        print(
            f"added per extra tensor: default {slope['default'] * 1e3:.2f} us, "
            f"guard {slope['guard'] * 1e3:.2f} us"
        )
    if args.long or args.quick:
        res = long_run(args.long_tensors, args.long_steps)
        result["long"] = res
        print(
            f"{res['steps']:,} steps x {res['tensors']:,} tensors: log {res['log_bytes'] / 1e6:.1f}"
            f" MB ({res['bytes_per_step_tensor']:.2f} B/step/tensor); close {res['close_s']:.1f} s"
            f" ({res['close_peak_mb']:.0f} MB peak, {res['train_peak_mb']:.0f} MB before it);"
            f" report {res['report_s']:.1f} s"
            f" ({res['report_peak_mb']:.0f} MB); --html {res['html_s']:.1f} s"
            f" ({res['html_peak_mb']:.0f} MB)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
