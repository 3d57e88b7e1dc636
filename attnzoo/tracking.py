"""Where a run's numbers go: `metrics.jsonl` (always, the source of truth), `summary.json`,
Weights & Biases (best effort: any W&B failure is a warning, never a failed run) with the rank and
attention media, the rank-decay figure, and the report printed at the end of a run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# metrics.jsonl is read by its one reader, attnzoo.analysis.metrics; importable from here too
from attnzoo.analysis.metrics import last_values, read_metrics  # noqa: F401

if TYPE_CHECKING:
    import matplotlib.pyplot as plt
    from torch import nn

    from attnzoo.tasks import Batch


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported when a figure is first drawn: a run that
    is refused, or prints its --help, does not pay for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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

    def merge(self, record: Mapping[str, Any]) -> None:
        """Add `record` to the last line when that line is of the same step (a step keeps one
        line), else write it as a new line."""
        self._f.flush()
        data = self.path.read_bytes()
        start = data.rstrip(b"\n").rfind(b"\n") + 1
        try:
            last = json.loads(data[start:]) if data.strip() else None
        except json.JSONDecodeError:
            last = None
        if isinstance(last, dict) and last.get("step") == record.get("step"):
            os.truncate(self.path, start)  # appends go to the new end
            record = {**last, **record}
        self.write(record)

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self.sync()
            self._f.close()


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically: a reader sees the old file or the new one, never half."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def rank_figure(history: Sequence[tuple[int, Sequence[float]]], title: str = "") -> plt.Figure:
    """Relative residual against depth, one line per evaluation step (log y)."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    cmap = plt.get_cmap("viridis")
    for i, (step, ranks) in enumerate(history):
        colour = cmap(i / max(1, len(history) - 1))
        ax.plot(
            range(len(ranks)),
            [max(r, 1e-16) for r in ranks],
            marker="o",
            ms=3,
            color=colour,
            label=f"step {step}",
        )
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


# how each measure is drawn against depth: y label, log scale
MEASURE_AXES = {
    "relative_residual": ("‖res(H)‖ / ‖H‖ (0 at collapse)", True),
    "effective_rank": ("effective rank (1 at collapse)", False),
    "stable_rank": ("stable rank (1 at collapse)", False),
    "token_similarity": ("mean token cosine (1 at collapse)", False),
    "attention_entropy": ("attention entropy, nats", False),
}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def measures_figure(
    history: Sequence[tuple[int, Mapping[str, Sequence[float]]]], title: str = ""
) -> plt.Figure:
    """One panel per collapse measure against depth, one line per evaluation step; n/a (NaN)
    points are gaps, and a measure n/a everywhere gets no panel. `history`: (step, {measure:
    value at every depth}) per evaluation, as the trainer keeps it."""
    names = [n for n in (history[-1][1] if history else {"relative_residual": []})]
    names = [n for n in names if any(_finite(x) for _, v in history for x in v.get(n, []))] or [
        "relative_residual"
    ]
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), dpi=100, squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, name in zip(axes.flat, names, strict=False):
        label, log = MEASURE_AXES.get(name, (name, False))
        for i, (step, values) in enumerate(history):
            ys = [float(x) if _finite(x) else math.nan for x in values.get(name, [])]
            if log:
                ys = [max(y, 1e-16) if not math.isnan(y) else y for y in ys]
            ax.plot(
                range(len(ys)),
                ys,
                marker="o",
                ms=3,
                color=cmap(i / max(1, len(history) - 1)),
                label=f"step {step}",
            )
        if log:
            ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("depth (0 = embedding)")
        ax.set_ylabel(label, fontsize=8)
        ax.set_title(name.replace("_", " "), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    if len(history) <= 12:
        axes.flat[0].legend(fontsize=6)
    fig.suptitle(title or "rank decay over training", fontsize=10)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.1, top=0.88, wspace=0.35, hspace=0.45)
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
        self.group, self.job_type, self.tags = group, job_type, list(tags)
        self.name, self.sweep = name, config.get("sweep")
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


def log_rank_media(
    wb: WandbRun,
    image: Any,
    history: Sequence[tuple[int, Mapping[str, Sequence[float]]]],
    step: int,
) -> None:
    """The rank table (one column per measure), a line series of each measure against depth
    (`rank/vs_depth`: the relative residual; `rank/<measure>/vs_depth`: the others, n/a left
    out) and the rank figure (a matplotlib figure or the PNG file it was saved to), as W&B
    media. `history`: (step, {measure: value at every depth}) per evaluation."""
    wandb = wb.wandb
    try:
        names = list(history[-1][1])
        rows = [
            [s, layer, *(float(values[n][layer]) for n in names)]
            for s, values in history
            for layer in range(len(values["relative_residual"]))
        ]
        table = wandb.Table(columns=["step", "layer", *names], data=rows)
        media: dict[str, Any] = {"rank/table": table}
        for name in names:
            series = [(s, v[name]) for s, v in history if name in v]
            if not any(_finite(x) for _, ys in series for x in ys):
                continue  # n/a for this model (attention entropy without softmax attention)
            key = "rank/vs_depth" if name == "relative_residual" else f"rank/{name}/vs_depth"
            media[key] = wandb.plot.line_series(
                xs=list(range(len(series[-1][1]))),
                ys=[[float(x) if _finite(x) else None for x in ys] for _, ys in series],
                keys=[f"step {s}" for s, _ in series],
                title=f"rank decay: {name.replace('_', ' ')} vs depth",
                xname="layer",
            )
        media["rank/plot"] = wandb.Image(str(image) if isinstance(image, Path) else image)
    except Exception as err:
        wb._fail("building rank media", err)
        return
    wb.log(media, step=step)


