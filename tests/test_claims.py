"""Every headline claim of README.md's Results and of docs/results.md holds on the committed
tables it rests on, and its page says it with the tables' numbers (attnzoo.claims). A table
altered by one number makes its claims fail, through the same check."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from csv_tables import alter

import attnzoo.claims
from attnzoo.claims import base

ROOT = Path(__file__).resolve().parents[1]
# every name the tests reach for, from the module that defines it
claims = SimpleNamespace(
    **{k: v for m in (base,) for k, v in vars(m).items()},
    CLAIMS=attnzoo.claims.CLAIMS,
)

IDS = [c.id for c in claims.CLAIMS]


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=IDS)
def test_every_claim_holds_on_its_committed_tables(claim) -> None:
    assert claims.check(claim) == []


def test_claims_have_unique_ids_and_rest_on_committed_tables() -> None:
    assert len(set(IDS)) == len(IDS)
    for c in claims.CLAIMS:
        assert c.tables, c.id
        assert c.page in (claims.README, claims.RESULTS_PAGE), c.id
        for t in c.tables:
            assert (ROOT / claims.RESULTS / t).is_file(), (c.id, t)


def test_a_claim_reads_only_the_tables_it_declares() -> None:
    tables = claims.Tables(ROOT, ("rank_collapse/collapse_rate.csv",))
    with pytest.raises(KeyError, match="not among the claim's tables"):
        tables.rows("rank_ablation/rank_ablation.csv")


def test_numbers_are_rounded_once_from_the_tables_precision() -> None:
    # 0.02148 rounds to 0.021; rounding its rounded 0.0215 again would give 0.022
    assert claims.fmt(0.02148, "+.3f") == "+0.021"
    assert claims.fmt(-0.00755, ".3f") == "−0.008"
    assert claims.fmt(-0.03505, ".1f", scale=100) == "−3.5"
    assert claims.fmt(0.04971, ".3g") == "0.0497"
    assert claims.span([3.0203, 3.0104, 3.0218], ".2f") == "3.01–3.02"
    assert claims.span([3.334, 3.331], ".2f") == "3.33"


def copy_tree(tmp: Path, tables: list[str]) -> Path:
    for page in (claims.README, claims.RESULTS_PAGE):
        (tmp / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp / page)
    for t in tables:
        (tmp / claims.RESULTS / t).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / claims.RESULTS / t, tmp / claims.RESULTS / t)
    return tmp


def claim(claim_id: str):
    return next(c for c in claims.CLAIMS if c.id == claim_id)


def test_a_sentence_edited_away_from_its_table_fails(tmp_path: Path) -> None:
    c = claim("recall-deltanet")
    root = copy_tree(tmp_path, list(c.tables))
    assert claims.check(c, root) == []
    page = root / claims.README
    text = page.read_text(encoding="utf-8")
    assert "DeltaNet recalls in every fresh seed (test" in text
    page.write_text(
        text.replace("DeltaNet recalls in every fresh seed", "DeltaNet recalls in most")
    )
    assert any("does not say" in p for p in claims.check(c, root))


def test_a_recall_seed_or_verdict_changed_in_its_tables_fails_its_claims(tmp_path: Path) -> None:
    """One of DeltaNet's fresh seeds at 0.95 breaks 'recalls in every fresh seed' (and the
    results page's row of it); a comparison resolved breaks 'no difference is resolved'."""
    from attnzoo.claims import recall

    runs, comparisons = recall.RUNS, recall.COMPARISONS
    root = copy_tree(tmp_path, [runs, comparisons, recall.STUDY])
    ids = ("recall-deltanet", "recall-table-deltanet", "recall-scaled-dot")
    assert all(claims.check(claim(i), root) == [] for i in ids)
    where = {"mixer": "deltanet", "seed": "2", "width": "64", "depth": "2"}
    alter(root / claims.RESULTS / runs, where, "final_test_metric", "0.95")
    assert any(
        "deltanet: a seed at 0.950, below 0.99" in p
        for p in claims.check(claim("recall-deltanet"), root)
    )
    assert claims.check(claim("recall-table-deltanet"), root)
    assert claims.check(claim("recall-scaled-dot"), root) == []
    where = {"config": "gla (train.lr=0.003)", "width": "64", "depth": "2"}
    alter(root / claims.RESULTS / comparisons, where, "verdict", "worse")
    assert any(
        "gla: 'worse', not 'not resolved'" in p
        for p in claims.check(claim("recall-scaled-dot"), root)
    )


