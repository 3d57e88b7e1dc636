"""The results pages' generated regions (attnzoo.pages, scripts/pages.py): the committed pages
are byte for byte what the committed tables give, a number changed in a table changes them, and
the words a region says (which paths are worst) follow its table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from csv_tables import alter

from attnzoo import pages
from attnzoo.pages import path_length, rank_ablation, rank_collapse

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
    shutil.copytree(ROOT / "scripts" / "results", tmp / "scripts" / "results")
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
    assert pages.stale(root) == ["README.md"]


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
