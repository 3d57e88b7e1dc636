"""The built wheel holds every module and every config file, and works outside the checkout."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("attnzoo-*.whl")
    return path


def test_wheel_contains_every_module_and_config(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"attnzoo/{p.relative_to(ROOT / 'attnzoo')}" for p in (ROOT / "attnzoo").rglob("*.py")
    }
    expected |= {
        f"attnzoo/kernels/{p.relative_to(ROOT / 'kernels')}"
        for p in (ROOT / "kernels").rglob("*.py")
    }
    expected |= {
        f"attnzoo/conf/{p.relative_to(ROOT / 'conf')}" for p in (ROOT / "conf").rglob("*.yaml")
    }
    assert expected <= names, sorted(expected - names)
    assert not any(n.startswith("kernels/") for n in names), (
        "a top-level `kernels` package would clobber PyPI's"
    )


def test_installed_wheel_works_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import attnzoo, attnzoo.kernels, torch;"
        f"assert attnzoo.__file__.startswith({str(target)!r}), attnzoo.__file__;"
        f"assert attnzoo.kernels.__file__.startswith({str(target)!r});"
        "m = attnzoo.build_mixer('metric', dim=16, heads=2);"
        "print(tuple(m(torch.randn(1, 5, 16)).shape))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(1, 5, 16)"


def test_installed_wheel_composes_the_trainer_config(wheel, tmp_path):
    """The Hydra configs (conf/ with its group folders) are found inside the installed wheel."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import attnzoo.train as t;"
        f"assert t.__file__.startswith({str(target)!r}), t.__file__;"
        "c = t.compose(['mixer=metric', 'task=convex_hull', 'experiment=san_sort']);"
        "print(c.mixer.name, c.task.name, c.model.residual.name)"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["metric", "convex_hull", "none"]  # the command line wins


def test_the_checkout_folder_imported_as_kernels_stays_empty():
    """With the checkout root on sys.path, `import kernels` finds kernels/ (transformers probes
    for the PyPI `kernels` package that way). It must neither register the torch.ops.attnzoo
    operators a second time nor look like that package; attnzoo.kernels works beside it."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import kernels, attnzoo.kernels, torch\n"
        "assert not hasattr(kernels, 'scaled_dot_attention'), dir(kernels)\n"
        "q = torch.randn(1, 2, 5, 4)\n"
        "print(attnzoo.kernels.scaled_dot_attention(q, q, q, impl='torch').shape)\n"
        "try:\n"
        "    from transformers.utils.import_utils import is_kernels_available\n"
        "except ImportError:\n"
        "    print('no transformers')\n"
        "else:\n"
        "    print('transformers sees kernels:', is_kernels_available())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch.Size([1, 2, 5, 4])" in out.stdout
    assert "transformers sees kernels: True" not in out.stdout


def test_the_kernels_import_nothing_from_the_rest_of_attnzoo():
    """attnzoo.kernels (its ops, references, benchmark) stands alone: no module under
    kernels/ imports an attnzoo module outside attnzoo.kernels, so the kernels can be used,
    tested and benchmarked without the model, the trainer or their dependencies."""
    import ast

    outside = []
    for path in sorted((ROOT / "kernels").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                if node.module == "attnzoo":
                    names = [f"attnzoo.{alias.name}" for alias in node.names]
            else:
                continue
            outside += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] == "attnzoo" and not name.startswith("attnzoo.kernels")
            ]
    assert outside == []


def test_each_op_is_named_outside_its_family_folder_by_kernels_init_alone():
    """A family is the unit: every public op of attnzoo.kernels lives in kernels/<family>/, and
    no other file under kernels/ (plumbing, benchmark harness, another family) names it, in code
    or prose, except kernels/__init__.py, which re-exports it. Adding a family then touches its
    own folder and one import line there."""
    import re

    import attnzoo.kernels

    files = {path: path.read_text() for path in (ROOT / "kernels").rglob("*.py")}
    named_elsewhere = []
    for op in attnzoo.kernels.__all__:
        family = getattr(attnzoo.kernels, op).__module__.split(".")[2]
        word = re.compile(rf"\b{op}\b")
        named_elsewhere += [
            f"{op}: {path.relative_to(ROOT)}"
            for path, text in files.items()
            if path.parent.name != family and path != ROOT / "kernels" / "__init__.py"
            if word.search(text)
        ]
    assert len(attnzoo.kernels.__all__) >= 8
    assert named_elsewhere == []


def test_scripts_are_thin_commands_over_the_package():
    """What a researcher may want from Python lives in attnzoo, not in scripts/: no helper
    modules there, no script importing another."""
    import ast

    scripts = sorted((ROOT / "scripts").glob("*.py"))
    names = {p.stem for p in scripts}
    assert [p.name for p in scripts if p.name.startswith("_")] == []
    imports = []
    for path in scripts:
        text = path.read_text()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found = [node.module]
            else:
                continue
            imports += [
                f"{path.name}:{node.lineno}: {n}" for n in found if n.split(".")[0] in names
            ]
    assert imports == []
