"""The results pages' generated regions (attnzoo.pages, scripts/pages.py): the committed pages
are byte for byte what the committed tables give, a number changed in a table changes them, and
the words a region says (which paths are worst) follow its table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from csv_tables import alter

from attnzoo import pages
from attnzoo.pages import (
    architectures,
    bench,
    mixer_study,
    path_length,
    rank_ablation,
    rank_collapse,
    recall,
    sinks,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "pages.py"


def test_the_committed_pages_are_what_the_committed_tables_give(run_script):
    code, out, _ = run_script(SCRIPT, "--check")
    assert code == 0, out
    for page in pages.PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        assert text.startswith(pages.FIRST_LINE + "\n"), page
    named = {n for page in pages.PAGES for n in pages.regions_of((ROOT / page).read_text())}
    assert named == set(pages.REGIONS)  # every region is on a page, once rendered


def copy(tmp: Path) -> Path:
    """The pages and the committed tables, in a tree of their own."""
    for page in pages.PAGES:
        (tmp / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp / page)
    shutil.copytree(
        ROOT / "scripts" / "results",
        tmp / "scripts" / "results",
        ignore=shutil.ignore_patterns("*.png"),  # no page reads a figure
    )
    return tmp


TABLE = path_length.FOLDER / "path_length.csv"


def test_a_number_changed_in_a_table_changes_both_pages(tmp_path, run_script):
    root = copy(tmp_path)
    assert pages.stale(root) == []
    alter(root / TABLE, {"task": "sort", "k": "1"}, "metric", "0.4321")
    assert sorted(pages.stale(root)) == ["README.md", "docs/results.md"]
    pages.write(root)
    for page in pages.PAGES:
        assert "0.43" in (root / page).read_text(encoding="utf-8"), page
    assert pages.stale(root) == []


def test_which_paths_are_worst_is_read_from_the_table(tmp_path):
    """Sorting's longest paths lowest (as committed) is said so; with its paths of length 2 made
    the lowest the sentence names them instead."""
    root = copy(tmp_path)
    study = path_length.Study(root)
    longest = study.longest("sort")
    assert study.worst("sort") == longest
    assert "the longest paths score lowest" in " ".join(path_length.results_section(root).split())
    alter(root / TABLE, {"task": "sort", "k": "2"}, "metric", "0.01")
    text = " ".join(path_length.results_section(root).split())
    assert "On sorting, the 16 single-head paths" in text
    assert "the paths of length 2 score lowest (0.01)" in text
    assert "the longest paths score lowest" not in text.split("On sorting")[1].split(";")[0]


def test_an_unknown_region_is_refused_naming_the_known_ones():
    text = "<!-- begin generated: nosuch -->\nold\n<!-- end generated: nosuch -->\n"
    with pytest.raises(pages.PageError, match="region 'nosuch' is not one of path-length, "):
        pages.render(text, ROOT, "page.md")


def test_rendering_twice_changes_nothing_and_keeps_the_text_outside_the_regions(tmp_path):
    root = copy(tmp_path)
    text = (root / "README.md").read_text(encoding="utf-8")
    once = pages.render(text.replace("## Documentation", "## Documentation, edited"), root)
    assert pages.render(once, root) == once and "## Documentation, edited" in once
    assert once.startswith(pages.FIRST_LINE + "\n") and once.count(pages.FIRST_LINE) == 1


def test_check_exits_1_naming_a_stale_page_and_changes_nothing(tmp_path, monkeypatch, capsys):
    import runpy

    root = copy(tmp_path)
    alter(root / TABLE, {"task": "sort", "k": "1"}, "metric", "0.4321")
    before = (root / "README.md").read_bytes()
    monkeypatch.setattr(pages, "ROOT", root)
    monkeypatch.setattr("sys.argv", [str(SCRIPT), "--check"])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert ended.value.code == 1
    assert "README.md: not what the tables give" in capsys.readouterr().out
    assert (root / "README.md").read_bytes() == before


RATE = Path("scripts/results/rank_collapse/collapse_rate.csv")


def test_the_rank_collapse_headline_groups_the_tables_verdicts(tmp_path):
    """Fourier keeping rank is said with the others that keep it; its row made doubly
    exponential moves it to that group, and a softmax k outside [2.9, 3.1] drops "at the
    paper's cubic rate" from the headline and changes its k."""
    root = copy(tmp_path)
    text = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert "no collapse: pooling, identity, Fourier," in text
    alter(root / RATE, {"mixer": "fourier"}, "verdict", "collapses doubly exponentially")
    line = " ".join(rank_collapse.headline(root).split())
    assert "metric, Nyström, Fourier, linear attention with eps = 0 and FAVOR+" in line
    assert "no collapse: pooling, identity, the token MLP," in line
    alter(root / RATE, {"mixer": "scaled_dot"}, "k_high", "3.2")
    alter(root / RATE, {"mixer": "scaled_dot"}, "k", "3.15")
    line = " ".join(rank_collapse.headline(root).split())
    assert line.startswith("- **Rank collapse at init**") and "k is 3.01 to 3.15" in line
    assert pages.stale(root) == ["README.md", "docs/results.md"]  # the headline and the findings


