"""Rank collapse in real architectures: BERT, ALBERT, XLNet, GPT-2 and ViT with their skip
connections and MLPs removed (Dong, Cordonnier & Loukas 2021, the study their repository runs on
BERT, ALBERT and XLNet).

Each model is probed with attnzoo.hf_probe in five variants: full, no_skip, no_mlp, pure_attention
(norms kept) and pure_attention_no_norm; every measure of attnzoo.rank (relative residual
‖res(H)‖/‖H‖, effective rank, stable rank, token similarity, attention entropy) is recorded
before the first layer and after every layer. By default each model is built from its base
configuration with random weights (no network needed). --pretrained probes trained weights beside
a random init of the same configuration: with no value each model's Hub weights, with a folder
what `save_pretrained` wrote there (read offline), or `name=FOLDER_OR_HUB_ID,...` per model.
Text models read windows of Tiny Shakespeare through the model's own tokenizer where one can be
loaded (the weights' folder, the Hub or the local cache), else (random init only) through a
byte-level BPE trained on the corpus (attnzoo's tokenizer), else token ids drawn uniformly from the
vocabulary; ViT reads Gaussian-noise images. Random init and trained weights read the same batch.

Outputs (in --out): architectures.csv (every point, every measure), architectures.md (the table,
every measure at the last layer, random init beside trained, and the path counts next to the
decay), path_counts.csv (share of the (1+H)^L paths through k heads, per model),
architectures.png (each measure against depth, one column per model, one line per variant,
dashed: random init beside trained weights; below, the path-length distribution). With --wandb
offline|online, also a W&B run.

    python scripts/architectures.py --data-dir DATA_DIR                  # base sizes, random init
    python scripts/architectures.py --tiny --out /tmp/arch                # 4-layer models, seconds
    python scripts/architectures.py --models bert --pretrained DIR        # weights on disk, offline
    python scripts/architectures.py --pretrained --models bert,gpt2       # Hub weights (network)

The study is `attnzoo.architectures` (models, inputs, report, figure); this script is its command
line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnzoo.architectures import (
    HUB,
    MODELS,
    Options,
    StudyError,
    figure,
    log_wandb,
    parse_pretrained,
    probe,
    report,
    unknown_model_message,
    write_csvs,
)
from attnzoo.studies import default_out


def parse_models(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        if name not in MODELS:
            raise argparse.ArgumentTypeError(unknown_model_message(name))
    if not names:
        raise argparse.ArgumentTypeError(f"no model given; supported: {', '.join(MODELS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        type=parse_models,
        default=None,
        help=f"comma-separated, from {','.join(MODELS)} (default: all)",
    )
    parser.add_argument("--tiny", action="store_true", help="6-layer, 64-wide configs (tests)")
    parser.add_argument(
        "--pretrained",
        nargs="?",
        const=HUB,
        default=None,
        metavar="FOLDER_OR_HUB_ID",
        help="probe trained weights beside random init: a folder written by "
        "save_pretrained (offline), a Hub id, name=SOURCE,... per model, or no "
        "value for each model's Hub weights",
    )
    parser.add_argument("--batch", type=int, default=None, help="sequences (default 8; tiny 4)")
    parser.add_argument("--tokens", type=int, default=None, help="per sequence (128; tiny 32)")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="holds tinyshakespeare/input.txt")
    parser.add_argument("--wandb", choices=["disabled", "offline", "online"], default="disabled")
    parser.add_argument("--wandb-project", default="attnzoo")
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out("architectures"),
        help="report folder (default results/architectures/)",
    )
    args = parser.parse_args()
    args.batch = args.batch or (4 if args.tiny else 8)
    args.tokens = args.tokens or (32 if args.tiny else 128)
    try:
        import transformers  # noqa: F401
    except ImportError as err:
        raise SystemExit(
            "scripts/architectures.py needs transformers: pip install 'attnzoo[hf]'"
        ) from err
    try:
        sources = parse_pretrained(args.pretrained, args.models)
        args.models = args.models or list(sources) or list(MODELS)
        args.out.mkdir(parents=True, exist_ok=True)
        opts = Options(args.tiny, args.batch, args.tokens, args.dtype, args.seed, args.data_dir)
        study = probe(args.models, sources, opts)
    except StudyError as err:
        raise SystemExit(str(err)) from err

    write_csvs(study, args.out)
    (args.out / "architectures.md").write_text(report(study, opts))
    fig = figure(study, opts)
    fig.savefig(args.out / "architectures.png", dpi=110)
    if args.wandb != "disabled":
        config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        log_wandb(args.wandb, args.wandb_project, args.out, config, study, fig)
    import matplotlib.pyplot as plt  # after attnzoo.architectures chose the Agg backend

    plt.close(fig)
    print((args.out / "architectures.md").read_text())
    print(f"wrote {args.out}/architectures.{{csv,md,png}} and path_counts.csv")


if __name__ == "__main__":
    main()
