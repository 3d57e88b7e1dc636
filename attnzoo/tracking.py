"""Where a run's numbers go: `metrics.jsonl` (always, the source of truth), Weights & Biases (best
effort: any W&B failure is a warning, never a failed run), and the rank-decay figure.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import contextlib

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN/inf: a skipped step's loss is logged as null (missing)
    return v


class MetricsFile:
    """`metrics.jsonl`: one JSON object per logged step, appended and flushed line by line."""

    def __init__(self, path: Path, truncate_after_step: int | None = None) -> None:
        """Open for appending; with `truncate_after_step`, first drop every line whose step is
        beyond it (a resumed run re-logs those steps) and any torn last line."""
        self.path = path
        if truncate_after_step is None:
            path.write_text("")
        elif path.exists():
            kept = []
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break  # a line torn by a kill: nothing after it can be trusted
                if rec.get("step", math.inf) > truncate_after_step:
                    break
                kept.append(line)
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept))
            os.replace(tmp, path)
        self._f = open(path, "a")  # noqa: SIM115 - kept open for the run

    def write(self, record: Mapping[str, Any]) -> None:
        self._f.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
        self._f.flush()

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self.sync()
            self._f.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a `metrics.jsonl`."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def rank_figure(history: Sequence[tuple[int, Sequence[float]]], title: str = "") -> plt.Figure:
    """Relative residual against depth, one line per evaluation step (log y)."""
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    cmap = plt.get_cmap("viridis")
    for i, (step, ranks) in enumerate(history):
        colour = cmap(i / max(1, len(history) - 1))
        ax.plot(range(len(ranks)), [max(r, 1e-16) for r in ranks], marker="o", ms=3,
                color=colour, label=f"step {step}")  # fmt: skip
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("depth (0 = embedding, l = output of block l)")
    ax.set_ylabel("relative residual ‖res(H)‖ / ‖H‖")
    ax.set_title(title or "rank decay over training")
    ax.grid(True, which="both", alpha=0.3)
    if len(history) <= 12:
        ax.legend(fontsize=7)
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.13, top=0.92)  # tight_layout's, cheaply
    return fig


class WandbRun:
    """A W&B run that never takes the training run down: every call is guarded, and after the
    first failure W&B is switched off for the rest of the run with one warning. An online run
    that cannot start (no network, no login) falls back to an offline run, to sync later."""

    def __init__(
        self,
        mode: str,
        run_dir: Path,
        config: dict[str, Any],
        project: str,
        entity: str | None,
        group: str | None,
        job_type: str,
        name: str | None,
        tags: list[str],
        resume_id: str | None,
        init_timeout: float = 90.0,
    ) -> None:
        self.run = None
        self.wandb = None
        self.mode = mode
        if mode == "disabled":
            return
        kwargs = dict(
            dir=str(run_dir),
            project=project,
            entity=entity,
            group=group,
            job_type=job_type,
            name=name,
            tags=tags or None,
            config=config,
            id=resume_id,
            resume="allow" if resume_id else None,
        )
        try:
            import wandb

            self.wandb = wandb
            (run_dir / "wandb").mkdir(parents=True, exist_ok=True)
            self.run = wandb.init(mode=mode, settings=self._settings(init_timeout), **kwargs)
            return
        except Exception as err:  # no network, no login, bad entity, ...
            if mode != "online" or self.wandb is None:
                self._fail("wandb.init", err)
                return
            warnings.warn(
                f"W&B failed in wandb.init ({type(err).__name__}: {err}); logging to an offline "
                f"run in {run_dir / 'wandb'} instead (upload it later with `wandb sync`)",
                stacklevel=2,
            )
        try:  # online failed: keep the W&B record locally
            self.mode = "offline"
            self.run = self.wandb.init(mode="offline", settings=self._settings(30), **kwargs)
        except Exception as err:
            self._fail("wandb.init (offline fallback)", err)

    def _settings(self, init_timeout: float) -> Any:
        return self.wandb.Settings(
            init_timeout=init_timeout, console="off", x_disable_stats=True, quiet=True
        )

    @property
    def active(self) -> bool:
        return self.run is not None

    @property
    def id(self) -> str | None:
        return getattr(self.run, "id", None)

    @property
    def dir(self) -> str | None:
        return getattr(self.run, "dir", None)

    def _fail(self, what: str, err: BaseException) -> None:
        warnings.warn(
            f"W&B failed in {what} ({type(err).__name__}: {err}); training goes on without W&B, "
            "metrics.jsonl has every number",
            stacklevel=3,
        )
        run, self.run = self.run, None
        if run is not None:
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)

    def log(self, data: Mapping[str, Any], step: int) -> None:
        if self.run is None:
            return
        try:
            self.run.log(dict(data), step=step)
        except Exception as err:
            self._fail("log", err)

    def summary(self, data: Mapping[str, Any]) -> None:
        if self.run is None:
            return
        try:
            for k, v in data.items():
                self.run.summary[k] = v
        except Exception as err:
            self._fail("summary", err)

    def finish(self, exit_code: int = 0) -> None:
        run, self.run = self.run, None
        if run is None:
            return
        try:
            run.finish(exit_code=exit_code)
        except Exception as err:
            warnings.warn(f"wandb.finish failed ({type(err).__name__}: {err})", stacklevel=2)
