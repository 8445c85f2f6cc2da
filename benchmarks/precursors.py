"""Does gradoc warn of a transformer's instability before its loss shows it?

The small-scale proxies of Wortsman et al. (2023) on the CPU: ``precursors/lm.py``, a 2-layer
pre-norm transformer language model on the characters of the Python standard library,
trained across a range of learning rates without and with the paper's mitigations
(qk-layernorm and z-loss 1e-4), each run under ``gradoc run``. For each run the table gives
its final loss (the median of its last tenth), the loss's harm gradoc found (a divergence,
a blow-up, a spike or a plateau above what the lower rates reach, with its step), the
precursor (``attention_logit_growth``: its layer and step) and the lead: the steps from the
precursor to the loss's harm, and their share of the steps before the harm.

The claims checked at the end:
- where the loss diverges without a mitigation (a divergence, a blow-up or a spike), the
  precursor came at least ``LEAD`` (20%) of the steps before it;
- no precursor where a mitigation was on, or at a learning rate that trains (one whose final
  loss is within 10% of the sweep's best).

    python benchmarks/precursors.py                     # the sweep (about 5 minutes)
    python benchmarks/precursors.py --lrs 0.01,1.0 --steps 400
    python benchmarks/precursors.py --drift           # output logits (about 20 minutes)

``--drift`` runs the output logits' drift instead: ``lm.py`` on a 4,096-word vocabulary with
an output bias, no weight decay and qk-layernorm, at 0.3, with its logits in bfloat16, in
bfloat16 with a z-loss of 1e-4, and in float32; the table gives each run's log Z (first,
last, farthest from 0), whether ``output_logit_divergence`` warned, and the loss.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

LM = Path(__file__).resolve().parent / "precursors" / "lm.py"
LRS = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)
LEAD = 0.20
TRAINS = 0.10
"""A learning rate trains when its final loss is within this share of the sweep's best."""
DIVERGES = ("loss_divergence", "loss_blowup", "loss_spike", "nonfinite")
HARM = (*DIVERGES, "loss_plateau")
PRECURSOR = "attention_logit_growth"


def _run(name: str, flags: list[str], work: Path) -> tuple[dict[str, Any], list[float]]:
    """``lm.py`` with ``flags`` under ``gradoc run``: its report and its loss per step."""
    from gradoc import open_run

    out, report = work / name, work / f"{name}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "gradoc", "run", "--out", str(out), "--json", str(report)]
    subprocess.run([*cmd, str(LM), *flags], env=env, capture_output=True, text=True)
    with open_run(out) as log:
        loss = [v for v in log.scalar("loss").values if v == v]
    return json.loads(report.read_text()), loss