ABLATION = rank_ablation.FOLDER / "rank_ablation.csv"
MLP_ON = {"mlp": "True", "norm": "layernorm"}


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_rank_ablation_text_counts_the_tables_verdicts(tmp_path):
    """No MLP-on configuration with a residual keeps stable rank (as committed); scaled-dot with
    rezero made to keep it is counted in the headline and named on the results page, and the
    pages go stale."""
    root = copy(tmp_path)
    headline = flat(rank_ablation.headline(root))
    assert "Stable rank is kept by none of the 63 configurations" in headline
    where = {"mixer": "scaled_dot", "residual": "rezero", **MLP_ON}
    alter(root / ABLATION, where, "trained_stable_rank_verdict", "kept")
    assert "Stable rank is kept by 1 of the 63 configurations" in flat(rank_ablation.headline(root))
    section = flat(rank_ablation.results_section(root))
    assert "Stable rank: partial in 60 of 63, kept in scaled-dot (rezero), collapsed in" in section
    assert sorted(pages.stale(root)) == ["README.md", "docs/results.md"]


def test_a_mixer_that_keeps_a_measure_without_a_residual_is_said_apart(tmp_path):
    """The six attention mixers without a residual collapse by all four measures (one group, as
    committed); local attention made to keep its relative residual is said on its own, and the
    headline no longer calls all six collapsed."""
    root = copy(tmp_path)
    assert "the 6 mixers with attention weights are collapsed by all four measures" in flat(
        rank_ablation.headline(root)
    )
    where = {"mixer": "local", "residual": "none", **MLP_ON}
    alter(root / ABLATION, where, "trained_relative_residual_verdict", "kept")
    headline = flat(rank_ablation.headline(root))
    assert "the 6 mixers" not in headline
    assert (
        "local attention: the relative residual kept, effective rank, stable rank and token "
        "similarity collapsed" in headline
    )


def test_the_rank_ablation_scope_is_the_runs_recorded_scope(tmp_path):
    """The budget the pages state is the one the table's header records: 400 steps as run,
    800 once the header says so."""
    import json

    root = copy(tmp_path)
    assert "400 AdamW steps at lr 0.001" in flat(rank_ablation.results_section(root))
    path = root / rank_ablation.FOLDER / "rank_ablation.json"
    header = json.loads(path.read_text())
    header["scope"]["max_steps"] = 800
    path.write_text(json.dumps(header))
    assert "800 AdamW steps" in flat(rank_ablation.results_section(root))
    assert "800 steps at one untuned learning rate" in flat(rank_ablation.headline(root))


COMPARISONS = mixer_study.REANALYSIS / "comparisons.csv"
POOLING = {"task": "shakespeare_char", "config": "pooling (train.lr=0.004)", "on": "test_loss"}


def test_a_p_value_changed_in_the_mixer_study_changes_its_sentence_and_table(tmp_path):
    """Pooling's Shakespeare comparison: its adjusted TOST p in a bullet, its interval in the
    table; changing either number in comparisons.csv changes the page."""
    root = copy(tmp_path)
    text = flat(mixer_study.shakespeare(root))
    assert "within ±0.05 nats** (Holm-adjusted TOST p = 0.049, 0.036)" in text
    alter(root / COMPARISONS, POOLING, "p_tost_adjusted", "0.0151")
    alter(root / COMPARISONS, POOLING, "diff_ci_high", "0.0105")
    text = flat(mixer_study.shakespeare(root))
    assert "(Holm-adjusted TOST p = 0.015, 0.036)" in text
    assert (
        "| pooling | 4e-3 | 1.785 [1.777, 1.792] | 0.479 [0.477, 0.482] | −0.007 [−0.023, +0.011]"
        in text
    )
    assert pages.stale(root) == ["docs/results.md"]


