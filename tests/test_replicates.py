"""Replicates of one configuration share a W&B group: the trainer names it from the config without
the seed (attnzoo.replicates, the definition attnzoo.analysis groups by), and the offline run
files carry it."""

from __future__ import annotations

import csv
import json

import pytest
from omegaconf import OmegaConf
from wandb_files import run_record

from attnzoo import analysis, replicates
from attnzoo.train import compose, run

TINY = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "train.batch_size=4",
    "train.max_steps=2",
    "train.warmup_steps=0",
    "train.log_every=1",
    "train.eval_every=2",
    "train.eval_batches=1",
    "train.eval_batch_size=512",  # the final evaluation in a few batches
    "train.probe_batch_size=2",
    "train.progress=false",
    "logger.media_budget=0",
    "logger.attention_maps=false",
]


@pytest.fixture(autouse=True)
def _wandb_env(tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def plain(*overrides: str) -> dict:
    """The resolved config as the trainer holds it."""
    return OmegaConf.to_container(compose([*TINY, *overrides]), resolve=True, enum_to_str=True)


def test_group_ignores_the_seed_and_where_a_run_logs_but_no_other_key():
    name = replicates.group_name(plain())
    assert name.startswith("sort-scaled_dot-") and len(name.rsplit("-", 1)[1]) == 8
    for same in (
        ["train.seed=7"],
        ["logger.project=other", "train.threads=1"],
        ["train.resume=true"],
    ):
        assert replicates.group_name(plain(*same)) == name, same
    others = [["train.lr=1e-3"], ["mixer=metric"], ["model.dim=32"], ["task.seq_len=12"]]
    names = {replicates.group_name(plain(*o)) for o in others}
    assert name not in names and len(names) == len(others)
    assert replicates.group_name(plain("model.residual=none", "model.norm=rmsnorm")).startswith(
        "sort-scaled_dot-residual_none-norm_rmsnorm-"
    )
    # the analysis groups with the very same definition
    assert analysis.report.NON_SEMANTIC is replicates.NON_SEMANTIC
    assert analysis.groups.semantic_config is replicates.semantic_config


@pytest.mark.slow  # four subprocess runs with W&B offline
def test_offline_runs_that_differ_only_in_seed_share_a_group(tmp_path):
    sweep = tmp_path / "sweep"
    jobs = {
        "0": ["train.seed=0"],
        "1": ["train.seed=1"],  # a replicate of 0
        "2": ["train.seed=0", "train.lr=1e-3"],  # another configuration
        "3": ["train.seed=0", "model.residual=none"],  # and another, with an ablation
    }
    records = {}
    for job, overrides in jobs.items():
        cfg = compose([*TINY, "logger.mode=offline", "logger.tags=[mine]", *overrides])
        summary = run(cfg, sweep / job)
        assert summary["status"] == "completed" and summary["wandb"]["mode"] == "offline"
        records[job] = run_record(sweep / job)
        assert records[job].run_group == summary["config_group"] == summary["wandb"]["group"]
    groups = {job: r.run_group for job, r in records.items()}
    assert groups["0"] == groups["1"]
    assert len({groups["0"], groups["2"], groups["3"]}) == 3
    assert groups["3"].startswith("sort-scaled_dot-residual_none-")
    assert records["0"].job_type == "scaled_dot"
    assert list(records["0"].tags) == ["task:sort", "mixer:scaled_dot", "ablation:none", "mine"]
    assert list(records["3"].tags)[:3] == ["task:sort", "mixer:scaled_dot", "residual:none"]
    # the sweep summary names the same groups
    analysis.summarize(sweep, tmp_path / "report")
    rows = list(csv.DictReader((tmp_path / "report" / "groups.csv").open()))
    assert sorted(r["wandb_group"] for r in rows) == sorted(set(groups.values()))
    assert {r["n_jobs"] for r in rows if r["wandb_group"] == groups["0"]} == {"2"}
    # ... and, since the runs used W&B, logs the table to an offline summary run beside them
    (table_file,) = (tmp_path / "report" / "wandb").glob(
        "offline-run-*/files/media/table/groups_*.table.json"
    )
    table = json.loads(table_file.read_text())
    column = table["columns"].index("wandb_group")
    assert sorted(row[column] for row in table["data"]) == sorted(r["wandb_group"] for r in rows)
    assert (
        table["columns"][:3] == ["group", "model.residual", "train.lr"]
        and "val_loss_ci_low" in table["columns"]
    )
    (summary_run,) = (tmp_path / "report").glob("wandb/offline-run-*")
    record = run_record(summary_run.parent.parent)
    assert record.job_type == "summary" and "sweep:sweep" in record.tags


def test_an_explicit_logger_group_wins(tmp_path):
    summary = run(compose([*TINY, "logger.mode=offline", "logger.group=mine"]), tmp_path / "r")
    assert run_record(tmp_path / "r").run_group == "mine"
    assert summary["config_group"].startswith("sort-scaled_dot-")
