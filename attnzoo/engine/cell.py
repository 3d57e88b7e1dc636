"""The tuned-study pipeline of one cell, as the engine (attnzoo.engine) runs it for every tuned
study: a study is cells (runs that share their overrides: a task, a model size) and in each cell
arms (a mixer, with options); this module tunes, reruns and collects a cell, and writes the
lines every such report opens with and its learning-rate section.

Per cell (`run_cell`):

1. tune: `train.lr` over the plan's grid on the tuning seeds (`tune_lr`: one sweep per
   set of options, over the arms' mixers; a choice at an edge extends the grid), selected on the
   whole validation split (the test split is never read by a choice);
2. rerun: fresh seeds at each arm's chosen rate, one sweep per chosen value and set of options;
3. collect: every tuning and fresh-seed run as a row of the report's tables (located by its
   folder under the study's --out, with the cell's columns), the fresh seeds' groups per arm.

Arms with the same options share their sweeps (one `mixer=a,b,c` sweep), in the cell's folder;
arms with options of their own run in a subfolder named after the arm.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnzoo.analysis.groups import Group, group_jobs
from attnzoo.analysis.runs import Job, find_sweep_jobs, row
from attnzoo.engine.spec import Arm
from attnzoo.studies import lr_text, sweep


@dataclass(frozen=True)
class Plan:
    """The protocol every cell of a study runs: the learning-rate grid, the tuning and fresh
    seeds, how often an edge choice may extend the grid, and what the choice is made on (a
    summary key of the whole validation split, and whether higher is better)."""

    lrs: list[float]
    tune_seeds: list[int]
    seeds: list[int]
    max_extensions: int
    by: str
    maximize: bool
    script: str  # how the tuning's selected.sh calls the summary
    # with a threshold, the choice is the value whose tuning seeds reach it most often, then the
    # best mean (attnzoo.analysis.selection.select)
    success: float | None = None


@dataclass
class CellRuns:
    """A cell's runs, read back from its folders: the tuning's selection and extensions (per set
    of options), each arm's chosen rate, every run as a table row, and per arm its fresh seeds'
    group (arms whose rate was never chosen have none)."""

    where: dict[str, Any]
    selected: list[dict[str, Any]] = field(default_factory=list)
    extensions: list[dict[str, Any]] = field(default_factory=list)
    chosen: dict[str, float] = field(default_factory=dict)
    tune_runs: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, Group] = field(default_factory=dict)
    finals: list[Path] = field(default_factory=list)

    def completed(self) -> list[tuple[str, Job]]:
        """(arm, job) for every fresh seed that completed, in arm order."""
        return [
            (arm, job)
            for arm, g in self.groups.items()
            for job, _ in g.members
            if job.status == "completed"
        ]


def by_options(arms: list[Arm]) -> dict[tuple[str, ...], list[Arm]]:
    """The arms by their options: arms with the same options share one sweep (`mixer=a,b`)."""
    out: dict[tuple[str, ...], list[Arm]] = {}
    for arm in arms:
        out.setdefault(arm.options, []).append(arm)
    for same in out.values():
        if len({a.mixer for a in same}) < len(same):
            raise ValueError(f"arms {[a.name for a in same]}: two share a mixer and options")
    return out


def run_cell(
    out: Path,
    name: str,
    where: dict[str, Any],
    base: list[str],
    arms: list[Arm],
    plan: Plan,
    env: dict[str, str],
) -> CellRuns:
    """Tune, rerun at fresh seeds and collect one cell (its folder: `out`/`name`; `base`: every
    run's overrides; `where`: the columns its rows get). Sweeps that completed are skipped and
    interrupted ones resume, so the same call again only reads."""
    cell = CellRuns(where=dict(where))
    root = out / name if name else out
    scope = ", ".join(f"{k} {v}" for k, v in where.items())
    seeds = ",".join(map(str, plan.seeds))
    for options, same in by_options(arms).items():
        folder = root / same[0].name if options else root
        mixers = [a.mixer for a in same]
        what = " ".join(options) or ", ".join(mixers)
        print(
            f"{scope + ': ' if scope else ''}{what}: tuning train.lr over "
            f"{', '.join(map(lr_text, plan.lrs))} on seeds {', '.join(map(str, plan.tune_seeds))}",
            flush=True,
        )
        select = {
            "by": plan.by,
            "maximize": plan.maximize,
            "fresh_seeds": seeds,
            "final_dir": str(folder / "final"),
            "script": plan.script,
            "success": plan.success,
        }
        selected, extensions, tuned = tune_lr(
            [*base, *options],
            mixers,
            plan.lrs,
            plan.tune_seeds,
            folder,
            env,
            select,
            plan.max_extensions,
            " ".join(options) or None,
        )
        by_mixer = {a.mixer: a for a in same}
        cell.selected += [s | {"arm": _arm_of(s, same).name} for s in selected]
        cell.extensions += [
            e | {"mixers": [by_mixer[m].name for m in e["mixers"]]} for e in extensions
        ]
        chosen, by_lr = chosen_lrs(selected, mixers)
        cell.chosen |= {by_mixer[m].name: lr for m, lr in chosen.items()}
        cell.tune_runs += [
            _located(row(j), j, out, where, by_mixer) for j in find_sweep_jobs(tuned)
        ]
        finals = []
        for lr, group in sorted(by_lr.items()):
            final = folder / "final" / f"lr_{lr_text(lr)}"
            over = [
                *base,
                *options,
                f"mixer={','.join(group)}",
                f"train.lr={lr_text(lr)}",
                f"train.seed={seeds}",
            ]
            sweep(over, final, len(group) * len(plan.seeds), env, folder / "final.log")
            finals.append(final)
        jobs = find_sweep_jobs(finals)
        rows = [row(j) for j in jobs]
        groups, _ = group_jobs(jobs, rows)
        for g in groups:  # a job that left no config (refused) groups apart: its row says so
            if (arm := by_mixer.get(g.config.get("mixer.name"))) is not None:
                cell.groups[arm.name] = g
        cell.runs += [_located(r, j, out, where, by_mixer) for j, r in zip(jobs, rows, strict=True)]
        cell.finals += finals
    order = [a.name for a in arms]
    cell.groups = {a: cell.groups[a] for a in order if a in cell.groups}
    cell.selected.sort(key=lambda s: order.index(s["arm"]))
    return cell


def _arm_of(selection: dict[str, Any], same: list[Arm]) -> Arm:
    """The arm a selection row is for (its mixer axis; a sweep of one mixer has none)."""
    mixer = selection["axes"].get("mixer", same[0].mixer)
    return next(a for a in same if a.mixer == mixer)


def _located(
    r: dict[str, Any], job: Job, out: Path, where: dict[str, Any], arms: dict[str, Arm]
) -> dict[str, Any]:
    """A run's table row with the cell's columns, its `arm` (by its mixer among `arms`, those
    that shared its sweep) and, as `job`, its folder under the study's --out (a job that left
    no folder: its sweep's folder and its name)."""
    place = job.folder or (job.sweep / job.name if job.sweep else Path(job.name))
    with contextlib.suppress(ValueError):  # a sweep outside --out keeps its whole path
        place = place.relative_to(out)
    arm = arms.get(r.get("mixer")) or (next(iter(arms.values())) if len(arms) == 1 else None)
    return r | where | {"arm": arm.name if arm else "", "job": str(place)}


def mixer_of(choice: dict[str, Any], mixers: list[str]) -> str | None:
    """The mixer a selection row is for: its `mixer` axis, or the one mixer of a study of one
    (whose sweep varies no mixer, so its rows have no mixer axis)."""
    return choice["axes"].get("mixer", mixers[0] if len(mixers) == 1 else None)


def chosen_lrs(
    selected: list[dict[str, Any]], mixers: list[str]
) -> tuple[dict[str, float], dict[float, list[str]]]:
    """The learning rate each mixer chose, and the mixers per chosen value (in `mixers` order):
    one fresh-seed sweep per value."""
    chosen = {
        mixer_of(s, mixers): float(s["value"])
        for s in selected
        if mixer_of(s, mixers) in mixers and s["value"] is not None
    }
    by_lr: dict[float, list[str]] = {}
    for mixer in (m for m in mixers if m in chosen):
        by_lr.setdefault(chosen[mixer], []).append(mixer)
    return chosen, by_lr


def tune_lr(
    base: list[str],
    mixers: list[str],
    lrs: list[float],
    tune_seeds: list[int],
    root: Path,
    env: dict[str, str],
    select: dict[str, Any],
    max_extensions: int = 2,
    label: str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Path]]:
    """Tune `train.lr` per mixer on the tuning seeds: the grid in `root`/tune, then, while a
    mixer's choice sits at the edge of its grid, one more step beyond that edge (the grid's own
    factor) in `root`/tune-ext<k>/lr_<value>, at most `max_extensions` times. `select` holds
    write_tuning's keyword arguments (by, maximize, fresh_seeds, final_dir, script); the choice
    is remade over every folder after each extension. Returns the selection, the extensions
    ({round, lr, mixers, edge}) and the tuning folders. `label` names what is tuned in the
    console's lines where one mixer is tuned under several arms (the sink study's arm)."""
    from attnzoo.analysis.report import write_tuning
    from attnzoo.analysis.selection import extend

    seeds = ",".join(map(str, tune_seeds))
    base = [*base, "train.final_splits=[val]"]  # the choice sees val only: test is never read
    tune = [*base, f"mixer={','.join(mixers)}", f"train.lr={','.join(map(lr_text, lrs))}"]
    sweep(
        [*tune, f"train.seed={seeds}"],
        root / "tune",
        len(mixers) * len(lrs) * len(tune_seeds),
        env,
        root / "tune.log",
    )
    folders = [root / "tune"]
    extensions: list[dict[str, Any]] = []
    for k in range(max_extensions + 1):
        selected = write_tuning(folders, root / "tune-summary", "train.lr", **select)
        beyond: dict[float, list[str]] = {}
        for s in selected:
            mixer, lr = mixer_of(s, mixers), extend(s, cap_reached=k == max_extensions)
            if mixer in mixers and lr is not None:
                beyond.setdefault(float(f"{lr:.3g}"), []).append(mixer)
        if not beyond:
            return selected, extensions, folders
        for lr, group in sorted(beyond.items()):
            edge = "high" if lr > max(lrs) else "low"
            what = label or ", ".join(group)
            print(f"  extension {k + 1}: train.lr={lr_text(lr)} for {what} ({edge})", flush=True)
            folder = root / f"tune-ext{k + 1}" / f"lr_{lr_text(lr)}"
            over = [*base, f"mixer={','.join(group)}", f"train.lr={lr_text(lr)}"]
            sweep(
                [*over, f"train.seed={seeds}"],
                folder,
                len(group) * len(tune_seeds),
                env,
                root / "tune.log",
            )
            folders.append(folder)
            extensions.append({"round": k + 1, "lr": lr, "mixers": group, "edge": edge})
    return selected, extensions, folders