def test_a_claims_verdict_follows_the_comparison_it_rests_on(tmp_path):
    """Metric worse on Tiny Shakespeare: NLP-MetaFormer's "not much difference" is not supported;
    metric made within the margin, the claim holds, in the section and the README line."""
    root = copy(tmp_path)
    claim = '"metric trains with not much difference from a transformer."** At this budget it'
    assert f"{claim} is not supported at ±0.05 nats (worse for metric by +0.059 nats)" in flat(
        mixer_study.shakespeare(root)
    )
    where = {"task": "shakespeare_char", "config": "metric (train.lr=0.002)", "on": "test_loss"}
    alter(root / COMPARISONS, where, "verdict", "within margin")
    assert f"{claim} holds." in flat(mixer_study.shakespeare(root))
    assert 'from a transformer" holds. On IMDB' in flat(mixer_study.headline(root))


def test_the_mixer_studys_budget_is_its_runs_config_and_flattening_its_reports(tmp_path):
    """The steps the pages state are what the runs' recorded overrides compose to; a mixer whose
    report says its curve flattened is named apart from those that had not."""
    root = copy(tmp_path)
    assert "2,000 AdamW steps (100 warmup)" in flat(mixer_study.shakespeare(root))
    assert "1 block of width 128 with 4 heads, context 128, batch 32, 300 AdamW steps" in flat(
        mixer_study.imdb(root)
    )
    report = root / mixer_study.FOLDER / "mixer_ablation.md"
    text = report.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| pooling | 0.004 | 5 |"))
    report.write_text(text.replace(row, row.replace("| no |", "| yes |")), encoding="utf-8")
    said = flat(mixer_study.shakespeare(root))
    assert "the sampled validation loss of scaled-dot, quadratic, local attention," in said
    assert "pooling" not in said.split("**At this budget**")[1]


def test_a_model_whose_pure_attention_keeps_a_residual_is_said_apart(tmp_path):
    """BERT, ALBERT, XLNet and ViT reach float64's floor, GPT-2 ends at 0.013 (as committed);
    BERT's last layer set to 0.2 moves it out of the floor's list, with its value."""
    root = copy(tmp_path)
    line = flat(architectures.headline(root))
    assert "in BERT, ALBERT, XLNet and ViT pure attention falls to float64's floor" in line
    assert "GPT-2's ends at 0.013 after 12 layers" in line
    alter(
        root / architectures.FOLDER / "architectures.csv",
        {"model": "bert", "variant": "pure_attention", "layer": "12"},
        "relative_residual",
        "0.2",
    )
    line = flat(architectures.headline(root))
    assert "in ALBERT, XLNet and ViT pure attention falls" in line
    assert "BERT's ends at 0.2 after 12 layers; GPT-2's ends at 0.013" in line
    section = flat(architectures.results_section(root))
    assert "| bert | 0.57 → 0.40 |" in section and "4.8e−16 → 0.20 |" in section
    assert "**BERT's pure attention does not reach the floor.**" in section
    assert "In ALBERT, XLNet and ViT pure attention falls to float64's floor" in section


