"""The README and the docs/ pages are what a user reads first: every relative link (and anchor)
resolves, every file, script, module, test and config choice they name exists, every training
command they show composes, and the README stays a short front page.

The names are read from the text with regular expressions, so a page that gains a command is
checked without touching this file.
"""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
PAGE_IDS = [str(p.relative_to(ROOT)) for p in PAGES]

# README.md is the front page; everything longer goes to docs/. Its length is what a reader sees:
# the lines of HTML comments alone (the generated regions' markers) do not count.
README_MAX_LINES = 250
# A user's document names no development machine and no tracker entry.
FORBIDDEN = {
    r"/work/": "a development machine's path",
    r"\.\./shared\b": "a development machine's path",
    r"\bissues? #?\d+": "a tracker number",
    r"(?<![\w&])#\d+\b": "a tracker number",
    r"\bthis session\b": "development history",
    r"\bsince that baseline\b": "development history",
}

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
# Paths in the repository that a page names in prose or in a command.
PATH = re.compile(
    r"(?<![\w./-])((?:scripts|tests|conf|kernels|attnzoo|docs|\.ci)/[\w./-]*(?:::\w+)?)"
)
BARE_TEST = re.compile(r"`(test_\w+)`")
MODULE_RUN = re.compile(r"-m[ \t]+(attnzoo(?:\.\w+)*)")
DOTTED = re.compile(r"(?<![\w.])(attnzoo(?:\.\w+)+)")
FROM_IMPORT = re.compile(r"^\s*from\s+(attnzoo(?:\.\w+)*)\s+import\s+([\w, ]+)", re.M)
SCRIPT_RUN = re.compile(r"python3?[ \t]+(scripts/[\w/]+\.py)([^;&|]*)")
TRAIN_COMMAND = re.compile(r"-m[ \t]+attnzoo\.train\b")
# Placeholders the pages use in commands.
PLACEHOLDERS = re.compile(r"<[^>]*>|\.\.\.|DATA_DIR|RUN_DIR|MULTIRUN_DIR|path/to/")
CONF_GROUPS = {
    str(d.relative_to(ROOT / "conf")) for d in (ROOT / "conf").rglob("*") if d.is_dir()
} - {"__pycache__"}
# Installed package name -> folder in the checkout (pyproject's package-dir).
PACKAGE_DIRS = {"attnzoo.kernels": "kernels", "attnzoo.conf": "conf", "attnzoo": "attnzoo"}


