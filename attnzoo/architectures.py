"""Rank collapse in real architectures: BERT, ALBERT, XLNet, GPT-2 and ViT with their skip
connections and MLPs removed (Dong, Cordonnier & Loukas 2021), the study behind
scripts/architectures.py; the interventions themselves are attnzoo.hf_probe's.

Each model (`MODELS`) is probed in five variants (`VARIANTS`: full, no_skip, no_mlp,
pure_attention with norms kept, pure_attention_no_norm); every measure of attnzoo.rank is recorded
before the first layer and after every layer. Each model is built from its base configuration
(or a tiny one) with random weights, or loaded from trained weights (a folder `save_pretrained`
wrote, or the Hub) beside a random init of the same configuration. Text models read windows of
Tiny Shakespeare through the model's own tokenizer where one can be loaded, else (random init
only) through a byte-level BPE trained on the corpus, else token ids drawn uniformly from the
vocabulary; ViT reads Gaussian-noise images. Random init and trained weights read the same batch.

`probe` runs the study into a `Study`; `write_csvs`, `report`, `figure` and `log_wandb` turn it
into files and a W&B run. To add an architecture: an adapter for its layer
(`attnzoo.hf_probe.register_adapter`) and a `Spec` in `MODELS`.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from attnzoo.analysis.tables import fmt  # noqa: E402
from attnzoo.hf_probe import ADAPTERS, rank_decay  # noqa: E402
from attnzoo.paths import mean_path_length, path_shares  # noqa: E402
from attnzoo.rank import MEASURES, RankProfile  # noqa: E402


class StudyError(Exception):
    """A model or its weights cannot be had as asked; the message says what to do instead."""


@dataclass(frozen=True)
class Spec:
    """A model of the study: its Hub name and the config it is built from without the Hub."""

    model_type: str  # Hugging Face config.model_type, also the attnzoo.hf_probe adapter's name
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
    ),
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
    ),
}
VARIANTS = {  # label -> (attnzoo.hf_probe variant, norms kept)
    "full": ("full", True),
    "no_skip": ("no_skip", True),
    "no_mlp": ("no_mlp", True),
    "pure_attention": ("pure_attention", True),
    "pure_attention_no_norm": ("pure_attention", False),
}
BPE_VOCAB = 2048  # the offline tokenizer's vocabulary (capped by the model's)
TEXT_CHARS = 200_000  # of the validation split: enough windows for any batch here


MEASURE_COLUMNS = [c for name in MEASURES for c in (name, f"{name}_std")]
CSV_COLUMNS = ["model", "variant", "layer", *MEASURE_COLUMNS, "norms", "weights", "dtype", "input"]
HUB = "hub"  # --pretrained with no value: each model's Hub weights
INIT, TRAINED = "random init", "trained"


@dataclass(frozen=True)
class Options:
    """How the models are built and probed (scripts/architectures.py's options)."""

    tiny: bool = False  # the 6-layer, 64-wide configs instead of the base ones
    batch: int = 8  # sequences (images) in the probe batch
    tokens: int = 128  # tokens per sequence
    dtype: str = "float64"  # of the models and the probe
    seed: int = 0
    data_dir: str | None = None  # holds tinyshakespeare/input.txt


@dataclass
class Study:
    """What `probe` found: one CSV row per model, variant, weights and layer; the profiles; and
    per model its (layers, heads, description of the input)."""

    rows: list[list] = field(default_factory=list)
    # (model, weights) -> variant label -> profile
    results: dict[tuple[str, str], dict[str, RankProfile]] = field(default_factory=dict)
    shapes: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # model -> trained weights' source


def unknown_model_message(name: str) -> str:
    return (
        f"unknown model {name!r}; supported: {', '.join(MODELS)}. To add an architecture, "
        "declare its layer with attnzoo.hf_probe.register_adapter(Adapter(...)) (see the README, "
        "'Rank collapse in real architectures') and add a Spec to MODELS in attnzoo.architectures"
    )


def parse_pretrained(value: str | None, models: list[str] | None) -> dict[str, str]:
    """--pretrained as {model: folder or Hub id}; {} without it. A lone folder or id with no
    --models names the model its config.json declares."""
    if value is None:
        return {}
    if value == HUB:
        return {name: MODELS[name].hub for name in models or list(MODELS)}
    if "=" in value:
        pairs = dict(item.split("=", 1) for item in value.split(",") if item.strip())
        for name in pairs:
            if name not in MODELS:
                raise StudyError(f"--pretrained: {unknown_model_message(name)}")
        if models and set(models) - set(pairs):
            raise StudyError(
                f"--pretrained gives no weights for {sorted(set(models) - set(pairs))}"
            )
        return {name.strip(): src.strip() for name, src in pairs.items()}
    if models is None:
        import transformers

        try:
            config = transformers.AutoConfig.from_pretrained(value, local_files_only=_local(value))
        except Exception as err:
            raise StudyError(load_error(value, err)) from err
        if config.model_type not in MODELS:
            raise StudyError(f"--pretrained {value}: {unknown_model_message(config.model_type)}")
        return {config.model_type: value}
    if len(models) != 1:
        raise StudyError(
            f"--pretrained {value} names one model's weights and --models has {len(models)}: "
            "pass one model, or --pretrained name=FOLDER_OR_HUB_ID,name=..."
        )
    return {models[0]: value}


def _local(source: str) -> bool:
    return Path(source).expanduser().is_dir()


def load_error(source: str, err: Exception) -> str:
    why = f"({type(err).__name__}: {str(err)[:300]})"
    if _local(source):
        return (
            f"--pretrained: could not load {source!r} {why}. The folder must hold what "
            "`save_pretrained` writes (config.json and the weights)."
        )
    return (
        f"--pretrained: could not load {source!r} from the Hugging Face Hub {why}. Loading Hub "
        "weights needs network access (or the model in the local Hugging Face cache); a folder "
        "written by `save_pretrained` loads offline; without --pretrained each model is built "
        "from its config with random weights."
    )


def build(spec: Spec, opts: Options, source: str | None = None):
    """The model (float32, eval mode) and its config: random weights from the study's config,
    or with `source` the weights there (a folder `save_pretrained` wrote, or a Hub id)."""
    import transformers

    if source is not None:
        try:
            model = transformers.AutoModel.from_pretrained(
                source, attn_implementation="eager", local_files_only=_local(source)
            )
        except Exception as err:  # no network, no cache, gated repo, not a model folder...
            raise StudyError(load_error(source, err)) from err
        if model.config.model_type != spec.model_type:
            raise StudyError(
                f"--pretrained {source}: a {model.config.model_type!r} model, not {spec.model_type!r}"
            )
        return model.eval(), model.config
    config = transformers.AutoConfig.for_model(
        spec.model_type, **(spec.tiny if opts.tiny else spec.base)
    )
    torch.manual_seed(opts.seed)
    model = transformers.AutoModel.from_config(config, attn_implementation="eager")
    return model.eval(), config


def random_twin(config, opts: Options):
    """A randomly initialised model of the trained model's own configuration."""
    import transformers

    torch.manual_seed(opts.seed)
    return transformers.AutoModel.from_config(config, attn_implementation="eager").eval()


def load_corpus(opts: Options) -> tuple[str | None, str, str]:
    """The Tiny Shakespeare validation text (or None), the corpus sha256, and why not if None."""
    from attnzoo.config import resolve_data_dir
    from attnzoo.tasks._data import offline
    from attnzoo.tasks.shakespeare import load_text, split_text

    try:
        text, sha = load_text(resolve_data_dir(opts.data_dir, Path.cwd()), download=not offline())
    except Exception as err:  # CorpusError (missing, corrupt) or a failed download
        print(f"warning: text models read random token ids: {type(err).__name__}: {err}")
        return None, "", "no Tiny Shakespeare: see --data-dir"
    return split_text(text, "nanogpt")["val"][:TEXT_CHARS], sha, ""


def tokenizer_for(spec: Spec, vocab_size: int, corpus, source: str | None = None):
    """A function text -> token ids, and its description; None when no tokenizer fits. With
    trained weights from `source`, the tokenizer saved with them (or the Hub's), else none."""
    text, sha, _ = corpus
    where = source or spec.hub
    try:  # the model's own tokenizer: its folder, the Hub with --pretrained, else only a cache
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(
            where, local_files_only=source is None or _local(where)
        )
        if len(tok) <= vocab_size:

            def encode(text: str) -> list[int]:
                return tok(text, add_special_tokens=False)["input_ids"]

            return encode, f"{where} tokenizer"
    except Exception:  # not cached, no network: fall back to a tokenizer made here
        pass
    if source is not None:  # a BPE of our own would feed trained weights meaningless ids
        return None, ""
    if vocab_size < 512:
        return None, ""
    from attnzoo.tasks._tokenizer import trained_bpe

    bpe = min(BPE_VOCAB, vocab_size)
    enc = trained_bpe("tinyshakespeare", f"{sha}:val", lambda: [text], bpe)
    return enc.encode_ordinary, f"Tiny Shakespeare, BPE {bpe} trained on it"


def make_inputs(
    spec: Spec, config, opts: Options, corpus, source: str | None = None
) -> tuple[dict, str]:
    """The probe batch for one model and a description of it."""
    gen = torch.Generator().manual_seed(opts.seed)
    if spec.image:
        size = config.image_size
        pixels = torch.randn(opts.batch, config.num_channels, size, size, generator=gen)
        return {"pixel_values": pixels}, f"Gaussian-noise images {size}×{size}"
    vocab = config.vocab_size
    text, _, why_not = corpus
    if text is not None:
        encode, how = tokenizer_for(spec, vocab, corpus, source)
        if encode is not None:
            stream = torch.tensor(encode(text))
            if len(stream) >= opts.tokens + opts.batch:
                starts = torch.linspace(0, len(stream) - opts.tokens, opts.batch).long()
                ids = torch.stack([stream[s : s + opts.tokens] for s in starts.tolist()])
                return {"input_ids": ids}, f"{how}, windows of {opts.tokens} tokens"
        why_not = "no tokenizer fits the vocabulary" if source is None else "no tokenizer saved"
    ids = torch.randint(0, vocab, (opts.batch, opts.tokens), generator=gen)
    return {"input_ids": ids}, f"uniform token ids ({why_not})"


def probe(names: list[str], sources: dict[str, str], opts: Options) -> Study:
    """Every variant of every model named, at random init and, where `sources` gives weights,
    trained; prints one line per model as it goes."""
    dtype = getattr(torch, opts.dtype)
    text_models = any(not MODELS[m].image for m in names)
    corpus = load_corpus(opts) if text_models else (None, "", "")
    study = Study(sources=dict(sources))
    for name in names:
        spec = MODELS[name]
        start = time.perf_counter()
        source = sources.get(name)
        if source is None:
            model, config = build(spec, opts)
            weights = {INIT: model}
        else:
            model, config = build(spec, opts, source)
            weights = {INIT: random_twin(config, opts), TRAINED: model}
        inputs, described = make_inputs(spec, config, opts, corpus, source)
        inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
        for kind, net in weights.items():
            net = net.to(dtype)
            study.results[name, kind] = {}
            for label, (variant, norms) in VARIANTS.items():
                profile = rank_decay(net, inputs, variant, norms, adapter=ADAPTERS[spec.model_type])
                study.results[name, kind][label] = profile
                stats = [profile.measures[m] for m in MEASURES]
                spread = [profile.measures_std[m] for m in MEASURES]
                study.rows += [
                    [name, label, layer]
                    + [
                        x
                        for mean, std in zip(stats, spread, strict=True)
                        for x in (mean[layer], std[layer])
                    ]
                    + [norms, kind if kind == INIT else f"{kind} ({source})", opts.dtype, described]
                    for layer in range(len(profile.mean))
                ]
        depth = len(study.results[name, INIT]["full"].mean) - 1
        study.shapes[name] = (depth, config.num_attention_heads, described)
        print(f"{name}: {depth} layers, {time.perf_counter() - start:.1f}s, input: {described}")
        del model, weights
    return study


def write_csvs(study: Study, out: Path) -> None:
    """architectures.csv (every point, every measure) and path_counts.csv (share of the paths
    through k heads, per model) in `out`."""
    with open(out / "architectures.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(study.rows)
    with open(out / "path_counts.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["model", "layers", "heads", "k", "share"])
        for name, (depth, heads, _) in study.shapes.items():
            writer.writerows(
                [name, depth, heads, k, share] for k, share in enumerate(path_shares(depth, heads))
            )


def last_layer_summary(study: Study) -> dict[str, float]:
    """Every measure at the last layer, keyed rank/<model>/<init|trained>/<variant>/<measure>/last."""
    return {
        f"rank/{name}/{'init' if kind == INIT else 'trained'}/{label}/{m}/last": values[-1]
        for (name, kind), by_variant in study.results.items()
        for label, profile in by_variant.items()
        for m, values in profile.measures.items()
        if not math.isnan(values[-1])
    }


def report(study: Study, opts: Options) -> str:
    """The markdown report: the residual per layer, every measure at the last layer (random init
    beside trained weights where --pretrained gave them), and the path counts."""
    results, shapes, sources = study.results, study.shapes, study.sources
    trained = bool(sources)
    lines = [
        f"Relative residual ‖res(H)‖/‖H‖ after layer l ({opts.dtype} probe, mean over "
        f"{opts.batch} inputs of {opts.tokens} tokens; ViT: its image's patches)"
        + (", random init beside trained weights." if trained else ", random init."),
        "",
        "| model | layers × heads | variant | weights | input | layer 1 | layer 2 | layer 3 | "
        "last layer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in shapes:
        depth, heads, _ = shapes[name]
        for label in VARIANTS:
            for kind in (INIT, TRAINED):
                if (name, kind) not in results:
                    continue
                mean = results[name, kind][label].mean
                cells = [
                    fmt(mean[min(layer, depth)], ".1e", nan="n/a") for layer in (0, 1, 2, 3, depth)
                ]
                lines.append(
                    f"| {name} | {depth} × {heads} | {label} | {kind} | {' | '.join(cells)} |"
                )
    names = list(MEASURES)
    lines += [
        "",
        "Every measure at the last layer"
        + (" (random init → trained)" if trained else "")
        + ". Collapse reads: residual 0, effective and stable rank 1, token similarity 1; "
        "attention entropy in nats (log N for uniform attention, n/a without attention weights).",
        "",
        "| model | variant | " + " | ".join(n.replace("_", " ") for n in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for name in shapes:
        for label in VARIANTS:
            cells = []
            for m in names:
                values = [
                    fmt(results[name, kind][label].measures[m][-1], ".3g", nan="n/a")
                    for kind in (INIT, TRAINED)
                    if (name, kind) in results
                ]
                cells.append(" → ".join(values))
            lines.append(f"| {name} | {label} | {' | '.join(cells)} |")
    lines += ["", "Inputs:", ""]
    lines += [f"- {name}: {described}" for name, (_, _, described) in shapes.items()]
    if trained:
        lines += ["", "Trained weights:", ""]
        lines += [f"- {name}: {source}" for name, source in sources.items()]
    main_kind = TRAINED if trained else INIT
    lines += [
        "",
        "Paths (Dong et al. 2021): of the (1+H)^L paths through a depth-L, H-head network, the "
        "share through k heads is C(L,k)·H^k/(1+H)^L.",
        "",
        "| model | L | H | mean path length L·H/(1+H) | share with k ≤ 3 | share with k ≤ L/2 | "
        f"pure attention, last layer ({main_kind}) | full, last layer ({main_kind}) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (depth, heads, _) in shapes.items():
        shares = path_shares(depth, heads)
        by_variant = results.get((name, main_kind), results[name, INIT])
        lines.append(
            f"| {name} | {depth} | {heads} | {mean_path_length(depth, heads):.1f} | "
            f"{sum(shares[:4]):.1e} | {sum(shares[: depth // 2 + 1]):.1e} | "
            f"{fmt(by_variant['pure_attention'].mean[-1], '.1e', nan='n/a')} | "
            f"{fmt(by_variant['full'].mean[-1], '.1e', nan='n/a')} |"
        )
    return "\n".join(lines) + "\n"


def figure(study: Study, opts: Options) -> plt.Figure:
    """One row per measure, then the path lengths; one column per model, each panel on its own
    scale (ranks grow with the token count, ViT has 197); one colour per variant,
    solid for the weights probed (trained where given), dashed for random init beside them."""
    results, shapes = study.results, study.shapes
    names = list(shapes)
    measures = list(MEASURES)
    rows = len(measures) + 1
    legend = 3.4 if any(k == TRAINED for _, k in results) else 2.4  # inches for the legend
    width = 3.2 * max(len(names), 2) + legend
    fig, axes = plt.subplots(
        rows,
        len(names),
        figsize=(width, 2.2 * rows),
        squeeze=False,
        gridspec_kw={"height_ratios": [2] * (rows - 1) + [1]},
    )
    floor = 1e-17 if opts.dtype == "float64" else 1e-9
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, name in enumerate(names):
        kinds = [k for k in (INIT, TRAINED) if (name, k) in results]
        for row, m in enumerate(measures):
            ax = axes[row][col]
            for kind in kinds:
                dashed = kind == INIT and len(kinds) > 1
                for i, (label, profile) in enumerate(results[name, kind].items()):
                    values = profile.measures[m]
                    if m == "relative_residual":
                        values = [max(v, floor) for v in values]
                    ax.plot(
                        range(len(values)),
                        values,
                        marker="o",
                        markersize=2.5,
                        color=colours[i % len(colours)],
                        linestyle="--" if dashed else (":" if label.endswith("no_norm") else "-"),
                        label=f"{label} ({kind})" if len(kinds) > 1 else label,
                    )
            if m == "relative_residual":
                ax.set_yscale("log")
            else:
                ax.ticklabel_format(axis="y", useOffset=False)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(m.replace("_", " "), fontsize=8)
        depth, heads, _ = shapes[name]
        axes[0][col].set_title(f"{name} ({depth} × {heads})")
        axes[-2][col].set_xlabel("layer (0: input to the first)")
        ax = axes[-1][col]
        ax.bar(range(depth + 1), path_shares(depth, heads), color="tab:gray")
        ax.set_yscale("log")
        ax.set_xlabel("heads on the path, k")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[-1][0].set_ylabel("share of paths", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7)
    weights = (
        "random init (dashed) beside trained weights"
        if any(k == TRAINED for _, k in results)
        else "random init"
    )
    fig.suptitle(f"Rank decay in real architectures\n({weights}, {opts.dtype} probe)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1 - legend / width, 1))
    return fig


def log_wandb(
    mode: str, project: str, out: Path, config: dict, study: Study, fig: plt.Figure
) -> None:
    """A W&B run (offline or online) in `out` with the table, the figure and, in its summary,
    every measure at the last layer; `config` is the run's config (the command line)."""
    from attnzoo.tracking import WandbRun

    wb = WandbRun(
        mode=mode,
        run_dir=out,
        config=config,
        project=project,
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
                table = wb.wandb.Table(columns=CSV_COLUMNS, data=study.rows)
                media = {"rank/table": table, "rank/plot": wb.wandb.Image(fig)}
            except Exception as err:
                wb._fail("building the W&B table", err)
                return
            wb.log(media, step=0)
            wb.summary(last_layer_summary(study))
    finally:
        wb.finish()