def test_the_architectures_findings_read_how_each_curve_falls(tmp_path):
    """As committed: XLNet singly exponential, ViT slowing before the floor; XLNet's curve made
    to fall three times as far each layer (doubly exponential) leaves its bullet, and GPT-2
    reaching the floor at its last layer joins the floor's list."""
    root = copy(tmp_path)
    text = flat(architectures.results_section(root))
    assert (
        "**XLNet's pure attention falls singly exponentially** (decrement ratio k = 0.97)" in text
    )
    assert "**ViT's pure attention slows before the floor**" in text
    table = root / architectures.FOLDER / "architectures.csv"
    # log10 r falls by 0.1, 0.3, 0.9, 2.7, ...: each decrement three times the last (k = 3)
    for layer, value in enumerate([1.0, 0.794, 0.631, 0.316, 0.0398, 7.9e-5, 6.3e-13, 1e-30]):
        where = {"model": "xlnet", "variant": "pure_attention", "layer": str(layer)}
        alter(table, where, "relative_residual", str(value))
    where = {"model": "gpt2", "variant": "pure_attention", "layer": "12"}
    alter(table, where, "relative_residual", "1e-15")
    text = flat(architectures.results_section(root))
    assert "XLNet's pure attention" not in text and "XLNet by layer 7" in text
    assert "**GPT-2's pure attention falls singly exponentially**" in text
    assert "BERT, ALBERT, GPT-2, XLNet and ViT" not in text  # the floor's list is in model order
    assert "In BERT, ALBERT, XLNet, GPT-2 and ViT pure attention falls to float64's floor" in text
    assert "GPT-2 by layer 12" in text


def test_the_benchmark_line_reads_its_table(tmp_path):
    root = copy(tmp_path)
    assert "val loss 1.770 at 1.03× the time of a plain PyTorch GPT" in flat(bench.bench(root))
    path = root / bench.BENCH
    assert "`scaled_dot` reaches 1.770 at 1.03× (meets both targets)" in flat(
        bench.results_section(root)
    )
    text = path.read_text(encoding="utf-8").replace("| 1.7698 | 107.7", "| 1.9123 | 107.7")
    path.write_text(text.replace("| 1.03x |", "| 1.10x |", 1), encoding="utf-8")
    assert "val loss 1.912 at 1.10× the time" in flat(bench.bench(root))
    section = flat(bench.results_section(root))
    assert "| scaled_dot | 816,193 | 1.912 | 66.4 | 0.986 | 1.10× | 0.37% |" in section
    assert "reaches 1.912 at 1.10× (meets the time target, not the loss target)" in section
    assert pages.stale(root) == ["README.md", "docs/results.md"]


def test_a_preset_changed_since_the_runs_is_refused_not_restated(tmp_path):
    """The mixer study's scope is composed from its runs' overrides; a run whose recorded tokens
    are not that config's steps × batch × context says the preset moved since."""
    root = copy(tmp_path)
    runs = root / mixer_study.REANALYSIS / "runs.csv"
    where = {"task": "imdb", "mixer": "identity", "seed": "0"}
    alter(runs, where, "tokens", "2457600")
    with pytest.raises(ValueError, match="imdb: the runs' overrides now compose to 1,228,800"):
        mixer_study.imdb(root)


SEEDS_TABLE = Path("scripts/results/rank_collapse/rank_collapse_seeds.csv")
LAMBDA_TABLE = Path("scripts/results/rank_collapse/lambda_skip.csv")


def test_the_rank_collapse_findings_follow_the_rate_table(tmp_path):
    """scaled-dot's k changed moves the softmax span and the table; Nyström no longer equal to
    scaled-dot is given its own row; local attention made doubly exponential is said so."""
    root = copy(tmp_path)
    text = flat(rank_collapse.findings(root))
    assert "collapse doubly exponentially: k = 3.01 to 3.02 over blocks 1–5" in text
    assert "**Nyström**'s row is scaled-dot's, number for number (k = 3.02)" in text
    alter(root / RATE, {"mixer": "scaled_dot"}, "k", "3.07")
    alter(root / RATE, {"mixer": "local"}, "verdict", "collapses doubly exponentially")
    text = flat(rank_collapse.findings(root))
    assert "k = 3.01 to 3.07 over blocks 1–5" in text
    assert "| scaled_dot | doubly exponential | 3.07 [3.00, 3.04]" in text
    assert "**Nyström** collapses doubly exponentially (k = 3.02 [3.00, 3.04]), not" in text
    assert "**local attention** collapses doubly exponentially (k = 0.95)" in text
    assert "docs/results.md" in pages.stale(root)


