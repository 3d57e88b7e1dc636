"""The trainer's collapse measures: `train.rank_measures` picks what the probe logs as
`rank/<measure>/layer_<k>` (at init and at every evaluation), n/a is never logged, a bad name
stops the run before any work, and the rank-decay figure has one panel per measure."""

import math

import pytest
import torch

from attnzoo.config import ConfigError
from attnzoo.rank import MEASURES, rank_profile
from attnzoo.tracking import measures_figure, read_metrics
from attnzoo.train import build_model, compose, probe_batch, rank_record, run
from attnzoo.train.build import build_task_from

TINY = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "train.batch_size=8",
    "train.max_steps=10",
    "train.warmup_steps=2",
    "train.log_every=5",
    "train.eval_every=5",
    "train.eval_batches=1",
    "train.eval_batch_size=512",  # the final evaluation in a few batches
    "train.ckpt_every=10",
    "train.probe_batch_size=4",
    "train.progress=false",
    "logger.mode=disabled",
]


def rank_keys(record: dict) -> set[str]:
    return {k for k in record if k.startswith("rank/")}


def evals(run_dir) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "val/loss" in r]


def test_chosen_measures_are_exactly_the_ones_logged(tmp_path):
    run(compose([*TINY, "train.rank_measures=[relative_residual,effective_rank]"]), tmp_path)
    records = evals(tmp_path)
    assert [r["step"] for r in records] == [0, 5, 10]  # the init probe, then every evaluation
    legacy = {"rank/last", *(f"rank/layer_{k}" for k in range(3))}
    chosen = {
        f"rank/{m}/layer_{k}" for m in ("relative_residual", "effective_rank") for k in range(3)
    }
    for r in records:
        assert rank_keys(r) == legacy | chosen
        for k in range(3):  # the relative residual under both names is one number
            assert r[f"rank/relative_residual/layer_{k}"] == r[f"rank/layer_{k}"]
            assert 1 <= r[f"rank/effective_rank/layer_{k}"] <= 8  # tokens of sort's sequence


def test_a_bad_measure_name_stops_the_run_before_any_work(tmp_path):
    cfg = compose([*TINY, "train.rank_measures=[relative_residual,effective_rnak]"])
    with pytest.raises(ConfigError) as err:
        run(cfg, tmp_path / "run")
    message = str(err.value)
    assert "train.rank_measures" in message and "'effective_rnak'" in message
    assert all(name in message for name in MEASURES)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("mixer", ["scaled_dot", "pooling"])
def test_the_default_logs_every_measure_that_applies_and_no_nan(tmp_path, mixer):
    run(compose([*TINY, f"mixer={mixer}", "train.max_steps=5"]), tmp_path)
    records = evals(tmp_path)
    applies = [m for m in MEASURES if mixer == "scaled_dot" or m != "attention_entropy"]
    for r in records:
        logged = {k.split("/")[1] for k in rank_keys(r) if k.count("/") == 2}
        assert logged == set(applies)
        assert all(isinstance(r[k], float) and math.isfinite(r[k]) for k in rank_keys(r))
        if mixer == "scaled_dot":  # the embedding is no attention's output: n/a, left out
            assert "rank/attention_entropy/layer_0" not in r
            assert 0 < r["rank/attention_entropy/layer_2"] <= math.log(8) + 1e-9
    assert (tmp_path / "rank_decay.png").stat().st_size > 1000


def test_probe_matches_rank_profile_and_unwraps_a_compiled_model(tmp_path):
    cfg = compose([*TINY])
    task = build_task_from(cfg, tmp_path)
    model = build_model(cfg, task)
    probe = probe_batch(task, cfg, torch.device("cpu"))
    measures = list(MEASURES)
    record = rank_record(torch.compile(model), probe, measures)  # probed eagerly: no compile
    profile = rank_profile(model, probe.inputs, probe.key_padding_mask, measures=measures)
    assert record == {
        **{f"rank/layer_{k}": v for k, v in enumerate(profile.mean)},
        "rank/last": profile.mean[-1],
        **profile.log_dict(),
    }


def test_rank_figure_has_a_panel_per_measure_and_none_for_a_measure_never_applicable():
    history = [
        (
            0,
            {
                "relative_residual": [1.0, 0.1],
                "effective_rank": [4.0, 2.0],
                "attention_entropy": [math.nan, 1.5],
            },
        ),
        (
            5,
            {
                "relative_residual": [1.0, 0.2],
                "effective_rank": [4.0, 3.0],
                "attention_entropy": [math.nan, 1.2],
            },
        ),
    ]
    fig = measures_figure(history, title="t")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [
        "relative residual",
        "effective rank",
        "attention entropy",
    ]
    assert shown[0].get_yscale() == "log" and len(shown[0].lines) == 2
    pooled = [(s, {**v, "attention_entropy": [math.nan, math.nan]}) for s, v in history]
    shown = [ax for ax in measures_figure(pooled).axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["relative residual", "effective rank"]


def test_san_takes_a_residual_variant_on_top():
    from attnzoo.config import model_config
    from attnzoo.residual import resolve

    def kind(*overrides: str) -> str:
        return resolve(model_config(compose(["model=san", *overrides]), causal=False)).kind

    assert kind() == "none"
    assert kind("model.residual=rezero") == "rezero"
    assert kind("model.residual=add") == "add"