def text_of(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def inline_code(text: str) -> list[str]:
    """The inline code spans outside the code blocks, each on one line (a span may wrap)."""
    return [" ".join(c.split()) for c in INLINE_CODE.findall(FENCE.sub("", text))]


def without_code(text: str) -> str:
    """The page without its fenced code blocks and inline code (links there are not links)."""
    text = FENCE.sub("", text)
    return INLINE_CODE.sub("", text)


def github_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (lower case, punctuation dropped, spaces to
    hyphens, a -1, -2 suffix on repeats)."""
    seen: dict[str, int] = {}
    anchors = set()
    for _, title in HEADING.findall(FENCE.sub("", text_of(page))):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def broken_links(page: Path) -> list[str]:
    """Each relative link of the page whose file (or heading anchor) does not exist."""
    broken = []
    for target in LINK.findall(without_code(text_of(page))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in github_anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    return broken


def module_path(module: str) -> Path:
    """The checkout's folder-or-file stem of an attnzoo module (without .py)."""
    for package in sorted(PACKAGE_DIRS, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            rest = module[len(package) :].lstrip(".").split(".") if module != package else []
            return ROOT.joinpath(PACKAGE_DIRS[package], *rest)
    raise AssertionError(module)


def missing_names(page: Path) -> list[str]:
    """Each repository path, test, runnable module or config choice the page names that does
    not exist."""
    text = text_of(page)
    missing = []
    for name in sorted(set(PATH.findall(text))):
        name = name.rstrip(".,;:")
        path, _, test = name.partition("::")
        if not (ROOT / path).exists():
            missing.append(f"{name}: no such file or folder")
        elif test and not re.search(
            rf"^\s*(async\s+)?def {test}\b", (ROOT / path).read_text(), re.M
        ):
            missing.append(f"{name}: no test {test} in {path}")
    tests_text = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    for test in sorted(set(BARE_TEST.findall(text))):
        if not re.search(rf"^\s*def {test}\b", tests_text, re.M):
            missing.append(f"{test}: no such test under tests/")
    for module in sorted(set(MODULE_RUN.findall(text))):
        stem = module_path(module)
        if not (stem.with_suffix(".py").is_file() or (stem / "__main__.py").is_file()):
            missing.append(f"python -m {module}: no {stem.name}.py or {stem.name}/__main__.py")
    for group, value in config_choices(text):
        if not (ROOT / "conf" / group / f"{value}.yaml").is_file():
            missing.append(f"{group}={value}: no conf/{group}/{value}.yaml")
    for script, flag in script_flags(text):
        source = script_source(ROOT / script)
        positive = "--" + flag[len("--no-") :] if flag.startswith("--no-") else flag
        if f'"{flag}"' not in source and f'"{positive}"' not in source:
            missing.append(f"python {script} {flag}: {script} has no option {flag}")
    return missing


def script_source(path: Path) -> str:
    """A script's text with that of the attnzoo modules it imports (`from attnzoo.studies import
    ...`; a package: every module of it), where options shared by several scripts are declared."""
    if not path.is_file():
        return ""
    text = path.read_text()
    modules = re.findall(r"^from (attnzoo(?:\.\w+)*) import", text, re.M)
    files = [
        f
        for stem in map(module_path, modules)
        for f in ([stem.with_suffix(".py")] if not stem.is_dir() else sorted(stem.glob("*.py")))
        if f.is_file()
    ]
    return "\n".join([text] + [f.read_text() for f in files])


def script_flags(text: str) -> Iterator[tuple[str, str]]:
    """(script, --option) for every option of a `python scripts/x.py ...` command of the page,
    in code blocks (a trailing backslash continues the line) and in inline code."""
    code = [b.group(0).replace("\\\n", " ") for b in FENCE.finditer(text)]
    code += inline_code(text)
    for chunk in code:
        for line in chunk.splitlines():
            for match in SCRIPT_RUN.finditer(line.split(" #", 1)[0]):
                for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", match.group(2)):
                    yield match.group(1), flag


def command_lines(text: str) -> Iterator[str]:
    """Every `python -m attnzoo.train ...` command of the page: in code blocks, and in inline
    code in the prose."""
    for block in FENCE.finditer(text):
        for line in block.group(0).splitlines():
            if TRAIN_COMMAND.search(line):
                yield line.split("#", 1)[0] if " #" in line else line
    for code in inline_code(text):
        if TRAIN_COMMAND.search(code):
            yield code


def overrides_of(line: str) -> list[str]:
    """The Hydra overrides of one command line (after `-m attnzoo.train`)."""
    after = TRAIN_COMMAND.split(line, maxsplit=1)[1]
    try:
        words = shlex.split(after)
    except ValueError:
        words = after.split()
    return [w for w in words if "=" in w and not w.startswith("-")]


def own_configs(line: str) -> bool:
    """A command with its own `hydra.searchpath` picks configs from the user's folder, which the
    page shows beside it and this checkout does not have (tests/test_user_mixer.py runs one)."""
    return any(o.startswith("hydra.searchpath=") for o in overrides_of(line))


def config_choices(text: str) -> Iterator[tuple[str, str]]:
    """(group, choice) for every `group=a,b` override of a config group in a training command."""
    for line in command_lines(text):
        if own_configs(line):
            continue
        for override in overrides_of(line):
            key, _, values = override.partition("=")
            if key in CONF_GROUPS:
                for value in values.split(","):
                    if not PLACEHOLDERS.search(value):
                        yield key, value


def composable_overrides(line: str) -> list[str] | None:
    """The overrides `compose` can check (no hydra.* keys, sweeps reduced to their first value,
    placeholders filled in), or None for a command that only shows a pattern or uses the user's
    own configs."""
    if own_configs(line):
        return None
    overrides = []
    for override in overrides_of(line):
        key, _, value = override.partition("=")
        if key.startswith("hydra"):
            continue
        if PLACEHOLDERS.search(value):
            if key != "data_dir":
                return None
            value = "some/data"
        overrides.append(f"{key}={value.split(',')[0]}")
    return overrides


def missing_python_names(page: Path) -> list[str]:
    """Each `attnzoo.x.y` the page names (in prose or an import) that cannot be imported or
    looked up."""
    text = text_of(page)
    wanted = set(DOTTED.findall(text))
    for module, names in FROM_IMPORT.findall(text):
        wanted.update(f"{module}.{n.strip()}" for n in names.split(",") if n.strip())
    missing = []
    for dotted in sorted(wanted):
        parts = dotted.split(".")
        obj, error = None, None
        for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ModuleNotFoundError as err:
                error = err
                continue
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    missing.append(f"{dotted}: {'.'.join(parts[:i])} has no {attr!r}")
                    break
                obj = getattr(obj, attr)
            break
        else:
            missing.append(f"{dotted}: {error}")
    return missing


def forbidden_phrases(page: Path) -> list[str]:
    text = text_of(page)
    found = []
    for pattern, what in FORBIDDEN.items():
        for match in re.finditer(pattern, text, re.I):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"line {line}: {match.group(0)!r} ({what})")
    return found


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_path_script_module_test_and_config_named_exists(page: Path) -> None:
    assert missing_names(page) == []


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_python_name_named_exists(page: Path) -> None:
    assert missing_python_names(page) == []


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_training_command_composes(page: Path) -> None:
    """The overrides of each `python -m attnzoo.train` command shown are valid keys, types and
    choices (Hydra's own check, as the command would run it)."""
    from attnzoo.train import compose

    lines = list(command_lines(text_of(page)))
    for line in lines:
        overrides = composable_overrides(line)
        if overrides is not None:
            compose(overrides)  # raises Hydra's error, naming the key


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_no_development_paths_tracker_numbers_or_history(page: Path) -> None:
    assert forbidden_phrases(page) == []


def test_readme_is_a_short_front_page() -> None:
    lines = [
        line
        for line in text_of(README).splitlines()
        if not (line.startswith("<!--") and line.rstrip().endswith("-->"))
    ]
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def quick_start_commands(readme: str) -> list[str]:
    """The command lines of the README's quick start (its first code block), comments dropped."""
    section = readme.partition("## Quick start")[2]
    block = FENCE.search(section)
    assert block, "README.md's Quick start has no code block"
    lines = [line.partition("#")[0].strip() for line in block.group(0).splitlines()[1:-1]]
    return [line for line in lines if line]


def test_ci_runs_the_readmes_quick_start_as_written() -> None:
    """Each quick-start line runs in .ci/run as the README writes it, pip's -q aside, and in the
    venv with the newest torch (before the floor's venv is made): what a newcomer installs is
    what CI tests. The quick start is two commands: install and the default job, then the tests."""
    ci = (ROOT / ".ci" / "run").read_text()
    newest = ci.partition("FLOOR=")[0]
    commands = quick_start_commands(text_of(README))
    assert len(commands) == 2 and "pytest" in commands[1], commands
    for command in commands:
        as_run = command.replace("pip install ", "pip install -q ")
        assert re.search(rf"^{re.escape(as_run)}(?: \|\| exit 1)?$", newest, re.M), command
    assert "torch==" not in newest, "the newest-torch venv installs what the README installs"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {
        (README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(text_of(README))
    }
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


# The checks themselves: each one fails on a page with the fault it looks for.


def test_the_checks_find_broken_links_anchors_paths_and_configs(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Some Title: `with` code\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#some-title-with-code) [ok](other.md#twice-1) "
        "[web](https://example.com/x) [self](#a-heading)\n\n# A heading\n\n"
        "[gone](missing.md) [bad anchor](other.md#nope) ![img](figure.png)\n"
        "`[not a link](inside-code.md)`\n\n"
        "```bash\npython scripts/no_such_script.py\npython -m attnzoo.no_such_module\n"
        "python scripts/summarize.py multirun/x --out y --no-such-option  # --in-a-comment\n"
        "python -m attnzoo.train mixer=metric,no_such_mixer model.mlp=true\n```\n"
        "See `tests/test_docs.py::test_no_such_test` and `test_no_such_test_either`.\n"
        "Inline: `python scripts/no_such_script.py --x`.\n"
        "from /work/x since that baseline, issue 12\n"
    )
    assert broken_links(page) == [
        f"missing.md: no file {tmp_path / 'missing.md'}",
        "other.md#nope: no heading with anchor #nope in other.md",
        f"figure.png: no file {tmp_path / 'figure.png'}",
    ]
    assert missing_names(page) == [
        "scripts/no_such_script.py: no such file or folder",
        "tests/test_docs.py::test_no_such_test: no test test_no_such_test in tests/test_docs.py",
        "test_no_such_test_either: no such test under tests/",
        "python -m attnzoo.no_such_module: no no_such_module.py or no_such_module/__main__.py",
        "mixer=no_such_mixer: no conf/mixer/no_such_mixer.yaml",
        "python scripts/summarize.py --no-such-option: scripts/summarize.py has no option "
        "--no-such-option",
        "python scripts/no_such_script.py --x: scripts/no_such_script.py has no option --x",
    ]
    assert len(forbidden_phrases(page)) == 3


def test_a_typo_in_a_training_command_fails_to_compose() -> None:
    from attnzoo.train import compose

    overrides = composable_overrides("python -m attnzoo.train model.skp=false data_dir=DATA_DIR")
    assert overrides == ["model.skp=false", "data_dir=some/data"]
    with pytest.raises(Exception, match="skp"):
        compose(overrides)


def test_the_analysis_page_example_runs_on_a_sweep(tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/analysis.md's Python example, run as written on a fake learning-rate sweep in
    multirun/tune: it prints the groups with intervals, the comparisons and the choices."""
    from fake_sweeps import BEST_LR, make_tune_sweep

    (block,) = re.findall(r"^```python\n(.*?)^```", text_of(ROOT / "docs/analysis.md"), re.M | re.S)
    make_tune_sweep(tmp_path / "multirun" / "tune")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/analysis.md", "exec"), {})
    out = capsys.readouterr().out
    assert "axes: ['mixer.name', 'train.lr']" in out
    assert re.search(r"^mixer=scaled_dot, train.lr=0.001: n=3 mean=\S+ \[\S+, \S+\]$", out, re.M)
    assert "pooling vs scaled_dot: " in out
    for mixer, lr in BEST_LR.items():
        assert re.search(rf"^{mixer} {lr} ", out, re.M), mixer


def test_the_training_page_names_every_mixer_and_its_options() -> None:
    """docs/training.md's `mixer=` row: every mixer of conf/mixer/, each with the options its
    YAML lists (attn_dropout and sink are said once for the mixers that take them)."""
    row = next(
        line
        for line in (ROOT / "docs" / "training.md").read_text().splitlines()
        if line.startswith("| `mixer=` |")
    )
    for yaml in sorted((ROOT / "conf" / "mixer").glob("*.yaml")):
        assert f"`{yaml.stem}`" in row, yaml.stem
        options = re.findall(r"^#   (\w+):", yaml.read_text(), re.M)
        for option in set(options) - {"attn_dropout", "sink"}:
            assert f"`mixer.{option}" in row, (yaml.stem, option)
    assert "`mixer.attn_dropout`" in row and "`mixer.sink=" in row


def test_the_san_sort_line_says_what_the_run_logs(tmp_path: Path) -> None:
    """The README's `experiment=san_sort` comment: at step 0 the relative residual falls from
    about 1 to exactly 0 (below float64's resolution) by layer 3, so rank/last reads 0."""
    from attnzoo.tracking import read_metrics
    from attnzoo.train import compose, run

    overrides = ["experiment=san_sort", "train.max_steps=1", "task.val_size=16"]
    overrides += ["task.test_size=16", "logger.mode=disabled", "train.progress=false"]
    run(compose(overrides), tmp_path)
    first = next(r for r in read_metrics(tmp_path / "metrics.jsonl") if "rank/last" in r)
    residual = [first[f"rank/relative_residual/layer_{k}"] for k in range(7)]
    assert first["step"] == 0 and first["rank/last"] == 0.0
    assert residual[0] > 0.5 and 0 < residual[1] < 1e-2 and residual[3:] == [0.0] * 4
    assert "rank/relative_residual/layer_k falls from ~1 to 0 by layer 3" in README.read_text()
