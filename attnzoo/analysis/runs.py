"""Reading a sweep: each job folder's resolved config, overrides, `metrics.jsonl` and
`summary.json` (every problem a status or a note, never an exception), the jobs the launcher
never reached, and one row of numbers per job (the columns of summary.csv).

A job's status is the one its summary.json gives (completed, failed, diverged, preempted,
interrupted, or running: still running, or killed outright); a job with metrics but no summary is
"incomplete" (a run from before summaries said `running`), one with a folder but nothing written
"missing", one whose summary does not parse "corrupt". A job of the sweep's grid (multirun.yaml)
without a folder is "refused" when the trainer refused its configuration before writing anything
(the reason is in the sweep's `refused.jsonl`), else "missing": the launcher never reached it.
Without multirun.yaml, a gap in numbered job folders is "missing".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from attnzoo.analysis.metrics import rank_key, rank_layers, rank_values, read_records
from attnzoo.model import ModelConfig
from attnzoo.rank import MEASURES
from attnzoo.replicates import REPLICATE_KEY
from attnzoo.residual import resolve

# the collapse measures besides the relative residual (whose final value is `final_rank`/`rank`):
# each job's value at the last layer, from `rank/<measure>/layer_<k>`
OTHER_MEASURES = tuple(m for m in MEASURES if m != "relative_residual")

COLUMNS = (
    "job",
    "group",  # the configuration (groups.csv's `group`): a seed's row of that group's intervals
    "mixer",
    "residual",
    "mlp",
    "norm",
    "depth",
    "task",
    "seed",
    "final_val_loss",
    "metric",
    "final_metric",
    "final_test_loss",
    "final_test_metric",
    "val_n",
    "test_n",
    "final_rank",
    *(f"final_{m}" for m in OTHER_MEASURES),
    "steps_per_s",
    "params",
    "tokens",
    "wall_s",
    "flops",
    "status",
    "overrides",
    "note",
)


class SweepWarning(UserWarning):
    """What a sweep's reading says loudly: jobs that did not complete, configurations without a
    completed seed, values a selection left out."""


@dataclass
class Job:
    """One job of a sweep: what its folder holds (`config` is the resolved config, with the
    job's own overrides under `_overrides`)."""

    name: str
    folder: Path | None
    config: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    status: str = "missing"
    notes: list[str] = field(default_factory=list)
    sweep: Path | None = None  # the sweep folder it belongs to

    @property
    def reason(self) -> str:
        """Why the job did not complete, in a few words: its first note, shortened."""
        text = self.notes[0] if self.notes else ""
        return text if len(text) <= 100 else text[:99] + "…"

    def value(self, key: str) -> Any:
        """The latest value of `key`: summary.json's `final` first, then metrics.jsonl."""
        final = (self.summary or {}).get("final") or {}
        if isinstance(final, dict) and key in final:
            return final[key]
        for record in reversed(self.records):
            if key in record:
                return record[key]
        return None

    @property
    def metric_name(self) -> str | None:
        """The task's validation metric besides the loss (e.g. accuracy), as logged."""
        keys = set((self.summary or {}).get("final") or {})
        for record in self.records:
            keys.update(record)
        # not the loss, nor the count of examples a whole-split evaluation covered (val/n)
        names = sorted(k for k in keys if k.startswith("val/") and k not in ("val/loss", "val/n"))
        return names[0] if names else None

    def final_measure(self, name: str) -> Any:
        """The latest value of collapse measure `name` at the last layer logged,
        `rank/<name>/layer_<L>`; None when the job never logged it (n/a, or not chosen)."""
        final = (self.summary or {}).get("final") or {}
        keys = {*(final if isinstance(final, dict) else {}), *(k for r in self.records for k in r)}
        layers = rank_layers(keys, name)
        return self.value(rank_key(layers[-1], name)) if layers else None

    def rank_profile(self) -> list[float] | None:
        """rank/layer_0..L (the relative residual) from the last record that logged them."""
        for record in reversed(self.records):
            profile = rank_values(record)
            if profile is not None:
                return profile
        return None

    def profile(self, name: str, when: str) -> list[float] | None:
        """`rank/<name>/layer_<k>` for k = 0..L from the first record that logged them, at init
        (`when="init"`, and only if that record is step 0), or the last (`"trained"`); None when
        the job never logged them."""
        records = [r for r in self.records if rank_layers(r, name)]
        if not records:
            return None
        record = records[0] if when == "init" else records[-1]
        if when == "init" and record.get("step") != 0:
            return None
        return rank_values(record, name)


def get(cfg: dict[str, Any], dotted: str) -> Any:
    """`cfg["a"]["b"]` for `"a.b"`; None where a key is missing."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def residual_kind(cfg: dict[str, Any]) -> str | None:
    """The residual variant a job ran (attnzoo.residual.resolve on its `model.*`, defaults from
    ModelConfig); None if unreadable."""
    model = cfg.get("model")
    if not isinstance(model, dict):
        return None
    defaults = ModelConfig()
    values = {f.name: model.get(f.name, getattr(defaults, f.name)) for f in fields(ModelConfig)}
    try:
        return resolve(SimpleNamespace(**values)).kind
    except (ValueError, TypeError):
        return None


def group_choice(cfg: dict[str, Any], group: str, overrides: list[str]) -> Any:
    """A config group's choice: its `name` key, a plain string, or the `group=` override."""
    node = cfg.get(group)
    if isinstance(node, dict) and node.get("name") is not None:
        return node["name"]
    if isinstance(node, str):
        return node
    for override in overrides:
        if override.startswith(f"{group}="):
            return override.split("=", 1)[1]
    return None


def load_job(name: str, folder: Path) -> Job:
    """Read one job folder; every problem becomes a status or a note, never an exception."""
    job = Job(name=name, folder=folder)
    config_file = folder / ".hydra" / "config.yaml"
    if config_file.exists():
        try:
            job.config = yaml.safe_load(config_file.read_text()) or {}
        except yaml.YAMLError as err:
            job.notes.append(f"config.yaml unreadable: {str(err).splitlines()[0]}")
    else:
        job.notes.append("no .hydra/config.yaml")
    overrides_file = folder / ".hydra" / "overrides.yaml"
    try:
        job.config["_overrides"] = yaml.safe_load(overrides_file.read_text()) or []
    except (OSError, yaml.YAMLError):
        job.config["_overrides"] = []

    metrics_file = folder / "metrics.jsonl"
    if metrics_file.exists():
        job.records, bad_lines = read_records(metrics_file)
        if bad_lines:
            job.notes.append(f"{bad_lines} unreadable line(s) in metrics.jsonl")

    summary_file = folder / "summary.json"
    if summary_file.exists():
        try:
            summary = json.loads(summary_file.read_text())
            if not isinstance(summary, dict):
                raise ValueError("not a JSON object")
            job.summary = summary
            job.status = str(summary.get("status") or "unknown")
            if job.status == "running":
                job.notes.append(
                    f"still running, or killed: its last checkpoint is step {summary.get('step')}"
                    " (python -m attnzoo.train --continue on its folder continues it)"
                )
            if summary.get("error"):
                job.notes.append(str(summary["error"]).strip().splitlines()[-1][:120])
        except (json.JSONDecodeError, ValueError) as err:
            job.status = "corrupt"
            job.notes.append(f"summary.json unreadable: {err}")
    elif job.records:
        job.status = "incomplete"
        job.notes.append("no summary.json (still running, or killed)")
    else:
        job.status = "missing"
        job.notes.append("no metrics.jsonl and no summary.json")
    return job


REFUSED_FILE = "refused.jsonl"  # in a sweep's folder: the jobs refused before they wrote anything


def expected_jobs(sweep: Path) -> int | None:
    """How many jobs the sweep's grid has, from multirun.yaml (None if unknown)."""
    grid = grid_overrides(sweep)
    return None if grid is None else len(grid)


def grid_overrides(sweep: Path) -> list[list[str]] | None:
    """Each job's overrides in the sweep's grid, as Hydra's basic sweeper builds them from
    multirun.yaml (None if unknown)."""
    try:
        cfg = yaml.safe_load((sweep / "multirun.yaml").read_text()) or {}
        # as Hydra's basic sweeper builds the grid: hydra.sweeper.params, then the command line
        params = get(cfg, "hydra.sweeper.params") or {}
        overrides = [f"{k}={v}" for k, v in params.items()]
        overrides += get(cfg, "hydra.overrides.task") or []
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(overrides))
        batches = BasicSweeper.split_arguments(parsed, None)
        return [list(job) for batch in batches for job in batch]
    except Exception:  # a convenience: without it, gaps in numbered folders are still reported
        return None


