"""Rank collapse in real architectures: BERT, ALBERT, XLNet, GPT-2 and ViT with their skip
connections and MLPs removed (Dong, Cordonnier & Loukas 2021, the study their repository runs on
BERT, ALBERT and XLNet).

Each model is probed with attnzoo.probe in five variants: full, no_skip, no_mlp, pure_attention
(norms kept) and pure_attention_no_norm; the relative residual ‖res(H)‖/‖H‖ of the hidden state is
recorded before the first layer and after every layer. By default each model is built from its
base configuration with random weights (no network needed); --pretrained loads the Hub weights.
Text models read windows of Tiny Shakespeare through the model's own tokenizer where one can be
loaded (Hub or local cache), else through a byte-level BPE trained on the corpus (attnzoo's
tokenizer), else token ids drawn uniformly from the vocabulary; ViT reads Gaussian-noise images.

Outputs (in --out): architectures.csv (every point), architectures.md (the table, and the path
counts next to the decay), path_counts.csv (share of the (1+H)^L paths through k heads, per
model), architectures.png (residual against depth, one panel per model, one line per variant;
below, the path-length distribution). With --wandb offline|online, also a W&B run.

    python scripts/architectures.py --data-dir ../shared/data            # base sizes, random init
    python scripts/architectures.py --tiny --out /tmp/arch                # 4-layer models, seconds
    python scripts/architectures.py --pretrained --models bert,gpt2       # Hub weights (network)
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from attnzoo.probe import ADAPTERS, mean_path_length, path_shares, rank_decay  # noqa: E402


@dataclass(frozen=True)
class Spec:
    """A model of the study: its Hub name and the config it is built from without the Hub."""

    model_type: str  # Hugging Face config.model_type, also the attnzoo.probe adapter's name
    hub: str
    base: dict[str, Any] = field(default_factory=dict)  # the Hub model's shape, as config kwargs
    tiny: dict[str, Any] = field(default_factory=dict)
    image: bool = False


TINY_TEXT = dict(num_hidden_layers=6, num_attention_heads=4, vocab_size=1024)
MODELS: dict[str, Spec] = {
    "bert": Spec(
        "bert",
        "google-bert/bert-base-uncased",
        tiny=dict(hidden_size=64, intermediate_size=128, **TINY_TEXT),
    ),
    "albert": Spec(
        "albert",
        "albert/albert-base-v2",  # AlbertConfig() defaults to xxlarge: give base's shape
        base=dict(
            embedding_size=128,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
        ),
        tiny=dict(embedding_size=32, hidden_size=64, intermediate_size=128, **TINY_TEXT),
    ),  # fmt: skip
    "xlnet": Spec(
        "xlnet",
        "xlnet/xlnet-base-cased",  # XLNetConfig() defaults to large
        base=dict(d_model=768, n_layer=12, n_head=12, d_inner=3072),
        tiny=dict(d_model=64, n_layer=6, n_head=4, d_inner=128, vocab_size=1024),
    ),
    "gpt2": Spec(
        "gpt2",
        "openai-community/gpt2",
        tiny=dict(n_embd=64, n_layer=6, n_head=4, vocab_size=1024, bos_token_id=0, eos_token_id=0),
    ),
    "vit": Spec(
        "vit",
        "google/vit-base-patch16-224",
        tiny=dict(
            hidden_size=64,
            num_hidden_layers=6,
            num_attention_heads=4,
            intermediate_size=128,
            image_size=32,
            patch_size=8,
        ),
        image=True,
    ),  # fmt: skip
}
VARIANTS = {  # label -> (attnzoo.probe variant, norms kept)
    "full": ("full", True),
    "no_skip": ("no_skip", True),
    "no_mlp": ("no_mlp", True),
    "pure_attention": ("pure_attention", True),
    "pure_attention_no_norm": ("pure_attention", False),
}
BPE_VOCAB = 2048  # the offline tokenizer's vocabulary (capped by the model's)
TEXT_CHARS = 200_000  # of the validation split: enough windows for any batch here


def unknown_model_message(name: str) -> str:
    return (
        f"unknown model {name!r}; supported: {', '.join(MODELS)}. To add an architecture, "
        "declare its layer with attnzoo.probe.register_adapter(Adapter(...)) (see the README, "
        "'Rank collapse in real architectures') and add a Spec to MODELS in this script"
    )


def parse_models(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        if name not in MODELS:
            raise argparse.ArgumentTypeError(unknown_model_message(name))
    if not names:
        raise argparse.ArgumentTypeError(f"no model given; supported: {', '.join(MODELS)}")
    return names


def build(spec: Spec, args: argparse.Namespace):
    """The model (float32, eval mode) and its config."""
    import transformers

    if args.pretrained:
        try:
            model = transformers.AutoModel.from_pretrained(spec.hub, attn_implementation="eager")
        except Exception as err:  # no network, no cache, gated repo, ...
            raise SystemExit(
                f"--pretrained: could not load {spec.hub!r} from the Hugging Face Hub "
                f"({type(err).__name__}: {str(err)[:300]}). Loading Hub weights needs network "
                "access (or the model in the local Hugging Face cache); without --pretrained "
                "each model is built from its config with random weights."
            ) from err
        return model.eval(), model.config
    config = transformers.AutoConfig.for_model(
        spec.model_type, **(spec.tiny if args.tiny else spec.base)
    )
    torch.manual_seed(args.seed)
    model = transformers.AutoModel.from_config(config, attn_implementation="eager")
    return model.eval(), config


def load_corpus(args: argparse.Namespace) -> tuple[str | None, str, str]:
    """The Tiny Shakespeare validation text (or None), the corpus sha256, and why not if None."""
    from attnzoo.config import resolve_data_dir
    from attnzoo.tasks._data import offline
    from attnzoo.tasks.shakespeare import load_text, split_text

    try:
        text, sha = load_text(resolve_data_dir(args.data_dir, Path.cwd()), download=not offline())
    except Exception as err:  # CorpusError (missing, corrupt) or a failed download
        print(f"warning: text models read random token ids: {type(err).__name__}: {err}")
        return None, "", "no Tiny Shakespeare: see --data-dir"
    return split_text(text)["val"][:TEXT_CHARS], sha, ""


def tokenizer_for(spec: Spec, vocab_size: int, args: argparse.Namespace, corpus):
    """A function text -> token ids, and its description; None when no tokenizer fits."""
    text, sha, _ = corpus
    try:  # the model's own tokenizer, from the Hub with --pretrained, else only from a cache
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(
            spec.hub, local_files_only=not args.pretrained
        )
        if len(tok) <= vocab_size:

            def encode(text: str) -> list[int]:
                return tok(text, add_special_tokens=False)["input_ids"]

            return encode, f"{spec.hub} tokenizer"
    except Exception:  # not cached, no network: fall back to a tokenizer made here
        pass
    if args.pretrained:  # a BPE of our own would feed Hub weights meaningless ids
        return None, ""
    if vocab_size < 512:
        return None, ""
    from attnzoo.tasks._tokenizer import trained_bpe

    bpe = min(BPE_VOCAB, vocab_size)
    enc = trained_bpe("tinyshakespeare", f"{sha}:val", lambda: [text], bpe)
    return enc.encode_ordinary, f"Tiny Shakespeare, BPE {bpe} trained on it"


def make_inputs(spec: Spec, config, args: argparse.Namespace, corpus) -> tuple[dict, str]:
    """The probe batch for one model and a description of it."""
    gen = torch.Generator().manual_seed(args.seed)
    if spec.image:
        size = config.image_size
        pixels = torch.randn(args.batch, config.num_channels, size, size, generator=gen)
        return {"pixel_values": pixels}, f"Gaussian-noise images {size}×{size}"
    vocab = config.vocab_size
    text, _, why_not = corpus
    if text is not None:
        encode, how = tokenizer_for(spec, vocab, args, corpus)
        if encode is not None:
            stream = torch.tensor(encode(text))
            if len(stream) >= args.tokens + args.batch:
                starts = torch.linspace(0, len(stream) - args.tokens, args.batch).long()
                ids = torch.stack([stream[s : s + args.tokens] for s in starts.tolist()])
                return {"input_ids": ids}, f"{how}, windows of {args.tokens} tokens"
        why_not = "no tokenizer fits the vocabulary"
    ids = torch.randint(0, vocab, (args.batch, args.tokens), generator=gen)
    return {"input_ids": ids}, f"uniform token ids ({why_not})"


def log_wandb(args: argparse.Namespace, rows: list[list], fig, summary: dict[str, float]) -> None:
    from attnzoo.tracking import WandbRun

    wb = WandbRun(
        mode=args.wandb,
        run_dir=args.out,
        config={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        project=args.wandb_project,
        entity=None,
        group=None,
        job_type="architectures",
        name="architectures",
        tags=["architectures"],
        resume_id=None,
    )
    try:
        if wb.active:
            try:
                table = wb.wandb.Table(columns=CSV_COLUMNS, data=rows)
                media = {"rank/table": table, "rank/plot": wb.wandb.Image(fig)}
            except Exception as err:
                wb._fail("building the W&B table", err)
                return
            wb.log(media, step=0)
            wb.summary(summary)
    finally:
        wb.finish()


CSV_COLUMNS = ["model", "variant", "layer", "relative_residual", "relative_residual_std",
               "norms", "weights", "dtype", "input"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=parse_models, default=list(MODELS),
                        help=f"comma-separated, from {','.join(MODELS)} (default: all)")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="6-layer, 64-wide configs (tests)")
    parser.add_argument("--pretrained", action="store_true", help="load the Hub weights")
    parser.add_argument("--batch", type=int, default=None, help="sequences (default 8; tiny 4)")
    parser.add_argument("--tokens", type=int, default=None, help="per sequence (128; tiny 32)")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="holds tinyshakespeare/input.txt")
    parser.add_argument("--wandb", choices=["disabled", "offline", "online"], default="disabled")
    parser.add_argument("--wandb-project", default="attnzoo")
    parser.add_argument("--out", type=Path, default=Path("scripts/results/architectures"))
    args = parser.parse_args()
    args.batch = args.batch or (4 if args.tiny else 8)
    args.tokens = args.tokens or (32 if args.tiny else 128)
    try:
        import transformers  # noqa: F401
    except ImportError as err:
        raise SystemExit(
            "scripts/architectures.py needs transformers: pip install 'attnzoo[hf]'"
        ) from err
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    corpus = load_corpus(args) if any(not MODELS[m].image for m in args.models) else (None, "", "")

    rows: list[list] = []
    curves: dict[str, dict[str, list[float]]] = {}
    shapes: dict[str, tuple[int, int, str]] = {}  # model -> (layers, heads, input)
    for name in args.models:
        spec = MODELS[name]
        start = time.perf_counter()
        model, config = build(spec, args)
        inputs, described = make_inputs(spec, config, args, corpus)
        model = model.to(dtype)
        inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
        weights = "pretrained" if args.pretrained else "random init"
        curves[name] = {}
        for label, (variant, norms) in VARIANTS.items():
            profile = rank_decay(model, inputs, variant, norms, adapter=ADAPTERS[spec.model_type])
            curves[name][label] = profile.mean
            rows += [
                [name, label, layer, mean, std, norms, weights, args.dtype, described]
                for layer, (mean, std) in enumerate(zip(profile.mean, profile.std, strict=True))
            ]
        depth = len(curves[name]["full"]) - 1
        shapes[name] = (depth, config.num_attention_heads, described)
        print(f"{name}: {depth} layers, {time.perf_counter() - start:.1f}s, input: {described}")
        del model

    with open(args.out / "architectures.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(rows)
    with open(args.out / "path_counts.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["model", "layers", "heads", "k", "share"])
        for name, (depth, heads, _) in shapes.items():
            writer.writerows(
                [name, depth, heads, k, share] for k, share in enumerate(path_shares(depth, heads))
            )

    weights = "Hub weights" if args.pretrained else "random init"
    lines = [
        f"Relative residual ‖res(H)‖/‖H‖ after layer l ({weights}, {args.dtype} probe, mean over "
        f"{args.batch} inputs of {args.tokens} tokens; ViT: its image's patches).",
        "",
        "| model | layers × heads | variant | input | layer 1 | layer 2 | layer 3 | last layer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, by_variant in curves.items():
        depth, heads, _ = shapes[name]
        for label, mean in by_variant.items():
            cells = [f"{mean[min(layer, depth)]:.1e}" for layer in (0, 1, 2, 3, depth)]
            lines.append(f"| {name} | {depth} × {heads} | {label} | {' | '.join(cells)} |")
    lines += ["", "Inputs:", ""]
    lines += [f"- {name}: {described}" for name, (_, _, described) in shapes.items()]
    lines += [
        "",
        "Paths (Dong et al. 2021): of the (1+H)^L paths through a depth-L, H-head network, the "
        "share through k heads is C(L,k)·H^k/(1+H)^L.",
        "",
        "| model | L | H | mean path length L·H/(1+H) | share with k ≤ 3 | share with k ≤ L/2 | "
        "pure attention, last layer | full, last layer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (depth, heads, _) in shapes.items():
        shares = path_shares(depth, heads)
        lines.append(
            f"| {name} | {depth} | {heads} | {mean_path_length(depth, heads):.1f} | "
            f"{sum(shares[:4]):.1e} | {sum(shares[: depth // 2 + 1]):.1e} | "
            f"{curves[name]['pure_attention'][-1]:.1e} | {curves[name]['full'][-1]:.1e} |"
        )
    (args.out / "architectures.md").write_text("\n".join(lines) + "\n")

    fig = figure(curves, shapes, args)
    fig.savefig(args.out / "architectures.png", dpi=120)
    if args.wandb != "disabled":
        summary = {
            f"rank/{name}/{label}/last": mean[-1]
            for name, by_variant in curves.items()
            for label, mean in by_variant.items()
        }
        log_wandb(args, rows, fig, summary)
    plt.close(fig)
    print((args.out / "architectures.md").read_text())
    print(f"wrote {args.out}/architectures.{{csv,md,png}} and path_counts.csv")


def figure(curves, shapes, args: argparse.Namespace) -> plt.Figure:
    """Top: residual against depth per model, one line per variant. Bottom: path lengths."""
    names = list(curves)
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names) + 2.4, 6.2), squeeze=False,
                             sharey="row", gridspec_kw={"height_ratios": [2, 1]})  # fmt: skip
    floor = 1e-17 if args.dtype == "float64" else 1e-9
    for col, name in enumerate(names):
        ax = axes[0][col]
        for label, mean in curves[name].items():
            ax.semilogy(range(len(mean)), [max(r, floor) for r in mean], marker="o",
                        markersize=3, linestyle=":" if label.endswith("no_norm") else "-",
                        label=label)  # fmt: skip
        depth, heads, _ = shapes[name]
        ax.set_title(f"{name} ({depth} × {heads})")
        ax.set_xlabel("layer (0: input to the first)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax = axes[1][col]
        ax.bar(range(depth + 1), path_shares(depth, heads), color="tab:gray")
        ax.set_yscale("log")
        ax.set_xlabel("heads on the path, k")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("relative residual ‖res(H)‖/‖H‖")
    axes[1][0].set_ylabel("share of paths")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    weights = "Hub weights" if args.pretrained else "random init"
    fig.suptitle(f"Rank decay in real architectures ({weights}, {args.dtype} probe)")
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / (3.2 * len(names) + 2.4), 1))
    return fig


if __name__ == "__main__":
    main()
