"""Reading runs and sweeps of attnzoo.train, and what a study concludes from them: seeds as
replicates with Student-t intervals, comparisons along an axis, the selection of a tuned value,
the keep/collapse verdicts on rank, the rate of collapse, and the figures.

    from attnzoo.analysis import load_sweep

    sweep = load_sweep("multirun/tune")              # one or more multirun folders
    for group in sweep.groups:                       # one per configuration, seeds as replicates
        ci = group.interval("val_loss")              # mean, std, Student-t interval over seeds
        print(group.name, ci.n, ci.mean, ci.low, ci.high)
    rows = sweep.compare("mixer", margin=0.05)       # each mixer against scaled_dot, Holm-corrected
    chosen = sweep.select("train.lr")                # the best learning rate per configuration

Modules, each readable alone: `metrics` (a run's metrics.jsonl and its rank keys), `runs` (a
job folder, a sweep folder, one row per job), `groups` (configurations and their intervals),
`compare` (comparisons along an axis against a fixed reference, corrected as a family), `selection` (a tuned value per configuration), `verdicts`
(what keeping rank means; claims in words), `fits` (the rate and kind of collapse), `controls` (mixers whose collapse is known), `figures`, `tables`
(how numbers are written), `sweep` (the Sweep object), `report` (the sweep summary's files).
The statistics are attnzoo.stats'.
"""

import importlib

# Each public name and the module it lives in, imported on first use: reading a run's metrics
# (attnzoo.analysis.metrics) does not import the statistics or the figures.
_HOME = {
    "comparisons": "compare",
    **dict.fromkeys(("collapse_kind", "decrement_ratio", "exponent_growth", "fit_rate"), "fits"),
    **dict.fromkeys(("Group", "group_jobs", "group_row"), "groups"),
    **dict.fromkeys(("parse_rank_key", "rank_key", "rank_values", "read_metrics"), "metrics"),
    "summarize": "report",
    **dict.fromkeys(("Job", "SweepWarning", "find_jobs", "load_job"), "runs"),
    "select": "selection",
    **dict.fromkeys(("Sweep", "load_sweep"), "sweep"),
    **dict.fromkeys(
        ("RankConfig", "claim_verdict", "kept_share", "rank_config", "verdict"), "verdicts"
    ),
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Group",
    "Job",
    "RankConfig",
    "Sweep",
    "SweepWarning",
    "claim_verdict",
    "collapse_kind",
    "comparisons",
    "decrement_ratio",
    "exponent_growth",
    "find_jobs",
    "fit_rate",
    "group_jobs",
    "group_row",
    "kept_share",
    "load_job",
    "load_sweep",
    "parse_rank_key",
    "rank_config",
    "rank_key",
    "rank_values",
    "read_metrics",
    "select",
    "summarize",
    "verdict",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