def _final(loss: list[float]) -> float | None:
    """The median of the loss's last tenth."""
    tail = loss[-max(1, len(loss) // 10) :]
    return statistics.median(tail) if tail else None


def _harm(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first harm gradoc found in the loss, headlined or related."""
    stories = [r for f in found for r in [f, *f.get("related", [])]]
    harm = [r for r in stories if r["kind"] in HARM and r.get("step") is not None]
    return min(harm, key=lambda r: r["step"]) if harm else None


def one(lr: float, mitigated: bool, steps: int, seed: int, work: Path) -> dict[str, Any]:
    name = f"lr{lr:g}{'-qk-z' if mitigated else ''}-seed{seed}"
    flags = ["--lr", str(lr), "--steps", str(steps), "--seed", str(seed)]
    flags += ["--qk-norm", "--z-loss", "1e-4"] if mitigated else []
    made, loss = _run(name, flags, work)
    found, layers = made["findings"], made["run"].get("attention", [])
    gaps = [g for a in layers for g in a["logit_gap"] if g is not None]
    shares = [e for a in layers for e in a["entropy"] if e is not None]
    precursor = next((f for f in found if f["kind"] == PRECURSOR), None)
    first = _harm(found)
    row: dict[str, Any] = {
        "lr": lr,
        "seed": seed,
        "mitigated": mitigated,
        "final_loss": _final(loss),
        "harm": first,
        "precursor": precursor,
        "warnings": sorted({f["kind"] for f in found if f["severity"] != "info"}),
        "peak_gap": max(gaps, default=None),
        "lowest_entropy": min(shares, default=None),
    }
    if precursor is not None and first is not None and first["step"] > precursor["step"]:
        row["lead"] = first["step"] - precursor["step"]
        row["lead_share"] = row["lead"] / first["step"]
    return row


DRIFT = ["--words", "4096", "--head-bias", "--weight-decay", "0", "--qk-norm"]
"""The output logits' drift: a word vocabulary, an output bias, no weight decay, and
qk-layernorm so that attention does not diverge first."""
DRIFTS = {"bfloat16": ["--bf16"], "bfloat16 + z-loss": ["--bf16", "--z-loss", "1e-4"]}
DRIFTS["float32"] = []


def drift(lr: float, setting: str, seed: int, steps: int, work: Path) -> dict[str, Any]:
    """One run of the output logits' drift: where its log Z went, and what gradoc found."""
    flags = ["--lr", str(lr), "--steps", str(steps), "--seed", str(seed), *DRIFT]
    name = f"drift-{setting.replace(' ', '')}-{seed}"
    made, loss = _run(name, flags + DRIFTS[setting], work)
    print(f"  {name} done", file=sys.stderr)
    found = made["findings"]
    series = (made["run"].get("output_logits") or [{}])[0]
    log_z = [v for v in series.get("log_z", []) if v is not None]
    warned = next((f for f in found if f["kind"] == "output_logit_divergence"), None)
    return {
        "setting": setting,
        "seed": seed,
        "final_loss": _final(loss),
        "log_z": (log_z[0], log_z[-1], max(log_z, key=abs)) if log_z else None,
        "dtype": series.get("dtype"),
        "harm": _harm(found),
        "warned": warned,
        "warnings": sorted({f["kind"] for f in found if f["severity"] != "info"}),
    }


def _drift_table(rows: list[dict[str, Any]]) -> None:
    print("| logits | seed | final loss | log Z first / last / farthest | precursor | warnings |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        loss = f"{r['final_loss']:.3f}" if r["final_loss"] is not None else "-"
        z = " / ".join(f"{v:.1f}" for v in r["log_z"]) if r["log_z"] else "-"
        warned = f"step {r['warned']['step']}" if r["warned"] else "-"
        cells = [r["setting"], str(r["seed"]), loss, z, warned, ", ".join(r["warnings"]) or "-"]
        print("| " + " | ".join(cells) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--lrs", help="comma-separated learning rates (default: 1e-3 to 1.0)")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seeds", type=int, default=1, help="seeds per setting (default 1)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument(
        "--drift",
        action="store_true",
        help="the output logits' drift instead: a word vocabulary at lr 0.3 (--lrs), in "
        "bfloat16, bfloat16 with a z-loss and float32 (--steps, default 10000)",
    )
    args = ap.parse_args()
    if args.drift:
        lr = float(args.lrs.split(",")[0]) if args.lrs else 0.3
        steps = args.steps if args.steps != 800 else 10_000
        runs = [(setting, seed) for seed in range(args.seeds) for setting in DRIFTS]
        print(f"{len(runs)} runs of {steps} steps at lr {lr:g}, two at a time", file=sys.stderr)
        with (
            tempfile.TemporaryDirectory(prefix="gradoc-drift-") as tmp,
            ThreadPoolExecutor(2) as pool,  # each run is one process of one thread
        ):
            drifts = list(pool.map(lambda r: drift(lr, *r, steps, Path(tmp)), runs))
        _drift_table(drifts)
        if args.json:
            args.json.write_text(json.dumps(drifts, indent=2))
        return 0
    lrs = [float(x) for x in args.lrs.split(",")] if args.lrs else list(LRS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gradoc-precursors-") as tmp:
        runs = [(lr, m, s) for lr in lrs for m in (False, True) for s in range(args.seeds)]
        for i, (lr, mitigated, seed) in enumerate(runs, 1):
            what = "qk-layernorm + z-loss" if mitigated else "no mitigation"
            print(f"[{i}/{len(runs)}] lr {lr:g}, {what}, seed {seed} ...", file=sys.stderr)
            rows.append(one(lr, mitigated, args.steps, seed, Path(tmp)))
    best = min(r["final_loss"] for r in rows if r["final_loss"] is not None)
    for r in rows:
        r["trains"] = r["final_loss"] is not None and r["final_loss"] <= best * (1 + TRAINS)
    _table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return _claims(rows)


def _at(f: dict[str, Any] | None, layer: bool = False) -> str:
    if f is None:
        return "-"
    where = f" ({f['layer']})" if layer and f.get("layer") else ""
    return f"{f['kind']} at {f['step']}{where}"


def _table(rows: list[dict[str, Any]]) -> None:
    print(
        "| lr | mitigation | seed | final loss | largest logit gap | lowest entropy "
        "| the loss's harm | precursor | lead | warnings |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lead = f"{r['lead']} steps ({100 * r['lead_share']:.0f}%)" if "lead" in r else "-"
        loss = f"{r['final_loss']:.3f}" if r["final_loss"] is not None else "-"
        loss += " (trains)" if r["trains"] else ""
        mitigation = "qk-layernorm + z-loss" if r["mitigated"] else "none"
        precursor = _at(r["precursor"], layer=True).replace(f"{PRECURSOR} at ", "step ")
        cells = [f"{r['lr']:g}", mitigation, str(r["seed"]), loss]
        cells += [_num(r["peak_gap"]), _num(r["lowest_entropy"]), _at(r["harm"]), precursor]
        cells += [lead, ", ".join(r["warnings"]) or "-"]
        print("| " + " | ".join(cells) + " |")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _claims(rows: list[dict[str, Any]]) -> int:
    diverged = [
        r for r in rows if not r["mitigated"] and r["harm"] and r["harm"]["kind"] in DIVERGES
    ]
    early = [r for r in diverged if r.get("lead_share", 0.0) >= LEAD]
    quiet = [r for r in rows if r["mitigated"] or r["trains"]]
    false = [r for r in quiet if r["precursor"] is not None]
    print(
        f"\nwarned at least {LEAD:.0%} of the steps ahead: {len(early)} of {len(diverged)} "
        f"runs that diverged without a mitigation"
    )
    print(f"warned where a mitigation was on or the rate trains: {len(false)} of {len(quiet)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
