"""Checkpointing and mixed precision on a 12-block transformer, side by side.

1. The checkpointing planner's table for the 12 encoder blocks: per setting (none, every
   1/2/3/4/8 blocks; 3 is sqrt(12) rounded), the saved activations after the forward
   pass (measured and predicted), the peak, and the step time relative to no
   checkpointing.
2. fp32 against bf16 autocast on the CPU (fp16 on CUDA): median step time of
   forward+backward in the same process, interleaved, and the relative error of the
   loss and of the gradients of the first and last block.

    python benchmarks/scaling.py            # d_model 256, batch 16 x 128 tokens
    python benchmarks/scaling.py --quick    # a smoke run on a tiny model
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc


class Encoder(nn.Module):
    def __init__(self, vocab: int, d: int, blocks: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, 0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, blocks, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.encoder(self.embed(t)).mean(1))
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    d, batch, tokens, repeats = (256, 16, 128, args.repeats)
    if args.quick:
        d, batch, tokens, repeats = 32, 2, 16, 2
    torch.manual_seed(0)
    model = Encoder(1000, d, 12)
    t = torch.randint(0, 1000, (batch, tokens))
    y = torch.randint(0, 2, (batch,))
    print(
        f"12-block pre-norm transformer, d_model {d}, batch {batch}x{tokens}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
        file=sys.stderr,
    )

    plan = gradoc.plan_checkpointing(model, t, lambda out: F.cross_entropy(out, y), repeats=repeats)
    mib = 2**20
    print(
        f"{'setting':<10}{'saved MiB':>11}{'predicted':>11}{'peak MiB':>10}"
        f"{'step ms':>9}{'x time':>8}"
    )
    for r in plan.rows:
        print(
            f"{r.setting:<10}{r.saved_bytes / mib:>11.1f}"
            f"{r.predicted_saved_bytes / mib:>11.1f}"
            f"{r.peak_bytes / mib:>10.1f}{r.step_s * 1e3:>9.1f}{r.time_ratio or 0:>8.2f}"
        )

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    amp_model = copy.deepcopy(model)

    def step(m: nn.Module, amp: bool) -> tuple[float, torch.Tensor, list[torch.Tensor]]:
        m.zero_grad(set_to_none=True)
        start = time.perf_counter()
        with torch.autocast(device, dtype=dtype, enabled=amp):
            out = m(t)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        grads = [m.encoder.layers[0].linear1.weight.grad, m.encoder.layers[-1].linear1.weight.grad]
        return time.perf_counter() - start, loss.detach(), [g.clone() for g in grads]  # type: ignore[union-attr]

    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats + 1):  # the first round warms up
        for amp in (False, True):
            dt, _, _ = step(model if not amp else amp_model, amp)
            times[amp].append(dt)
    _, l32, g32 = step(model, False)
    _, lam, gam = step(amp_model, True)
    fp32, amp_t = statistics.median(times[False][1:]), statistics.median(times[True][1:])
    rel = [float((a - b).norm() / b.norm()) for a, b in zip(gam, g32)]
    name = str(dtype).replace("torch.", "")
    print(
        f"\nfp32 vs {name} autocast ({device}): step {fp32 * 1e3:.1f} ms vs {amp_t * 1e3:.1f} ms "
        f"({fp32 / amp_t:.2f}x); loss rel. diff {float((lam - l32).abs() / l32.abs()):.2e}; "
        f"gradient rel. error first block {rel[0]:.2e}, last block {rel[1]:.2e}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "plan": plan.to_json(),
                    "amp": {
                        "device": device,
                        "dtype": name,
                        "fp32_step_s": fp32,
                        "amp_step_s": amp_t,
                        "grad_rel_error": rel,
                    },
                },
                indent=2,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
