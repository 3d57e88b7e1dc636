"""A mixer from the user's own module, with no edit to attnzoo: a plain nn.Module in a file on
PYTHONPATH, named by `_target_` in a YAML of the user's own config folder on `hydra.searchpath`.
It trains, is measured (the attention measures n/a), sweeps, and a typo'd option fails before any
work naming the key; the features it has no method for say "not available for this mixer"."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnzoo import Model, ModelConfig, rank_profile
from attnzoo.attention_maps import attention_maps, has_attention, learned_matrices
from attnzoo.config import ConfigError, mixer_label
from attnzoo.flops import flops_formula, mixer_flops_per_token
from attnzoo.mixers import MIXERS, build_mixer, mixer_class, mixer_options
from attnzoo.tracking import read_metrics
from attnzoo.train import compose, run

ROOT = Path(__file__).resolve().parents[1]

SHIFTMIX = '''
import torch
from torch import nn


class Shift(nn.Module):
    """Each token gets its `shift`-th predecessor's vector (cyclically), through a linear map."""

    def __init__(self, dim, heads, causal, impl, shift=1):
        super().__init__()
        self.shift = shift
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, key_padding_mask=None):
        return self.proj(torch.roll(x, self.shift, dims=1))
'''
SHIFT_YAML = "_target_: shiftmix.Shift\nshift: 1\n"
TINY = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "train.max_steps=6",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "train.log_every=3",
    "train.eval_every=3",
    "train.eval_batches=1",
    "train.eval_batch_size=512",  # the final evaluation in a few batches
    "train.ckpt_every=100",
    "train.probe_batch_size=2",
    "train.progress=false",
    "logger.mode=disabled",
    "logger.media_budget=0",
]


def sized(name: str, n: int = 32) -> dict:
    """The `max_len` a Model gives a mixer that takes one (token_mlp), for one built alone."""
    return {"max_len": n} if "max_len" in mixer_options(name) else {}


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """shiftmix.py and my_conf/mixer/shift.yaml in a folder outside the checkout, importable."""
    home = tmp_path / "user"
    (home / "my_conf" / "mixer").mkdir(parents=True)
    (home / "shiftmix.py").write_text(textwrap.dedent(SHIFTMIX))
    (home / "my_conf" / "mixer" / "shift.yaml").write_text(SHIFT_YAML)
    monkeypatch.syspath_prepend(str(home))
    sys.modules.pop("shiftmix", None)
    return home


def _searchpath(home: Path) -> str:
    return f"hydra.searchpath=[file://{home / 'my_conf'}]"


def test_a_class_by_its_import_path_builds_and_lacks_only_the_optional_features(user_code):
    cls = mixer_class("shiftmix.Shift")
    assert cls.__name__ == "Shift" and cls not in MIXERS.values()
    assert mixer_label({"_target_": "shiftmix.Shift"}) == "shift"
    assert mixer_label({"_target_": "pkg.mod.MyLongMixer"}) == "my_long_mixer"
    assert mixer_label({"_target_": "pkg.mod.MyLongMixer", "name": "mine"}) == "mine"
    with pytest.raises(
        ValueError, match=r"has no option\(s\) \['bogus'\]; its options are \['shift'\]"
    ):
        build_mixer("shiftmix.Shift", dim=8, bogus=1)
    with pytest.raises(ValueError, match="cannot be imported.*PYTHONPATH"):
        mixer_class("nosuchmodule.Shift")
    (user_code / "brokenmix.py").write_text("import nosuchdependency\n")
    with pytest.raises(ValueError, match="No module named 'nosuchdependency'"):
        mixer_class("brokenmix.Mixer")  # the user's module's own import error, not "no brokenmix"
    (user_code / "narrowmix.py").write_text(
        "from torch import nn\n\nclass Narrow(nn.Module):\n    def __init__(self, dim):\n"
        "        super().__init__()\n"
    )
    with pytest.raises(
        ValueError, match=r"must take dim, heads, causal, impl.*\['heads', 'causal'"
    ):
        build_mixer("narrowmix.Narrow", dim=8)
    x = torch.randn(2, 5, 8)
    mixer = build_mixer("shiftmix.Shift", dim=8, shift=2)
    assert torch.equal(mixer(x), mixer.proj(x.roll(2, dims=1)))

    cfg = ModelConfig(dim=8, depth=3, heads=2, mixer="shiftmix.Shift", mixer_options={"shift": 1})
    model = Model(cfg, out_features=4, max_len=6, vocab_size=7)
    tokens = torch.randint(0, 7, (3, 6))
    profile = rank_profile(model, tokens, measures=None)
    assert all(math.isnan(v) for v in profile.measures["attention_entropy"])
    for name in ("relative_residual", "effective_rank", "stable_rank", "token_similarity"):
        assert all(math.isfinite(v) for v in profile.measures[name]), name
    assert not has_attention(model.blocks[0].mixer)
    assert attention_maps(model, tokens) == [] and learned_matrices(model) == {}
    assert flops_formula("shiftmix.Shift") is None
    with pytest.raises(ValueError, match="no FLOP formula for mixer 'shiftmix.Shift'"):
        mixer_flops_per_token("shiftmix.Shift", 8, 2, 6)


def test_the_package_mixers_describe_themselves():
    """The methods the features read: attention probabilities that are rows of a distribution
    unless the class says they are not (causal ones where the mixer can be causal), on the
    classes themselves."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    mask = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    for name, cls in MIXERS.items():
        torch.manual_seed(1)  # each mixer's weights, whatever the registry's order
        causal = getattr(cls, "supports_causal", True)
        mixer = build_mixer(name, dim=8, heads=2, causal=causal, impl="torch", **sized(name))
        if not has_attention(mixer):
            continue
        probs = mixer.attention_probs(x, mask)
        assert probs.shape == (2, 2, 6, 6), name
        if getattr(cls, "rows_are_distributions", True):  # else a hidden attention matrix
            torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 6))
        assert not causal or probs.triu(1).abs().max() == 0, name  # causal
        assert probs[1, :, :, 4:].abs().max() == 0, name  # padding keys get nothing


def test_a_user_mixer_composes_names_its_runs_and_is_checked_against_its_class(user_code, tmp_path):
    cfg = compose([_searchpath(user_code), "mixer=shift", "mixer.shift=2", *TINY])
    assert dict(cfg.mixer) == {"_target_": "shiftmix.Shift", "shift": 2}
    assert mixer_label(cfg.mixer) == "shift"
    bad = compose([_searchpath(user_code), "mixer=shift", "mixer.bogus=1", *TINY])
    with pytest.raises(ConfigError, match=r"mixer.bogus=1 is not allowed.*options are \['shift'\]"):
        run(bad, tmp_path / "bad")
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()
    no_flops = compose([_searchpath(user_code), "mixer=shift", "train.max_flops=1e9", *TINY])
    with pytest.raises(
        ConfigError, match="train.max_flops=1e\\+09: mixer=shift .*no training FLOPs"
    ):
        run(no_flops, tmp_path / "flops")


def _env(home: Path, cwd: Path) -> dict[str, str]:
    """The user's folder on PYTHONPATH, W&B off and its files kept in the test's folder."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(home), os.environ.get("PYTHONPATH", "")]),
        "WANDB_MODE": "disabled",
        "WANDB_DIR": str(cwd),
    }


def _train(
    args: list[str], home: Path, cwd: Path, multirun: bool = False
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnzoo.train", *(["-m"] if multirun else [])]
        + [_searchpath(home), "mixer=shift", *TINY, *args],
        capture_output=True,
        text=True,
        env=_env(home, cwd),
        cwd=cwd,
        timeout=300,
    )


@pytest.mark.slow  # two subprocess runs; the user mixer's in-process tests stay
def test_a_user_mixer_trains_from_the_command_line_and_a_typo_leaves_nothing(user_code, tmp_path):
    run_dir = tmp_path / "run"
    out = _train(["mixer.shift=2", f"hydra.run.dir={run_dir}"], user_code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "rank/attention_entropy: not available for this mixer" in out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 6
    assert summary["config_group"].startswith("sort-shift-")
    assert summary["wandb"]["job_type"] == "shift" and "mixer:shift" in summary["wandb"]["tags"]
    assert summary["compute"]["flops"] is None
    last = read_metrics(run_dir / "metrics.jsonl")[-1]
    for name in ("relative_residual", "effective_rank", "stable_rank", "token_similarity"):
        assert math.isfinite(last[f"rank/{name}/layer_2"]), name
    assert not any(k.startswith("rank/attention_entropy") for k in last)  # n/a is left out

    typo_dir = tmp_path / "typo"
    out = _train(["mixer.bogus=1", f"hydra.run.dir={typo_dir}"], user_code, tmp_path)
    assert out.returncode == 2, out.stderr
    assert "mixer.bogus=1" in out.stderr and "'shift'" in out.stderr
    assert not typo_dir.exists()


@pytest.mark.slow
def test_a_user_mixer_sweeps(user_code, tmp_path):
    sweep = tmp_path / "sweep"
    out = _train(["mixer.shift=1,2", f"hydra.sweep.dir={sweep}"], user_code, tmp_path, True)
    assert out.returncode == 0, out.stderr
    groups = set()
    for job in ("mixer.shift=1", "mixer.shift=2"):  # job folders named by the swept values
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["status"] == "completed"
        groups.add(summary["config_group"])
    assert len(groups) == 2 and all(g.startswith("sort-shift-") for g in groups)
    # the sweep summary reads it like any other: one row per job, its FLOPs not available
    summarize = [sys.executable, str(ROOT / "scripts" / "summarize.py"), str(sweep)]
    out = subprocess.run(
        summarize, capture_output=True, text=True, env=_env(user_code, tmp_path), timeout=300
    )
    assert out.returncode == 0, out.stderr
    with (sweep / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["job"] for r in rows] == ["mixer.shift=1", "mixer.shift=2"]
    assert {r["mixer"] for r in rows} == {"shift"}
    assert all(r["status"] == "completed" and r["flops"] == "" for r in rows), rows
    assert sorted("mixer.shift=2" in r["overrides"] for r in rows) == [False, True], rows


def test_the_mixer_class_is_part_of_the_configuration():
    """A user's class under a package mixer's name is another configuration: another W&B group
    (the config hash), and its checkpoint does not resume the package mixer's run."""
    from attnzoo.replicates import config_hash
    from attnzoo.train.resume import check_same_run

    now = {
        "mixer": {"name": "metric", "_target_": "attnzoo.mixers.softmax.MetricTensorAttention"},
        "model": {"dim": 16},
        "task": {"name": "sort"},
        "train": {"seed": 0},
    }
    other = {**now, "mixer": {"name": "metric", "_target_": "mine.Metric"}}
    assert config_hash(other) != config_hash(now)
    check_same_run(now, now)
    with pytest.raises(ConfigError, match="mixer._target_"):
        check_same_run(now, other)
