"""Time from the first non-finite step to a located origin, in healthy-step units.

The reference workload of benchmarks/overhead.py with one division put in front of the
encoder; at step 6 its denominator is 0. The failing step's wall time includes the
replay that locates the division; it is reported against the median healthy step.

    python benchmarks/locate_latency.py          # reference workload
    python benchmarks/locate_latency.py --quick  # a smoke run on a tiny model
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import gradoc
from overhead import Classifier

warnings.filterwarnings("ignore")


class Scaled(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.inner = Classifier(vocab, d_model, heads, layers)
        self.denominator = 1.0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.inner.embed(tokens) / self.denominator  # the bug: 0 at step 6
        out: torch.Tensor = self.inner.head(self.inner.norm(self.inner.encoder(h)).mean(1))
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    vocab, d, heads, layers, batch, tokens = (
        (100, 16, 2, 1, 4, 8) if args.quick else (8000, 256, 4, 6, 16, 64)
    )
    torch.manual_seed(0)
    model = Scaled(vocab, d, heads, layers)
    opt = torch.optim.AdamW(model.parameters(), 1e-4)
    g = torch.Generator().manual_seed(1)
    data = [
        (
            torch.randint(0, vocab, (batch, tokens), generator=g),
            torch.randint(0, 2, (batch,), generator=g),
        )
        for _ in range(8)
    ]
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        with gradoc.watch(model, opt, out=Path(tmp) / "run") as run:
            for i, (x, y) in enumerate(data):
                model.denominator = 0.0 if i == 6 else 1.0
                t = time.perf_counter()
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                times.append(time.perf_counter() - t)
        origins = [
            e.message for e in gradoc.open_run(run.dir).events if e.kind == "nonfinite_origin"
        ]
    healthy = statistics.median(times[1:6])
    print(
        f"healthy step {1000 * healthy:.1f} ms; failing step with locate {1000 * times[6]:.1f} ms "
        f"= {times[6] / healthy:.2f} healthy steps"
    )
    print(f"origin: {origins[0] if origins else 'not found'}")
    return 0 if origins else 1


if __name__ == "__main__":
    raise SystemExit(main())