def test_the_lambda_sweep_is_grouped_by_what_each_stack_does(tmp_path):
    """Causal scaled-dot keeps rank at λ = ±1 only (as committed); made to keep it at 0.3 with
    no norm, it is said apart from its post-LN stack, with its new edge."""
    root = copy(tmp_path)
    text = flat(rank_collapse.options(root))
    assert "Causal scaled-dot with no norm or post-LN: rank kept at λ = −1 and 1" in text
    where = {"mixer": "scaled_dot (causal)", "lambda": "0.3", "norm": "none"}
    alter(root / LAMBDA_TABLE, where, "verdict", "no collapse")
    text = flat(rank_collapse.options(root))
    assert "Causal scaled-dot with no norm: rank kept at λ = −1, 0.3 and 1" in text
    assert "Causal scaled-dot with post-LN: rank kept at λ = −1 and 1" in text
    assert "is 0.01 at λ = 0.1 and 0.14 at λ = 0.3" in text


def test_a_learned_sink_is_zero_kv_at_init_only_while_the_tables_say_so(tmp_path):
    root = copy(tmp_path)
    assert "a learned sink's stacks are a zero_kv sink's, number for number" in flat(
        rank_collapse.options(root)
    )
    where = {
        "mixer": "scaled_dot (sink learned)",
        "variant": "pure",
        "norm": "none",
        "seed": "0",
        "depth": "1",
    }
    alter(root / SEEDS_TABLE, where, "relative_residual", "0.5")
    assert "number for number" not in flat(rank_collapse.options(root))


def test_what_one_family_changed_is_read_from_both_families(tmp_path):
    """Three verdicts weakened under the one family (as committed); pooling's Shakespeare verdict
    made "not resolved" in the reanalysis is a fourth, named with what it was."""
    root = copy(tmp_path)
    text = flat(mixer_study.family_paragraph(root))
    assert 'quadratic on Tiny Shakespeare from "within" to "not resolved"' in text
    assert "pooling" not in text
    alter(root / COMPARISONS, POOLING, "verdict", "not resolved")
    text = flat(mixer_study.family_paragraph(root))
    assert 'pooling on Tiny Shakespeare from "within" to "not resolved"' in text
    assert "**Holm, 84 hypotheses**, three for each of the 28 comparisons" in text


def test_a_sink_grown_in_the_tables_changes_the_verdict_words_on_both_pages(tmp_path):
    """A head of seed 0's block 1 ending at the planted sink's reading turns "no arm grows a
    first-token sink" into a count, at every cutoff."""
    root = copy(tmp_path)
    study = sinks.Study(root)
    where = {"arm": "zero_kv", "seed": "0", "layer": "1", "step": str(study.last)}
    alter(root / sinks.FOLDER / "layers.csv", where, "first_token_excess_max", "1.0")
    assert sorted(pages.stale(root)) == ["README.md", "docs/results.md"]
    pages.write(root)
    for page in pages.PAGES:
        text = " ".join((root / page).read_text(encoding="utf-8").split())
        assert "no arm grows a first-token sink" not in text
        assert f"zero_kv in 1 of {len(study.seeds)} seeds" in text


@pytest.mark.parametrize(
    ("reading", "grown"),
    [("1.0", [1, 1, 1]), ("0.6", [1, 1, 0]), ("0.3", [1, 0, 0]), ("0.0", [0, 0, 0])],
)
def test_the_sink_rule_reads_the_controls_and_says_where_it_hinges(tmp_path, reading, grown):
    """The rule counts a seed whose most sink-like head ends at or above a cutoff: a head at the
    planted sink's 1.0 is a sink at every cutoff from 0.25 to 0.75, one at its negative's 0 at
    none; between them the count depends on the cutoff, and the sentence says so."""
    root = copy(tmp_path)
    study = sinks.Study(root)
    path = root / sinks.FOLDER / "layers.csv"
    # every head at 0 at the end, then one head of one seed at `reading`
    alter(path, {"step": str(study.last)}, "first_token_excess_max", "0.0", every=True)
    where = {"arm": "gate", "seed": "1", "layer": "2", "step": str(study.last)}
    alter(path, where, "first_token_excess_max", reading)
    study = sinks.Study(root)
    assert [study.seeds_with_sink("gate", c) for c in sinks.CUTOFFS] == grown
    sentence = sinks.sink_sentence(study)
    if not any(grown):
        assert sentence.startswith("no arm grows a first-token sink")
    elif all(grown):
        assert f"gate in 1 of {len(study.seeds)} seeds" in sentence
    else:
        assert f"gate in 0 to 1 of {len(study.seeds)} seeds, depending on the cutoff" in sentence