def log_attention_media(wb: WandbRun, model: nn.Module, probe: Batch, step: int) -> None:
    """Attention maps per layer and head, and the learned U or M, as W&B images."""
    from attnzoo.attention_maps import (
        attention_maps,
        learned_matrices,
        maps_figure,
        matrices_figure,
    )

    figs = {}
    try:
        maps = attention_maps(model, probe.inputs, probe.key_padding_mask)
        if maps:
            figs["attention/maps"] = maps_figure(maps, step)
        mats = learned_matrices(model)
        if mats:
            figs["attention/learned_matrices"] = matrices_figure(mats, step)
        media = {k: wb.wandb.Image(f) for k, f in figs.items()}
    except Exception as err:
        wb._fail("building attention images", err)
        return
    finally:
        for f in figs.values():
            pyplot().close(f)
    if media:
        wb.log(media, step=step)


# The statuses of a run that `python -m attnzoo.train --continue RUN` takes further (a completed
# run is done; a diverged one would diverge again from its last good checkpoint).
UNFINISHED = ("running", "interrupted", "preempted", "failed")


def report(run_dir: Path, summary: dict[str, Any]) -> None:
    """Print where everything a run left is, and how to look at it."""
    d = run_dir.resolve()
    error = f" ({summary['error']})" if summary.get("error") else ""
    final = "  ".join(
        f"{k}={v:.4g}"
        for k, v in summary.get("final", {}).items()
        if k.startswith(("val/", "test/")) or k == "rank/last"
    )
    lines = [
        f"attnzoo.train: {summary['status']} at step {summary['step']}{error}",
        f"  final          {final or '(no evaluation yet)'}",
        f"  run directory  {d}",
        f"  metrics        {d / 'metrics.jsonl'}",
        f"  summary        {d / 'summary.json'}",
    ]
    checkpoint = d / "checkpoints" / "last.pt"
    if checkpoint.exists():
        lines.append(f"  checkpoint     {checkpoint}")
    if summary["status"] in UNFINISHED:  # quoted: a sweep job's folder holds `=` and `,`
        lines.append(f"  continue       python -m attnzoo.train --continue {shlex.quote(str(d))}")
    if (d / "rank_decay.png").exists():  # drawn with the extras: not yet, in a stopped run
        lines.append(f"  rank plot      {d / 'rank_decay.png'}")
    wandb_info = summary.get("wandb") or {}
    if wandb_info.get("mode") != "disabled" and wandb_info.get("dir"):
        run_folder = Path(wandb_info["dir"]).parent
        lines.append(f"  W&B run        {run_folder}")
        if wandb_info.get("mode") == "offline":
            lines.append(
                f"                 view: wandb leet {run_folder}   upload: wandb sync {run_folder}"
            )
    print("\n".join(lines), file=sys.stderr)


def _cell(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v if v is None or isinstance(v, (int, float, str, bool)) else str(v)


def log_tables(
    tables: Mapping[str, tuple[Sequence[str], Sequence[Mapping[str, Any]]]],
    *,
    mode: str,
    run_dir: Path,
    project: str,
    entity: str | None = None,
    name: str | None = None,
    tags: Sequence[str] = (),
    config: dict[str, Any] | None = None,
) -> str | None:
    """One W&B run (job type `summary`) that holds each of `tables` ({key: (columns, rows)}) as a
    `wandb.Table`; for a sweep's summary beside its runs. Returns the run's files folder, or
    None when W&B is disabled or failed (a warning, as everywhere here)."""
    wb = WandbRun(
        mode=mode,
        run_dir=run_dir,
        config=config or {},
        project=project,
        entity=entity,
        group=None,
        job_type="summary",
        name=name,
        tags=list(tags),
        resume_id=None,
    )
    if not wb.active:
        return None
    try:
        data = {
            key: wb.wandb.Table(
                columns=list(columns),
                data=[[_cell(r.get(c)) for c in columns] for r in rows],
                allow_mixed_types=True,
            )
            for key, (columns, rows) in tables.items()
        }
    except Exception as err:
        wb._fail("building tables", err)
        return None
    wb.log(data, step=0)
    folder = wb.dir
    wb.finish()
    return folder