def refusals(sweep: Path) -> dict[tuple[str, ...], tuple[str, str]]:
    """The sweep's refused jobs (`refused.jsonl`): their sorted overrides -> the folder name
    they would have had, and the reason."""
    out: dict[tuple[str, ...], tuple[str, str]] = {}
    try:
        lines = (sweep / REFUSED_FILE).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            entry = json.loads(line)
            key = tuple(sorted(map(str, entry["overrides"])))
            out[key] = (str(entry["job"]), str(entry["error"]))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def find_jobs(sweep: Path) -> list[Job]:
    """Every job of the sweep folder `sweep`, including the ones that left no folder behind, in
    the order of the sweep's grid (numbered folders by number; others after, by name)."""
    if not sweep.is_dir():
        raise ValueError(f"{sweep} is not a folder (give the multirun folder of a sweep)")
    folders = {
        p.name: p
        for p in sweep.iterdir()
        if p.is_dir()
        and (p.name.isdigit() or (p / ".hydra").is_dir() or (p / "metrics.jsonl").exists())
    }
    jobs = [load_job(n, p) for n, p in folders.items()]
    overrides_of = lambda j: tuple(sorted(map(str, j.config.get("_overrides", []))))
    grid = grid_overrides(sweep)
    place: dict[tuple[str, ...], int] = {}
    if grid is None:  # no multirun.yaml: a gap in the numbered folders is a job never run
        numbers = [int(n) for n in folders if n.isdigit()]
        for number in range(max(numbers, default=-1) + 1):
            if str(number) not in folders:
                jobs.append(Job(str(number), None, notes=["the job left no folder"]))
    else:
        place = {tuple(sorted(o)): i for i, o in enumerate(grid)}
        ran = {overrides_of(j) for j in jobs}
        refused = refusals(sweep)
        for number, overrides in enumerate(grid):
            key = tuple(sorted(overrides))
            if key in ran or str(number) in folders:  # by its overrides, or its number
                continue
            name, error = refused.get(key, (str(number), ""))
            job = Job(name, None, config={"_overrides": list(overrides)})
            if key in refused:
                job.status = "refused"
                job.notes.append(f"refused before it wrote anything: {error}")
            else:
                job.notes.append("the job left no folder (never launched, or killed at start)")
            jobs.append(job)

    def order(j: Job) -> tuple[int, int, str]:
        if j.name.isdigit():
            return (0, int(j.name), "")
        return (1, place.get(overrides_of(j), len(place)), j.name)

    for j in jobs:
        j.sweep = sweep
    return sorted(jobs, key=order)


