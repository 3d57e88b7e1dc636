"""Deterministic fake sweeps laid out as `python -m attnzoo.train -m` leaves them, for tests of
the analysis (summaries, study reports) that compare with committed expected outputs.

Every number is a closed-form function of the job's axes, so the same call writes the same files
on any machine. `write_expected` is how the files under tests/data/ were made.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import yaml

MEASURES = ("relative_residual", "effective_rank", "stable_rank", "token_similarity")
TUNE_MIXERS = ("scaled_dot", "pooling", "metric")
TUNE_LRS = (1e-3, 3e-3, 1e-2)
TUNE_SEEDS = (100, 101, 102)
BEST_LR = {"scaled_dot": 3e-3, "pooling": 1e-2, "metric": 3e-3}


def _config(mixer: str, seed: int, lr: float, folder: Path, **model: Any) -> dict[str, Any]:
    """A resolved config as the trainer saves it (every model key, run-specific logger keys)."""
    return {
        "mixer": {"name": mixer} | ({"window": 3} if mixer == "pooling" else {}),
        "model": {
            "dim": 16,
            "depth": 3,
            "heads": 2,
            "mlp": True,
            "mlp_ratio": 4.0,
            "norm": "layernorm",
            "residual": "add",
        }
        | model,
        "task": {"name": "sort", "seq_len": 8},
        "train": {
            "max_steps": 20,
            "batch_size": 4,
            "lr": lr,
            "seed": seed,
            "progress": False,
            "device": "cpu",
        },
        "logger": {"mode": "disabled", "name": f"run-{folder.name}"},
        "data_dir": str(folder / "data"),
    }


def _records(loss: float, depth: int, decay: float, compute: tuple[int, float] | None) -> list:
    """Logged lines at steps 0, 10, 20: the loss falls to `loss`; every measure per layer."""
    out = []
    for step in (0, 10, 20):
        r: dict[str, Any] = {"step": step, "train/loss": loss + 0.3 + (20 - step) / 20}
        r["val/loss"] = loss + (20 - step) / 10
        r["val/accuracy"] = round(1 - loss / 4, 6)
        rel = [decay ** (k * (1 + step / 40)) for k in range(depth + 1)]
        r |= {f"rank/layer_{k}": v for k, v in enumerate(rel)} | {"rank/last": rel[-1]}
        for k, v in enumerate(rel):
            r[f"rank/relative_residual/layer_{k}"] = v
            r[f"rank/effective_rank/layer_{k}"] = 1 + 7 * v
            r[f"rank/stable_rank/layer_{k}"] = 1 + 3 * v * v
            r[f"rank/token_similarity/layer_{k}"] = 1 - 0.8 * v
            if k:
                r[f"rank/attention_entropy/layer_{k}"] = 1.5 + 0.1 * k
        if compute is not None:
            per_step, seconds = compute
            r |= {
                "compute/tokens": step * 32,
                "compute/flops": step * 32 * per_step,
                "compute/train_s": step * seconds,
            }
        out.append(r)
    return out


def _write_job(folder: Path, cfg: dict, overrides: list[str], records: list, summary) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if summary is not None:
        text = summary if isinstance(summary, str) else json.dumps(summary)
        (folder / "summary.json").write_text(text)


def make_tune_sweep(root: Path) -> Path:
    """mixer × train.lr × train.seed (3 × 3 × 3 = 27 jobs): the loss is lowest at BEST_LR per
    mixer; one job failed, one was killed (no summary), one summary is corrupt, one job left no
    folder, and the last job of the grid in multirun.yaml none either. Half the jobs
    recorded their compute, the others are reconstructed from the config."""
    job = 0
    for m, mixer in enumerate(TUNE_MIXERS):
        for lr in TUNE_LRS:
            for seed in TUNE_SEEDS:
                folder = root / str(job)
                loss = 2.0 + 0.05 * m + 0.2 * abs(math.log10(lr / BEST_LR[mixer]))
                loss = round(loss + 0.013 * ((seed * 7 + m) % 5), 9)
                if job in (25, 26):  # the launcher never reached them (26: the grid's last)
                    job += 1
                    continue
                compute = (2000.0 + 500 * m, 0.01 * (1 + m)) if job % 2 else None
                decay = 0.6 if mixer != "metric" else 0.3
                records = _records(loss, 3, decay, compute)
                summary: Any = {
                    "status": "completed",
                    "step": 20,
                    "steps_per_s": round(10.0 + m + seed / 100, 3),
                    "params": 3000 + 100 * m,
                    "time": {"total_s": 2.0 + job / 10},
                    "final": {k: v for k, v in records[-1].items() if k != "step"},
                }
                if compute is not None:
                    summary["compute"] = {
                        "tokens": 640,
                        "flops": 640 * compute[0],
                        "train_s": 20 * compute[1],
                        "wall_s": 0.5 + m,
                    }
                if job == 4:
                    summary |= {"status": "failed", "error": "Traceback\nValueError: boom"}
                elif job == 13:
                    summary = None  # killed: metrics, no summary
                elif job == 20:
                    summary = '{"status": "compl'
                overrides = [f"mixer={mixer}", f"train.lr={lr}", f"train.seed={seed}"]
                _write_job(folder, _config(mixer, seed, lr, folder), overrides, records, summary)
                job += 1
    grid = {
        "hydra": {
            "overrides": {
                "task": [
                    f"mixer={','.join(TUNE_MIXERS)}",
                    f"train.lr={','.join(map(str, TUNE_LRS))}",
                    f"train.seed={','.join(map(str, TUNE_SEEDS))}",
                ]
            }
        }
    }
    (root / "multirun.yaml").write_text(yaml.safe_dump(grid))
    return root


RA_MIXERS = ("scaled_dot", "pooling")
RA_SEEDS = (0, 1)


def make_rank_ablation(out: Path) -> Path:
    """The three sweeps of scripts/rank_ablation.py under `out` (grid: none/add/rezero, MLP on
    and off; deepnorm; no_norm: none/add without norm), seeds 0 and 1, and the run.json a
    finished study leaves, so that `--report-only` writes the same report anywhere."""
    sweeps = {
        "grid": [("none", "layernorm", {}), ("add", "layernorm", {}), ("rezero", "layernorm", {})],
        "deepnorm": [("deepnorm", "layernorm", {"norm_position": "post"})],
        "no_norm": [("none", "none", {}), ("add", "none", {})],
    }
    keep = {"none": 0.02, "add": 0.8, "rezero": 0.99, "deepnorm": 0.7}
    for name, variants in sweeps.items():
        job = 0
        for mixer in RA_MIXERS:
            for residual, norm, extra in variants:
                for mlp in (True, False) if name == "grid" else (True,):
                    for seed in RA_SEEDS:
                        folder = out / name / str(job)
                        model = {
                            "residual": residual,
                            "norm": norm,
                            "mlp": mlp,
                            **extra,
                        }
                        cfg = _config(mixer, seed, 1e-3, folder, **model)
                        decay = keep[residual] ** (0.5 if norm == "none" else 1.0)
                        decay *= 1.0 - 0.005 * seed - (0.03 if mlp else 0.0)
                        decay *= 1.0 - 0.02 * RA_MIXERS.index(mixer)
                        loss = round(2.0 + (1 - decay) + 0.01 * seed, 9)
                        records = _records(loss, 3, decay, None)
                        if mixer == "pooling":  # no softmax attention: no entropy
                            for r in records:
                                for k in [k for k in r if "attention_entropy" in k]:
                                    del r[k]
                        summary = {
                            "status": "completed",
                            "step": 20,
                            "steps_per_s": 10.0,
                            "params": 3000,
                            "final": records[-1],
                        }
                        overrides = [f"mixer={mixer}", f"train.seed={seed}"]
                        _write_job(folder, cfg, overrides, records, summary)
                        job += 1
    header = {
        "command": "python scripts/rank_ablation.py --smoke",
        "machine": "a test machine",
        "started": "2026-01-01 00:00:00",
        "wall_s": 60.0,
        "seeds": list(RA_SEEDS),
        "thresholds": {"kept": 0.5, "collapsed": 0.2},
    }
    (out / "run.json").write_text(json.dumps(header, indent=2) + "\n")
    return out


def make_wide_sweep(root: Path, mixers: list[str], residuals: list[str], seeds=(0,)) -> Path:
    """mixer × model.residual × seed, every job completed, for figures with many series: each
    mixer's loss and each residual's rate of collapse differ."""
    job = 0
    for m, mixer in enumerate(mixers):
        for r, residual in enumerate(residuals):
            for seed in seeds:
                folder = root / str(job)
                loss = round(2.0 + 0.05 * m + 0.01 * r + 0.01 * seed, 9)
                records = _records(loss, 3, 0.9 - 0.1 * r, None)
                summary = {
                    "status": "completed",
                    "step": 20,
                    "steps_per_s": 10.0,
                    "params": 3000,
                    "final": records[-1],
                }
                cfg = _config(mixer, seed, 1e-3, folder, residual=residual)
                overrides = [f"mixer={mixer}", f"model.residual={residual}", f"train.seed={seed}"]
                _write_job(folder, cfg, overrides, records, summary)
                job += 1
    return root


# What the tests compare: the text outputs of each command, run from the folder holding `sweep`.
SUMMARIZE_RUNS = {
    "plain": ["sweep", "--out", "plain", "--margin", "0.05", "--wandb", "disabled"],
    "selected": shlex.split(
        "sweep --out selected --select-by val_loss --tune-axis train.lr "
        "--final-dir multirun/final --compare mixer --wandb disabled"
    ),
}
SUMMARIZE_FILES = (
    "summary.md",
    "summary.csv",
    "groups.md",
    "groups.csv",
    "comparisons.csv",
    "selected.json",
    "selected.md",
    "selected.sh",
)
RANK_ABLATION_FILES = ("rank_ablation.md", "rank_ablation.csv", "rank_ablation.json", "runs.csv")


def normalised(text: str, scripts: Path, work: Path) -> str:
    """An output without its one machine-dependent part, the path of the scripts folder as a
    command was given it (absolute, or relative to where it ran), written `scripts`."""
    import os

    text = text.replace(os.path.relpath(scripts, work), "scripts")
    return text.replace(str(scripts), "scripts")


def write_expected(scripts: Path, dest: Path, work: Path) -> None:
    """Run the commands of SUMMARIZE_RUNS and rank_ablation's --report-only in `work` with the
    scripts in `scripts`, and copy their text outputs to `dest`."""
    import subprocess
    import sys

    make_tune_sweep(work / "sweep")
    for name, args in SUMMARIZE_RUNS.items():
        subprocess.run(
            [sys.executable, str(scripts / "summarize.py"), *args],
            cwd=work,
            check=True,
            capture_output=True,
        )
        for f in SUMMARIZE_FILES:
            if (work / name / f).exists():
                (dest / name).mkdir(parents=True, exist_ok=True)
                (dest / name / f).write_text(
                    normalised((work / name / f).read_text(), scripts, work)
                )
    make_rank_ablation(work / "ra")
    subprocess.run(
        [
            sys.executable,
            str(scripts / "rank_ablation.py"),
            "--report-only",
            "--smoke",
            "--out",
            "ra",
        ],
        cwd=work,
        check=True,
        capture_output=True,
    )
    (dest / "rank_ablation").mkdir(parents=True, exist_ok=True)
    for f in RANK_ABLATION_FILES:
        text = normalised((work / "ra" / f).read_text(), scripts, work)
        (dest / "rank_ablation" / f).write_text(text)


if __name__ == "__main__":
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_expected(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), Path(tmp))
