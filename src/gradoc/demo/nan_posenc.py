"""A sentiment classifier whose positional encoding divides by zero on one-token posts.

The data set is generated at run time (no download): posts are token sequences with
heavy-tailed lengths (log-normal, a few one- and two-token posts), labelled by the
balance of "positive" and "negative" tokens they contain. The encoding normalises each
position by the post's own length, ``pos / (length - 1)``, which is 0/0 for a post of
one token: the first batch holding one turns the loss NaN.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

NAME = "nan-posenc"
TITLE = "transformer sentiment classifier; positional encoding divides by zero on 1-token posts"

VOCAB, D_MODEL, MAX_LEN = 512, 64, 64


def make_posts(
    n: int, seed: int = 0, one_token_share: float = 0.002
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids (padded with 0), lengths and labels of ``n`` synthetic posts."""
    g = torch.Generator().manual_seed(seed)
    # log-normal lengths (median ~13 tokens, a tail to MAX_LEN); one post in 500 is one token
    lengths = torch.exp(torch.randn(n, generator=g) * 0.8 + 2.6).round().clamp(2, MAX_LEN).long()
    lengths[torch.rand(n, generator=g) < one_token_share] = 1
    tokens = torch.randint(3, VOCAB, (n, MAX_LEN), generator=g)
    tokens[torch.arange(MAX_LEN) >= lengths[:, None]] = 0
    positive = ((tokens >= 3) & (tokens < 40)).sum(1)
    negative = ((tokens >= 40) & (tokens < 77)).sum(1)
    labels = (positive >= negative).long()
    return tokens, lengths, labels


class LengthNormalisedEncoding(nn.Module):
    """Sinusoidal encoding of each position relative to its post's length."""

    def __init__(self, d_model: int, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        freqs = torch.exp(torch.arange(0, d_model, 2) * (-math.log(100.0) / d_model))
        self.freqs: torch.Tensor
        self.register_buffer("freqs", freqs)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)[None, :]
        span = (lengths - 1).to(x.dtype)[:, None]
        if self.fixed:
            span = span.clamp(min=1.0)
        rel = pos / span  # BUG: span is 0 for one-token posts, and 0/0 is NaN
        angles = rel[..., None] * self.freqs * MAX_LEN
        enc = torch.cat([angles.sin(), angles.cos()], dim=-1)
        return x + enc


class SentimentClassifier(nn.Module):
    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL, padding_idx=0)
        self.pos_encoding = LengthNormalisedEncoding(D_MODEL, fixed)
        layer = nn.TransformerEncoderLayer(
            D_MODEL, 4, 4 * D_MODEL, 0.0, nn.ReLU(), batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, 2)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        h = self.encoder(self.pos_encoding(self.embed(tokens), lengths), src_key_padding_mask=pad)
        h = h.masked_fill(pad[..., None], 0.0).sum(1) / lengths[:, None]
        out: torch.Tensor = self.head(h)
        return out


STORY = (
    "A sentiment classifier scores short social-media posts (500k a day). Since its "
    "architecture was updated two weeks ago, the training loss turns NaN and the gradients "
    "hold NaN, while validation accuracy looked stable (~0.85). Post lengths vary widely "
    "and some posts are one or two tokens long."
)


def accuracy(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> float:
    tokens, lengths, labels = data
    model.eval()
    with torch.no_grad():
        right = float((model(tokens, lengths).argmax(1) == labels).float().mean())
    model.train()
    return right


def run(
    out: Path | None,
    fixed: bool = False,
    epochs: int = 3,
    n_train: int = 4800,
    batch: int = 32,
) -> int:
    """Train the classifier under gradoc with the guard on; print the diagnosis; write the
    run directory (report.json, report.html)."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import gradoc

    from ..collect import prepare_run_dir
    from ..report import Report, print_run_summary

    console = Console()
    console.print(Panel(STORY, title=f"gradoc demo {NAME}" + (" --fixed" if fixed else "")))
    torch.manual_seed(0)
    train = make_posts(n_train, seed=0)
    val = make_posts(1000, seed=1, one_token_share=0.0)  # collected before one-token posts
    model = SentimentClassifier(fixed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = epochs * (n_train // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps)
    run_ = gradoc.watch(model, opt, out=prepare_run_dir(out, f"demo-{NAME}"), guard=True)
    order = torch.Generator().manual_seed(2)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}  |g| {task.fields[norm]}  val acc {task.fields[acc]}"),
        TextColumn("{task.fields[health]}"),
        TimeElapsedColumn(),
    )
    acc, skipped = "-", 0
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("training", total=steps, loss="-", norm="-", acc=acc, health="")
        step = 0
        for epoch in range(epochs):
            perm = torch.randperm(n_train, generator=order)
            for i in range(n_train // batch):
                idx = perm[i * batch : (i + 1) * batch]
                tokens, lengths, labels = (t[idx] for t in train)
                loss = F.cross_entropy(model(tokens, lengths), labels)
                opt.zero_grad()
                loss.backward()
                norm = torch.nn.utils.get_total_norm(
                    [p.grad for p in model.parameters() if p.grad is not None]
                )
                opt.step()  # the guard skips a non-finite step here
                sched.step()
                guard = run_.guard_summary()
                skipped = guard["skipped"] if guard else 0
                health = "[green]healthy" if not skipped else f"[red]{skipped} NaN steps skipped"
                progress.update(
                    task,
                    advance=1,
                    description=f"epoch {epoch + 1}/{epochs}",
                    loss=f"{loss.item():.3f}",
                    norm=f"{norm.item():.3g}",
                    health=health,
                )
                step += 1
            acc = f"{accuracy(model, val):.3f}"
            progress.update(task, acc=acc)
    report = run_.close()
    assert report is not None
    console.print(
        f"validation accuracy {acc} (the validation posts have no one-token post); "
        f"{skipped} training steps held NaN and were skipped by the guard"
    )
    print_run_summary(run_.dir, Report.from_json(report), stderr=False)
    console.print(f"report   {run_.dir / 'report.html'}", highlight=False)
    return 0