def find_sweep_jobs(sweeps: list[Path]) -> list[Job]:
    """The jobs of several sweep folders read as one sweep: with more than one, each job's name
    starts with its sweep folder's name (`final/00` and `final/01`: `00/0`, `01/0`, ...)."""
    jobs = []
    for s in sweeps:
        found = find_jobs(s)
        if len(sweeps) > 1:
            for j in found:
                j.name = f"{s.name}/{j.name}"
        jobs += found
    return jobs


# ---- the per-job row -------------------------------------------------------------------------


def context(cfg: dict[str, Any]) -> int | None:
    """Tokens per sequence from the resolved config (the task's seq_len or num_points)."""
    for key in ("task.seq_len", "task.num_points", "task.block_size"):
        value = get(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def shared_config(jobs: list[Job], keys: dict[str, str]) -> dict[str, Any]:
    """The resolved-config values every job of `jobs` shares: `keys` maps a name to a dotted
    config key (e.g. "steps": "train.max_steps"). A key the jobs disagree on, or that none has,
    is left out: a report states as its scope only what holds for every run."""
    shared = {}
    for label, key in keys.items():
        values = {repr(get(j.config, key)) for j in jobs}
        value = get(jobs[0].config, key) if jobs else None
        if len(values) == 1 and value is not None:
            shared[label] = value
    return shared


def task_attr(task: Any, attr: str, default: Any) -> Any:
    """A class attribute of a registered task (e.g. `causal`), without building the task."""
    try:
        from attnzoo.tasks import TASKS

        return getattr(TASKS[str(task)], attr, default)
    except Exception:  # an unknown task, or attnzoo not importable: the default
        return default


def budget(job: Job) -> dict[str, Any]:
    """Tokens seen, wall time and training FLOPs of a job: what its summary.json's `compute`
    records (the trainer counts them), else reconstructed (`reconstructed_budget`)."""
    compute = (job.summary or {}).get("compute")
    if isinstance(compute, dict) and compute.get("tokens") is not None:
        return {k: compute.get(k) for k in ("tokens", "wall_s", "flops")}
    return reconstructed_budget(job)


def reconstructed_budget(job: Job) -> dict[str, Any]:
    """For a run that did not record its compute: tokens = steps × train.batch_size × context
    (task.seq_len or task.num_points) from the resolved config, FLOPs = tokens × the trainer's
    training FLOPs per token of the run's resolved config (attnzoo.train.budget.flops_per_token:
    the blocks' matmuls, backward = 2 × forward, embedding and head excluded; None where it has
    no formula or the config lacks a size), and wall time is summary.json's time.total_s."""
    from attnzoo.train.budget import flops_per_token  # the trainer's own count

    cfg, summary = job.config, job.summary or {}
    steps = summary.get("step")
    if steps is None:
        steps = next((r["step"] for r in reversed(job.records) if "step" in r), None)
    batch, ctx = get(cfg, "train.batch_size"), context(cfg)
    tokens = steps * batch * ctx if None not in (steps, batch, ctx) else None
    time_ = summary.get("time")
    wall = time_.get("total_s") if isinstance(time_, dict) else None
    flops = None
    if tokens is not None and ctx is not None:
        task = group_choice(cfg, "task", cfg.get("_overrides", []))
        try:
            per_token = flops_per_token(cfg, ctx, bool(task_attr(task, "causal", False)))
        except (KeyError, TypeError, ValueError):  # a config without the sizes: not available
            per_token = None
        flops = None if per_token is None else per_token * tokens
    return {"tokens": tokens, "wall_s": wall, "flops": flops}


def seed_of(job: Job) -> Any:
    """The job's seed: its resolved config's, else (a job that left no folder) its override's."""
    seed = get(job.config, REPLICATE_KEY)
    for override in job.config.get("_overrides", []) if seed is None else []:
        if str(override).startswith(f"{REPLICATE_KEY}="):
            try:
                seed = yaml.safe_load(str(override).split("=", 1)[1])
            except yaml.YAMLError:
                seed = str(override).split("=", 1)[1]
    return seed


def row(job: Job) -> dict[str, Any]:
    """The job's row of summary.csv (COLUMNS)."""
    cfg, overrides = job.config, job.config.get("_overrides", [])
    metric = job.metric_name
    summary = job.summary or {}
    return {
        "job": job.name,
        "group": None,  # set when the sweep's jobs are grouped (attnzoo.analysis.groups)
        "mixer": group_choice(cfg, "mixer", overrides),
        "residual": residual_kind(cfg),
        "mlp": get(cfg, "model.mlp"),
        "norm": get(cfg, "model.norm"),
        "depth": get(cfg, "model.depth"),
        "task": group_choice(cfg, "task", overrides),
        "seed": seed_of(job),
        "final_val_loss": job.value("val/loss"),
        "metric": metric.removeprefix("val/") if metric else None,
        "final_metric": job.value(metric) if metric else None,
        # held-out test, and how many examples each whole-split final number covers (empty for a
        # run without the final evaluation: its val numbers are the last sampled ones)
        "final_test_loss": job.value("test/loss"),
        "final_test_metric": job.value("test/" + metric.removeprefix("val/")) if metric else None,
        "val_n": job.value("val/n"),
        "test_n": job.value("test/n"),
        "final_rank": job.value("rank/last"),
        **{f"final_{m}": job.final_measure(m) for m in OTHER_MEASURES},
        "steps_per_s": summary.get("steps_per_s"),
        "params": summary.get("params"),
        **budget(job),
        "status": job.status,
        "overrides": " ".join(str(o) for o in overrides),
        "note": "; ".join(job.notes),
    }