RECALL_RUNS = recall.FOLDER / "runs.csv"


def recall_seed(root: Path, mixer: str, succeeded: bool) -> str:
    """A fresh seed of `mixer` whose committed test accuracy did (or did not) reach the study's
    threshold."""
    study = recall.Study(root)
    rows = [r for r in study.runs if r["mixer"] == mixer]
    return next(r["seed"] for r in rows if (float(r["final_test_metric"]) >= 0.9) == succeeded)


def test_the_recall_section_counts_each_mixers_successes_from_its_seeds(tmp_path):
    """A seed that recalled set to 0.5 test accuracy: one success fewer in the table, the
    sentence and the README line, its value in the table, and the failures' range."""
    root = copy(tmp_path)
    study = recall.Study(root)
    (cell,) = study.cells
    mixer = max(study.mixers, key=lambda m: study.reached(cell, m)[0])
    k, n = study.reached(cell, mixer)
    before = flat(recall.results_section(root))
    assert f"{recall.name(mixer)} in {k} of {n}" in before
    alter(
        root / RECALL_RUNS,
        {"mixer": mixer, "seed": recall_seed(root, mixer, True)},
        "final_test_metric",
        "0.5",
    )
    text = flat(recall.results_section(root))
    assert f"{recall.name(mixer)} in {k - 1} of {n}" in text
    assert f"| {mixer} | " in text and f"| {k - 1} of {n} |" in text and "0.500" in text
    assert f"{recall.name(mixer)} in {k - 1} of {n}" in flat(recall.headline(root))
    assert {"README.md", "docs/results.md"} <= set(pages.stale(root))


def test_a_recall_verdict_and_a_seed_still_moving_follow_their_tables(tmp_path):
    """A comparison made "worse" in the family is said so on both pages; a fresh seed whose
    last evaluation is 0.3 below the one before is named as still moving."""
    root = copy(tmp_path)
    study = recall.Study(root)
    other = next(m for m in study.mixers if m != study.reference)
    config = next(r["config"] for r in study.family if r["config"].startswith(other + " "))
    alter(root / recall.FOLDER / "comparisons.csv", {"config": config}, "verdict", "worse")
    assert f"{recall.name(other)} worse (Δ rate" in flat(recall.results_section(root))
    assert f"{recall.name(other)} worse (Δ rate" in flat(recall.headline(root))
    curves = root / recall.FOLDER / "curves.csv"
    last = max(int(r["step"]) for r in study.curves)
    point = {"arm": study.reference, "seed": "3", "step": str(last)}
    value = next(
        float(r["val_accuracy"]) for r in study.curves if all(r[k] == v for k, v in point.items())
    )
    alter(curves, point, "val_accuracy", str(value - 0.3))
    text = flat(recall.results_section(root))
    assert "Still moving at the end" in text
    assert (
        f"{recall.name(study.reference)} seed 3 (" in text
        or f"{recall.name(study.reference)} seeds" in text
    )


def test_the_recall_page_refuses_runs_whose_preset_has_changed(tmp_path):
    """Runs recorded with other tokens than their overrides compose to today: the preset has
    changed since the runs, and no page is written from them."""
    root = copy(tmp_path)
    row = recall.Study(root).runs[0]
    alter(root / RECALL_RUNS, {"job": row["job"]}, "tokens", "12345")
    with pytest.raises(recall.RecallPageError, match="the preset has changed"):
        recall.results_section(root)


def test_the_rank_collapse_scope_is_its_headers_and_must_match_its_tables(tmp_path):
    root = copy(tmp_path)
    header = root / "scripts/results/rank_collapse/rank_collapse.json"
    data = json.loads(header.read_text())
    assert "**5 seeds** (`--seeds`)" in flat(rank_collapse.scope(root))
    header.write_text(json.dumps(data | {"dim": 96}))
    assert "width 96, 4 heads" in flat(rank_collapse.scope(root))
    header.write_text(json.dumps(data | {"seeds": 6}))
    with pytest.raises(ValueError, match="the tables hold 5"):
        rank_collapse.scope(root)
