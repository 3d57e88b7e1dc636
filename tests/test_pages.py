"""The results pages' generated regions (attnzoo.pages, scripts/pages.py): the committed pages
are byte for byte what the committed tables give, a number changed in a table changes them, and
the words a region says (which paths are worst) follow its table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from csv_tables import alter

from attnzoo import pages
from attnzoo.pages import path_length, rank_collapse

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