def row_lr(row: dict[str, str]) -> str:
    """The `train.lr` a committed per-seed row ran at, as its overrides spell it."""
    return next(o for o in row["overrides"].split() if o.startswith("train.lr=")).split("=", 1)[1]


def selection_from_rows(
    rows: list[dict[str, str]],
    chosen: dict[str, float],
    mixers: list[str],
    success: float | None = None,
) -> list[dict[str, Any]] | None:
    """A committed tuning's selection (as tune_lr returns it, for tuning_lines) remade from its
    runs (a tune_runs.csv) by the selection the study ran (attnzoo.analysis.selection.select,
    the final metric maximised over each mixer's learning rates, with its `success` threshold
    if it had one). None where it does not give every mixer its committed choice."""
    from attnzoo.analysis.groups import groups_from_rows
    from attnzoo.analysis.selection import select

    labelled = [r | {"group": f"mixer={r['mixer']}, train.lr={row_lr(r)}"} for r in rows]
    selected = select(
        groups_from_rows(labelled), "train.lr", by="metric", maximize=True, success=success
    )
    got = {mixer_of(s, mixers): s["value"] for s in selected}
    if any(m not in got or m not in chosen or abs(got[m] / chosen[m] - 1) > 1e-9 for m in mixers):
        return None
    return selected