def test_recall_at_width_32_changed_in_its_tables_fails_its_claims(tmp_path: Path) -> None:
    """A DeltaNet seed at width 32 as good as at 64 breaks "every DeltaNet seed ends below";
    a scaled-dot seed off the plateau breaks "stays on the plateau"; GLA resolved worse breaks
    "no mixer is resolved better or worse at either width"."""
    from attnzoo.claims import recall

    runs, comparisons = recall.RUNS, recall.COMPARISONS
    root = copy_tree(tmp_path, [runs, comparisons, recall.STUDY])
    ids = ("recall-narrow-page", "recall-narrow-verdicts")
    assert all(claims.check(claim(i), root) == [] for i in ids)
    alter(
        root / claims.RESULTS / runs,
        {"mixer": "deltanet", "seed": "0", "width": "32"},
        "final_test_metric",
        "0.999",
    )
    assert any("deltanet at width 32" in p for p in claims.check(claim("recall-narrow-page"), root))
    alter(
        root / claims.RESULTS / runs,
        {"mixer": "scaled_dot", "seed": "1", "width": "32"},
        "final_test_metric",
        "0.7",
    )
    assert any(
        "scaled_dot: a seed at 0.700, not below 0.2" in p
        for p in claims.check(claim("recall-narrow-page"), root)
    )
    alter(
        root / claims.RESULTS / comparisons,
        {"config": "gla (train.lr=0.003)", "width": "32"},
        "verdict",
        "worse",
    )
    assert any(
        "gla at width 32: 'worse'" in p for p in claims.check(claim("recall-narrow-verdicts"), root)
    )
    assert claims.check(claim("recall-one-block"), root) == []
    alter(
        root / claims.RESULTS / comparisons,
        {"config": "deltanet (train.lr=0.01)", "depth": "1"},
        "verdict",
        "not resolved",
    )
    assert any(
        f"deltanet: [('not resolved', {recall.FAMILY})]" in p
        for p in claims.check(claim("recall-one-block"), root)
    )


def test_recall_at_width_128_changed_in_its_tables_fails_its_claims(tmp_path: Path) -> None:
    """A DeltaNet seed at width 128 below 0.99 breaks "recalls in every seed"; Mamba-2's seeds
    there as good as at 64 break "its mean is lower" (and one falling at its last evaluation
    "still rising"); a GLA seed at width 32 off the plateau breaks "stay on the plateau at all
    three widths"; a verdict resolved at 128 breaks it too."""
    from attnzoo.claims import recall

    runs, comparisons = recall.RUNS, recall.COMPARISONS
    root = copy_tree(tmp_path, [runs, comparisons, recall.STUDY, recall.CURVES])
    ids = ("recall-wide", "recall-wide-page")
    assert all(claims.check(claim(i), root) == [] for i in ids)
    at = lambda mixer, seed, width: {"mixer": mixer, "seed": seed, "width": width, "depth": "2"}
    alter(root / claims.RESULTS / runs, at("deltanet", "1", "128"), "final_test_metric", "0.95")
    assert any(
        "deltanet: a seed at 0.950, below 0.99" in p
        for p in claims.check(claim("recall-wide"), root)
    )
    for seed in "012":
        alter(root / claims.RESULTS / runs, at("mamba2", seed, "128"), "final_test_metric", "0.95")
    assert any(
        "mamba2's mean at width 128" in p for p in claims.check(claim("recall-wide-page"), root)
    )
    alter(root / claims.RESULTS / runs, at("gla", "0", "32"), "final_test_metric", "0.7")
    assert any(
        "gla: a seed at 0.700, not below 0.2" in p for p in claims.check(claim("recall-wide"), root)
    )
    assert claims.check(claim("recall-wide-rising"), root) == []
    alter(
        root / claims.RESULTS / recall.CURVES,
        {**at("mamba2", "2", "128"), "step": "1000"},
        "val_accuracy",
        "0.7",
    )
    assert any(
        "mamba2 seed 2: last evaluations" in p
        for p in claims.check(claim("recall-wide-rising"), root)
    )
    alter(
        root / claims.RESULTS / comparisons,
        {"config": "linear (train.lr=0.000333)", "width": "128"},
        "verdict",
        "worse",
    )
    assert any(
        "linear: 'worse', not 'not resolved'" in p for p in claims.check(claim("recall-wide"), root)
    )
