"""scripts/architectures.py at its tiny size: the files it writes, what they say, and its errors."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the [hf] extra is not installed")

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout (main), or beside the worktrees' folder
SHARED = next(
    (
        p
        for p in (ROOT.parent / "shared" / "data", ROOT.parents[1] / "shared" / "data")
        if p.exists()
    ),
    None,
)


def load_script(monkeypatch):
    """scripts/architectures.py as a module (run in this process: it spares a second import of
    transformers, which takes seconds)."""
    spec = importlib.util.spec_from_file_location(
        "architectures", ROOT / "scripts/architectures.py"
    )
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "architectures", script)  # dataclasses look it up
    spec.loader.exec_module(script)
    return script


def run_main(monkeypatch, tmp_path: Path, *args: str) -> None:
    monkeypatch.setenv("ATTNZOO_CACHE_DIR", str(tmp_path / "cache"))  # the BPE is trained here
    monkeypatch.setattr(sys, "argv", ["architectures.py", *args])
    load_script(monkeypatch).main()


def read_rows(path: Path) -> dict[tuple[str, str], list[dict]]:
    rows: dict[tuple[str, str], list[dict]] = {}
    for r in csv.DictReader(path.open()):
        rows.setdefault((r["model"], r["variant"]), []).append(r)
    return rows


def test_study_writes_the_table_figure_path_counts_and_a_wandb_run(monkeypatch, tmp_path):
    out = tmp_path / "arch"
    data = ["--data-dir", str(SHARED)] if SHARED else []
    run_main(
        monkeypatch,
        tmp_path,
        "--tiny",
        "--models",
        "bert,gpt2",
        *data,
        "--wandb",
        "offline",
        "--out",
        str(out),
    )
    assert {"architectures.csv", "architectures.md", "architectures.png", "path_counts.csv"} <= {
        p.name for p in out.iterdir()
    }
    rows = read_rows(out / "architectures.csv")
    variants = ["full", "no_skip", "no_mlp", "pure_attention", "pure_attention_no_norm"]
    assert list(rows) == [(m, v) for m in ("bert", "gpt2") for v in variants]
    for points in rows.values():
        assert [int(r["layer"]) for r in points] == list(range(7))  # input + 6 layers
    last = {key: float(points[-1]["relative_residual"]) for key, points in rows.items()}
    # the paper's picture, in the non-causal model: pure attention and no-skip fall to float64's
    # floor, the full model and the model without MLPs keep most of the residual
    assert last["bert", "pure_attention"] < 1e-12 and last["bert", "no_skip"] < 1e-12
    assert last["bert", "full"] > 0.3 and last["bert", "no_mlp"] > 0.3
    # causal GPT-2: the first token attends only to itself; its pure attention decays, slowly
    assert last["gpt2", "full"] > 0.3
    assert 1e-6 < last["gpt2", "pure_attention"] < 0.5 * last["gpt2", "full"]
    described = rows["bert", "full"][0]["input"]
    if SHARED:
        assert described.startswith("Tiny Shakespeare, BPE 1024")
    shares: dict[str, float] = {}
    for r in csv.DictReader((out / "path_counts.csv").open()):
        shares[r["model"]] = shares.get(r["model"], 0.0) + float(r["share"])
    assert shares == pytest.approx({"bert": 1.0, "gpt2": 1.0})
    md = (out / "architectures.md").read_text()
    assert "| bert | 6 × 4 | pure_attention |" in md and "| gpt2 | 6 | 4 | 4.8 |" in md
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


def test_without_the_corpus_text_models_read_token_ids_from_the_vocabulary(monkeypatch, tmp_path):
    out = tmp_path / "arch"
    monkeypatch.setenv("ATTNZOO_OFFLINE", "1")
    run_main(
        monkeypatch,
        tmp_path,
        "--tiny",
        "--models",
        "albert,xlnet,vit",
        "--data-dir",
        str(tmp_path / "empty"),
        "--out",
        str(out),
    )
    rows = read_rows(out / "architectures.csv")
    assert rows["albert", "full"][0]["input"].startswith("uniform token ids (no Tiny Shakespeare")
    assert rows["vit", "full"][0]["input"] == "Gaussian-noise images 32×32"
    for model in ("albert", "xlnet", "vit"):
        assert float(rows[model, "pure_attention_no_norm"][-1]["relative_residual"]) < 1e-12
        assert float(rows[model, "full"][-1]["relative_residual"]) > 0.3


def test_an_unknown_model_is_an_error_listing_the_supported_ones(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_main(monkeypatch, tmp_path, "--tiny", "--models", "bert,llama")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unknown model 'llama'; supported: bert, albert, xlnet, gpt2, vit" in err
    assert "register_adapter" in err


def test_pretrained_without_the_hub_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/architectures.py"),
            "--pretrained",
            "--models",
            "bert",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},  # as without network, but at once
    )
    assert proc.returncode == 1
    assert "--pretrained: could not load 'google-bert/bert-base-uncased'" in proc.stderr
    assert "needs network access" in proc.stderr


def train_tiny_bert(folder: Path):
    """A 2-layer BERT after 10 steps of masked-language modelling on random runs of tokens, saved
    with `save_pretrained` into `folder`; returns the trained encoder (eval mode). Ten steps
    teach it little; what matters here is that its weights are no longer the init's."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=64,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = transformers.BertForMaskedLM(config)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)
    model.train()
    for _ in range(10):
        # a learnable language: token t is followed by t + 1 (mod 64)
        ids = (torch.randint(0, 64, (16, 1), generator=gen) + torch.arange(24)) % 64
        masked = torch.rand(ids.shape, generator=gen) < 0.15
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        loss = model(input_ids=ids.masked_fill(masked, 0), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(folder)
    changed = [k for k, v in model.state_dict().items() if not torch.equal(initial[k], v)]
    assert any("encoder.layer.1.attention" in k for k in changed)
    return model.bert.eval()


def test_trained_weights_from_a_folder_are_probed_offline_beside_random_init(monkeypatch, tmp_path):
    import torch

    from attnzoo.hf_probe import rank_decay
    from attnzoo.rank import MEASURES

    folder = tmp_path / "tiny-bert"
    trained = train_tiny_bert(folder)
    out = tmp_path / "arch"
    monkeypatch.setenv("ATTNZOO_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run_main(
        monkeypatch,
        tmp_path,
        "--tiny",
        "--models",
        "bert",
        "--pretrained",
        str(folder),
        "--data-dir",
        str(tmp_path / "empty"),
        "--out",
        str(out),
    )
    rows: dict[tuple[str, str, str], list[dict]] = {}
    for r in csv.DictReader((out / "architectures.csv").open()):
        rows.setdefault((r["model"], r["variant"], r["weights"]), []).append(r)
    variants = ["full", "no_skip", "no_mlp", "pure_attention", "pure_attention_no_norm"]
    weights = ["random init", f"trained ({folder})"]
    assert sorted(rows) == sorted(("bert", v, w) for v in variants for w in weights)
    for points in rows.values():
        assert [int(r["layer"]) for r in points] == [0, 1, 2]  # input + the folder's 2 layers
        assert points[0]["input"] == "uniform token ids (no Tiny Shakespeare: see --data-dir)"
    # the trained rows are the trained model's own measures, on the script's batch
    ids = torch.randint(0, 64, (4, 32), generator=torch.Generator().manual_seed(0))
    for variant in ("full", "pure_attention"):
        expected = rank_decay(trained, {"input_ids": ids}, variant, dtype=torch.float64).measures
        got = rows["bert", variant, weights[1]]
        for name in MEASURES:
            assert [float(r[name]) for r in got] == pytest.approx(
                expected[name], rel=1e-9, nan_ok=True
            ), (variant, name)
    # random init is another network of the same shape: its numbers differ
    init = rows["bert", "full", "random init"]
    assert float(init[-1]["effective_rank"]) != float(
        rows["bert", "full", weights[1]][-1]["effective_rank"]
    )
    md = (out / "architectures.md").read_text()
    assert (
        "| bert | 2 × 4 | full | random init |" in md and "| bert | 2 × 4 | full | trained |" in md
    )
    assert "(random init → trained)" in md and f"- bert: {folder}" in md
    full_row = next(line for line in md.splitlines() if line.startswith("| bert | full | "))
    assert all(" → " in cell for cell in full_row.split("|")[3:-1])  # side by side, every measure
    assert (out / "architectures.png").stat().st_size > 0

    # a folder alone: the model is the one its config.json declares
    run_main(
        monkeypatch,
        tmp_path,
        "--tiny",
        "--pretrained",
        str(folder),
        "--data-dir",
        str(tmp_path / "empty"),
        "--out",
        str(tmp_path / "arch2"),
    )
    models = {r["model"] for r in csv.DictReader((tmp_path / "arch2/architectures.csv").open())}
    assert models == {"bert"}


def test_pretrained_folder_errors_say_what_is_wrong(monkeypatch, tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with pytest.raises(SystemExit, match=r"could not load .*not-a-model.*save_pretrained"):
        run_main(monkeypatch, tmp_path, "--models", "bert", "--pretrained", str(empty))
    with pytest.raises(SystemExit, match=r"names one model's weights and --models has 2"):
        run_main(monkeypatch, tmp_path, "--models", "bert,gpt2", "--pretrained", str(empty))
