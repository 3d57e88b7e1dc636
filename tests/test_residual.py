"""model.residual, the skip connection as a family: every variant trains every mixer, starts where
its paper says it starts, keeps the older keys' meaning, and refuses contradictions by name."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnzoo import MIXERS, Block, Model, ModelConfig, build_mixer, rank_profile
from attnzoo.config import ConfigError
from attnzoo.mixers import can_run
from attnzoo.residual import (
    ATTNRES_FORMS,
    RESIDUALS,
    REZERO_ALPHAS,
    attnres_block_size,
    deepnorm_constants,
    layerscale_init,
    resolve,
)
from attnzoo.tracking import read_metrics
from attnzoo.train import compose, run

D, H, VOCAB, N = 16, 2, 11, 7
REFERENCE = Path(__file__).parent / "data" / "residual_add_reference.pt"
# What each variant needs beside model.residual (deepnorm is post-norm by definition; lambda's
# default λ = 1 is add, so the family-wide tests run it at another λ).
NEEDS = {"deepnorm": {"norm_position": "post"}, "lambda": {"residual_alpha": 0.5}}
# The forms beside a variant's default (its authors'), by a name `config` takes for a variant.
FORMS = {
    "rezero-per_branch": ("rezero", {"rezero_alpha": "per_branch"}),
    "attnres-block": ("attnres", {"attnres_form": "block", "attnres_block_size": 3}),
    "attnres-per_block": ("attnres", {"attnres_form": "per_block"}),
}
VARIANTS = (*RESIDUALS, *FORMS)


@pytest.fixture(autouse=True)
def _one_thread():
    """These models are tiny: one thread is faster than two fighting over a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def config(residual: str = "add", **kw) -> ModelConfig:
    """A small model of `residual`, a variant or the name of one of its FORMS; causal where the
    mixer is causal only (stick-breaking, forgetting)."""
    residual, form = FORMS.get(residual, (residual, {}))
    if "causal" not in kw and not can_run(MIXERS[kw.get("mixer", "scaled_dot")], causal=False):
        kw["causal"] = True
    kw = {
        "dim": D,
        "depth": 3,
        "heads": H,
        "impl": "torch",
        **NEEDS.get(residual, {}),
        **form,
        **kw,
    }
    return ModelConfig(residual=residual, **kw)


def build(cfg: ModelConfig, seed: int = 0, max_len: int = 8) -> Model:
    torch.manual_seed(seed)
    return Model(cfg, out_features=5, max_len=max_len, vocab_size=VOCAB)


def tokens(batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, N), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mixer", sorted(MIXERS))
@pytest.mark.parametrize("residual", VARIANTS)
@pytest.mark.sample(24)  # every variant and every mixer at least once; the grid in the slow tier
def test_every_variant_trains_every_mixer(residual, mixer):
    """A few Adam steps on one batch of the sorting task lower the loss, and every parameter,
    the variant's own included, gets a finite gradient and moves (rezero's branches need a step
    before α leaves 0, attnres's RMSNorm gains one before the queries do, so the check is on the
    last step). Each variant in its default form (the authors') and in its other forms."""
    # as many positions as the batch fills: a parameter per position (token_mlp's weights)
    # gets a gradient only from positions that hold a token
    model = build(config(residual, mixer=mixer, depth=2), max_len=N)
    x = tokens(batch=16)
    y = x.sort(dim=1).values
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten() % 5)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        moved = (p - before[name]).flatten(1) if p.dim() > 1 else (p - before[name])[None]
        assert moved.abs().sum(-1).min() > 0 or name == "pos", f"{name} did not move"


@pytest.mark.parametrize(
    "residual",
    [
        "denseformer",
        "attnres",
        "attnres model.attnres_form=block model.attnres_block_size=3",
        "rezero",
        "rezero model.rezero_alpha=per_branch",
    ],
)
@pytest.mark.sample(2)
def test_the_trainer_runs_the_variant_and_probes_rank_after_every_block(residual, tmp_path):
    overrides = [
        *f"model.residual={residual}".split(),
        "model.dim=16",
        "model.depth=3",
        "model.heads=2",
        "train.batch_size=8",
        "train.max_steps=4",
        "train.warmup_steps=1",
        "train.log_every=2",
        "train.eval_every=4",
        "train.eval_batches=1",
        "train.eval_batch_size=512",  # the final evaluation in a few batches
        "train.ckpt_every=4",
        "train.probe_batch_size=4",
        "train.progress=false",
        "logger.mode=disabled",
    ]
    summary = run(compose(overrides), tmp_path)
    assert summary["status"] == "completed" and summary["step"] == 4
    last = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "rank/last" in r][-1]
    assert {f"rank/layer_{i}" for i in range(4)} <= set(last)
    assert last["rank/last"] == last["rank/layer_3"]


@pytest.mark.parametrize("residual", VARIANTS)
def test_every_variant_runs_forward_and_backward_under_bf16_autocast(residual):
    model = build(config(residual, depth=3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, hidden = model(tokens(), return_hidden=True)
    logits.float().sum().backward()
    assert torch.isfinite(logits.float()).all() and len(hidden) == 4
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("residual", VARIANTS)
def test_the_rank_profile_measures_after_every_block(residual):
    profile = rank_profile(build(config(residual, depth=3)), tokens(batch=4))
    assert len(profile.mean) == 4 and all(math.isfinite(v) for v in profile.mean)


# The stored reference was computed on another machine, possibly by another torch: float32 sums
# in another order differ in the last bits (about 1e-7 relative per operation; these depth-3,
# width-16 models accumulate well under 1e-5). A real change to what a residual does moves the
# logits by far more: the test below shows that scaling one residual by 1.001 already exceeds it.
REFERENCE_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
REFERENCE_CASES = {
    "scaled_dot_pre": {"mixer": "scaled_dot"},
    "metric_post": {"mixer": "metric", "norm_position": "post", "norm": "rmsnorm"},
    "quadratic_layer_scale": {
        "mixer": "quadratic",
        "causal": True,
        "residual": "layerscale",
        "residual_alpha": 0.1,
    },
    "pooling_pre_dropout": {"mixer": "pooling", "dropout": 0.1},
}


def forward_reference_tokens(kw: dict, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    model = build(ModelConfig(dim=16, depth=3, heads=2, impl="torch", **kw)).eval()
    with torch.no_grad():
        logits, hidden = model(tokens, return_hidden=True)
    return logits, torch.stack(hidden)


def test_add_matches_the_model_before_the_family():
    """tests/data/residual_add_reference.pt holds the logits and hidden states of four models
    built by attnzoo before model.residual existed (seed 0 for the weights, these tokens): three
    with the plain skip, one with LayerScale at 0.1. `add` and `layerscale` give the same
    numbers, within float32 rounding of the stored ones (made elsewhere)."""
    reference = torch.load(REFERENCE, weights_only=True)
    for name, kw in REFERENCE_CASES.items():
        logits, hidden = forward_reference_tokens(kw, reference[name]["tokens"])
        torch.testing.assert_close(
            logits, reference[name]["logits"], **REFERENCE_TOLERANCE, msg=f"{name} {kw}"
        )
        torch.testing.assert_close(
            hidden, reference[name]["hidden"], **REFERENCE_TOLERANCE, msg=f"{name} {kw}"
        )


def test_the_reference_tolerance_sees_a_small_change_to_a_residual():
    """The tolerance above admits rounding, not regressions: a layer scale of 0.1001 instead of
    0.1 (one part in a thousand) already moves the logits past it."""
    reference = torch.load(REFERENCE, weights_only=True)["quadratic_layer_scale"]
    kw = {"mixer": "quadratic", "causal": True, "residual": "layerscale", "residual_alpha": 0.1001}
    logits, _ = forward_reference_tokens(kw, reference["tokens"])
    with pytest.raises(AssertionError):
        torch.testing.assert_close(logits, reference["logits"], **REFERENCE_TOLERANCE)


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_none_has_no_skip(mixer):
    h = torch.randn(2, N, D)
    block = build(config("none", mixer=mixer)).blocks[0]
    expected = block.mlp(block.norm2(block.mixer(block.norm1(h))))
    torch.testing.assert_close(block(h), expected, rtol=0, atol=0)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_scaled_with_alpha_one_is_add(norm_position):
    x = tokens()
    add = build(config(norm_position=norm_position))(x)
    scaled = build(config("scaled", residual_alpha=1.0, norm_position=norm_position))(x)
    torch.testing.assert_close(scaled, add, rtol=0, atol=0)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_lambda_at_one_is_add_and_at_zero_is_none(norm_position):
    x = tokens()
    for lam, same in ((1.0, "add"), (0.0, "none")):
        want = build(config(same, norm_position=norm_position))(x)
        got = build(config("lambda", residual_alpha=lam, norm_position=norm_position))(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("lam", [-1.0, 0.3, 2.0])
def test_lambda_multiplies_the_skip_of_each_branch(lam):
    """Joseph et al.'s λ-skip, λ·x + f(x), with f the pre-norm branch; any real λ."""
    model = build(config("lambda", residual_alpha=lam))
    assert model.residual.alpha == lam
    assert not any("scale" in name for name, _ in model.named_parameters())
    block, h = model.blocks[0], torch.randn(2, N, D)
    mid = lam * h + block.mixer(block.norm1(h))
    torch.testing.assert_close(block(h), lam * mid + block.mlp(block.norm2(mid)))


def test_scaled_multiplies_each_branch_by_its_fixed_alpha():
    model = build(config("scaled", depth=8))
    alpha = 1 / math.sqrt(16)  # the default 1/√(2·depth)
    assert model.residual.alpha == pytest.approx(alpha)
    assert not any("scale" in name for name, _ in model.named_parameters())
    block, h = model.blocks[0], torch.randn(2, N, D)
    mid = h + alpha * block.mixer(block.norm1(h))
    torch.testing.assert_close(block(h), mid + alpha * block.mlp(block.norm2(mid)))


@pytest.mark.parametrize("form", REZERO_ALPHAS)
@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_rezero_at_init_leaves_every_block_output_equal_to_its_input(mixer, form):
    """The authors' form (the default) has one α per block, the same for both branches;
    per_branch has one per branch. Either way every α is a scalar 0 and each block the
    identity."""
    model = build(config("rezero", mixer=mixer, rezero_alpha=form))
    _, hidden = model(tokens(), return_hidden=True)
    for before, after in zip(hidden, hidden[1:], strict=False):
        assert torch.equal(before, after)
    alphas = [p for name, p in model.named_parameters() if name.endswith(".alpha")]
    per_block = 1 if form == "shared" else 2
    assert len(alphas) == per_block * 3 and all(a.shape == () and a.item() == 0 for a in alphas)


def test_rezero_multiplies_both_branches_of_a_block_by_its_one_alpha():
    """Bachlechner et al.'s x + α·F(x) with their code's one `resweight` per layer: the mixer
    and the MLP branch are scaled by the same learned α, which the optimiser sees once."""
    model = build(config("rezero"))
    assert model.residual.form == "shared"
    names = [name for name, _ in model.named_parameters() if name.endswith(".alpha")]
    assert names == [f"blocks.{i}.scale1.alpha" for i in range(3)]
    for i, block in enumerate(model.blocks):
        assert block.scale2.alpha is block.scale1.alpha
        with torch.no_grad():
            block.scale1.alpha.fill_(0.5 + i)
    assert {f"blocks.0.scale{j}.alpha" for j in (1, 2)} <= set(model.state_dict())
    block, h = model.blocks[1], torch.randn(2, N, D)
    mid = h + 1.5 * block.mixer(block.norm1(h))
    torch.testing.assert_close(block(h), mid + 1.5 * block.mlp(block.norm2(mid)))
    assert sum(p.dim() == 0 for p in model.parameters()) == 3  # the optimiser's view


def test_rezero_per_branch_has_an_alpha_per_branch_and_the_shared_forms_weights():
    """`rezero_alpha=per_branch`: two α per block, under the names the shared form also lists
    in its state dict; the same weights for a seed as the shared form; and x + α₁·mixer, then
    + α₂·MLP, written out here."""
    shared, per_branch = build(config("rezero")), build(config("rezero-per_branch"))
    assert per_branch.residual.form == "per_branch"
    state = per_branch.state_dict()
    assert state.keys() == shared.state_dict().keys()
    assert all(torch.equal(v, state[k]) for k, v in shared.state_dict().items())
    names = [name for name, _ in per_branch.named_parameters() if name.endswith(".alpha")]
    assert names == [f"blocks.{i}.scale{j}.alpha" for i in range(3) for j in (1, 2)]
    block, h = per_branch.blocks[2], torch.randn(2, N, D)
    assert block.scale1.alpha is not block.scale2.alpha
    with torch.no_grad():
        block.scale1.alpha.fill_(0.25)
        block.scale2.alpha.fill_(-2.0)
    mid = h + 0.25 * block.mixer(block.norm1(h))
    torch.testing.assert_close(block(h), mid - 2.0 * block.mlp(block.norm2(mid)))
    with torch.no_grad():  # equal α on both branches: the shared form
        block.scale2.alpha.fill_(0.25)
        shared.blocks[2].scale1.alpha.fill_(0.25)
    torch.testing.assert_close(block(h), shared.blocks[2](h), rtol=0, atol=0)


def test_a_checkpoint_with_an_alpha_per_branch_does_not_load_into_one_shared_alpha():
    per_branch, shared = build(config("rezero-per_branch")), build(config("rezero"))
    shared.load_state_dict(per_branch.state_dict())  # equal α (0): the same model
    with torch.no_grad():
        per_branch.blocks[1].scale2.alpha.fill_(0.5)
    with pytest.raises(RuntimeError, match=r"blocks\.1\.scale2\.alpha.*rezero_alpha=per_branch"):
        shared.load_state_dict(per_branch.state_dict())
    build(config("rezero-per_branch")).load_state_dict(per_branch.state_dict())


def test_layerscale_starts_from_caits_rule_for_the_depth():
    assert [layerscale_init(d) for d in (12, 18, 24, 36)] == [0.1, 0.1, 1e-5, 1e-6]
    model = build(config("layerscale", depth=20))
    gamma = model.blocks[3].scale2.gamma
    assert gamma.shape == (D,) and torch.equal(gamma, torch.full((D,), 1e-5))


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_denseformer_at_init_is_add(mixer):
    x = tokens()
    add = build(config(mixer=mixer))
    dense = build(config("denseformer", mixer=mixer))
    missing, unexpected = dense.load_state_dict(add.state_dict(), strict=False)
    assert all(k.startswith("depth_mixing.") for k in missing) and not unexpected
    logits_add, hidden_add = add(x, return_hidden=True)
    logits_dense, hidden_dense = dense(x, return_hidden=True)
    assert torch.equal(logits_dense, logits_add)
    assert all(torch.equal(a, b) for a, b in zip(hidden_add, hidden_dense, strict=True))
    weights = dense.depth_mixing.weights  # block i: over the embedding and i outputs
    assert [w.tolist() for w in weights] == [[0, 1], [0, 0, 1], [0, 0, 0, 1]]


def test_denseformer_averages_every_earlier_output_with_its_weights():
    model = build(config("denseformer", depth=2))
    with torch.no_grad():
        for w in model.depth_mixing.weights:
            w.copy_(torch.linspace(0.5, -0.25, len(w)))
    x0 = model.drop(model.embed(tokens()) + model.pos[:N])
    x1 = model.blocks[0](x0)
    y1 = 0.5 * x0 - 0.25 * x1
    x2 = model.blocks[1](y1)
    y2 = 0.5 * x0 + 0.125 * x1 - 0.25 * x2
    _, hidden = model(tokens(), return_hidden=True)
    torch.testing.assert_close(hidden[1], y1)
    torch.testing.assert_close(hidden[2], y2)


def rms(v: torch.Tensor) -> torch.Tensor:
    """RMSNorm without a gain, written out: v / √(mean(v²) + ε), ε float32's eps."""
    return v / v.pow(2).mean(-1, keepdim=True).add(torch.finfo(v.dtype).eps).sqrt()


def paper_average(values: list[torch.Tensor], w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Attention Residuals' eq. 2–4: Σᵢ αᵢ·vᵢ, αᵢ = softmaxᵢ(wᵀ·RMSNorm(vᵢ)), RMSNorm's gain g."""
    alpha = torch.stack([(g * rms(v) * w).sum(-1) for v in values]).softmax(0)
    return sum(a[..., None] * v for a, v in zip(alpha, values, strict=True))


def embedding(model: Model, x: torch.Tensor) -> torch.Tensor:
    return model.drop(model.embed(x) + model.pos[: x.shape[1]])


@pytest.mark.parametrize("mlp", [True, False])
@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_attnres_at_init_averages_the_embedding_and_every_earlier_sublayer(mixer, mlp):
    """Full AttnRes, the default form: each mixer and each MLP is a layer of the paper. The
    first sublayer reads the embedding; each later one, and the head, the plain mean of the
    embedding and every earlier sublayer's output, since every pseudo-query starts at 0: one
    query (and one RMSNorm gain, at 1) per sublayer after the first and one for the head."""
    model = build(config("attnres", mixer=mixer, mlp=mlp))
    assert model.residual.form == "full" and model.residual.block_size == 1
    mixing = model.depth_mixing
    sublayers = 3 * (2 if mlp else 1)
    assert len(mixing.queries) == len(mixing.gains) == sublayers
    assert all(w.shape == (D,) and not w.any() for w in mixing.queries)
    assert all(torch.equal(g, torch.ones(D)) for g in mixing.gains)
    x = tokens()
    _, hidden = model(x, return_hidden=True)
    values = [embedding(model, x)]
    inputs = [values[0]]  # the input of each block's mixer, then the head's
    for block in model.blocks:
        h = torch.stack(values).mean(0)
        inputs.append(h)
        values.append(block.mixer_update(h))
        if mlp:
            values.append(block.mlp_update(torch.stack(values).mean(0)))
    inputs.append(torch.stack(values).mean(0))
    torch.testing.assert_close(hidden[0], values[0], rtol=0, atol=0)
    for i in range(1, 4):
        torch.testing.assert_close(hidden[i], inputs[i + 1])


def test_attnres_full_is_the_papers_formula_with_learned_queries_and_gains():
    """A depth-2 model with random pseudo-queries w_l and RMSNorm gains g_l: its hidden states
    and logits are eq. 2–4 of the paper computed here by hand, sublayer by sublayer."""
    model = build(config("attnres", depth=2))
    mixing = model.depth_mixing
    with torch.no_grad():
        for p in [*mixing.queries, *mixing.gains]:
            p.normal_()
    w, g = list(mixing.queries), list(mixing.gains)
    x = tokens()
    logits, hidden = model(x, return_hidden=True)
    b1, b2 = model.blocks
    v0 = embedding(model, x)
    a1 = b1.mixer_update(v0)  # the first sublayer reads the embedding
    m1 = b1.mlp_update(paper_average([v0, a1], w[0], g[0]))
    h3 = paper_average([v0, a1, m1], w[1], g[1])
    a2 = b2.mixer_update(h3)
    m2 = b2.mlp_update(paper_average([v0, a1, m1, a2], w[2], g[2]))
    out = paper_average([v0, a1, m1, a2, m2], w[3], g[3])
    torch.testing.assert_close(hidden[1], h3)
    torch.testing.assert_close(hidden[2], out)
    torch.testing.assert_close(logits, model.head(model.norm(out)))


def test_attnres_block_attends_over_block_sums_and_the_partial_sum():
    """Block AttnRes (the paper's §3.2) with S = 4 sublayers per block over 6 sublayers:
    sources b₀ = the embedding, the completed block sums, and the current block's partial sum
    (absent at a block's first sublayer), computed here by hand."""
    model = build(config("attnres-block", attnres_block_size=4))
    assert model.residual == resolve(config("attnres-block", attnres_block_size=4))
    mixing = model.depth_mixing
    with torch.no_grad():
        for p in [*mixing.queries, *mixing.gains]:
            p.normal_()
    w, g = list(mixing.queries), list(mixing.gains)
    x = tokens()
    _, hidden = model(x, return_hidden=True)
    b1, b2, b3 = model.blocks
    v0 = embedding(model, x)
    f1 = b1.mixer_update(v0)
    f2 = b1.mlp_update(paper_average([v0, f1], w[0], g[0]))
    h3 = paper_average([v0, f1 + f2], w[1], g[1])
    f3 = b2.mixer_update(h3)
    f4 = b2.mlp_update(paper_average([v0, f1 + f2 + f3], w[2], g[2]))
    block1 = f1 + f2 + f3 + f4
    h5 = paper_average([v0, block1], w[3], g[3])  # first sublayer of block 2: no partial sum
    f5 = b3.mixer_update(h5)
    f6 = b3.mlp_update(paper_average([v0, block1, f5], w[4], g[4]))
    out = paper_average([v0, block1, f5 + f6], w[5], g[5])  # the last, incomplete, block
    for got, expected in zip(hidden[1:], [h3, h5, out], strict=True):
        torch.testing.assert_close(got, expected)


def test_attnres_block_of_one_sublayer_is_full_and_its_default_is_about_8_blocks():
    x = tokens()
    full = build(config("attnres"))
    block = build(config("attnres-block", attnres_block_size=1))
    torch.testing.assert_close(block(x), full(x), rtol=0, atol=0)
    assert [attnres_block_size(d, True) for d in (3, 4, 8, 12)] == [1, 1, 2, 3]
    assert attnres_block_size(12, False) == 2
    assert build(config("attnres-block", attnres_block_size=None, depth=8)).residual.block_size == 2


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_attnres_per_block_at_init_is_the_uniform_average_of_block_updates(mixer):
    """attnzoo's own form, `attnres_form=per_block`: at init every block reads the plain
    mean of the embedding and the earlier blocks' updates f(x) = add-block(x) − x, one query
    per block and no RMSNorm gain."""
    model = build(config("attnres-per_block", mixer=mixer, depth=3))
    _, hidden = model(tokens(), return_hidden=True)
    values = [hidden[0]]
    for i, block in enumerate(model.blocks):
        values.append(block.update(hidden[i]))
        torch.testing.assert_close(block.update(hidden[i]), block(hidden[i]) - hidden[i])
        torch.testing.assert_close(hidden[i + 1], torch.stack(values).mean(0))
    queries = model.depth_mixing.queries
    assert len(queries) == 3 and all(w.shape == (D,) and not w.any() for w in queries)
    assert [n for n, _ in model.depth_mixing.named_parameters()] == [
        f"queries.{i}" for i in range(3)
    ]


def test_attnres_per_block_weights_are_a_softmax_of_the_query_against_rmsnormed_updates():
    """The per_block form written out: block i+1 reads softmax(wᵀ·RMSNorm(vⱼ))-weighted block
    updates, the update being the mixer branch plus the MLP branch that reads x + a."""
    model = build(config("attnres-per_block", depth=2))
    with torch.no_grad():
        for w in model.depth_mixing.queries:
            w.normal_()
    x = tokens()
    _, hidden = model(x, return_hidden=True)
    v0, block = embedding(model, x), model.blocks[0]
    a = block.drop1(block.mixer(block.norm1(v0)))
    v1 = a + block.mlp(block.norm2(v0 + a))
    w = model.depth_mixing.queries[0]
    alpha = torch.stack([(rms(v) * w).sum(-1) for v in (v0, v1)]).softmax(0)
    torch.testing.assert_close(hidden[1], alpha[0, ..., None] * v0 + alpha[1, ..., None] * v1)


def test_attnres_forms_agree_without_the_mlp_but_for_the_gains():
    """With model.mlp=false a block is one sublayer, so per_block and Full AttnRes average the
    same sources with a query per block: the same numbers while the RMSNorm gains are 1."""
    x = tokens()
    full = build(config("attnres", mlp=False))
    per_block = build(config("attnres-per_block", mlp=False))
    with torch.no_grad():
        queries = zip(full.depth_mixing.queries, per_block.depth_mixing.queries, strict=True)
        for w_full, w_block in queries:
            w_full.normal_()
            w_block.copy_(w_full)
    torch.testing.assert_close(full(x), per_block(x))


def test_deepnorm_constants_for_the_depth():
    alpha, beta = deepnorm_constants(6)
    assert alpha == pytest.approx(12**0.25) and beta == pytest.approx(48**-0.25)
    assert deepnorm_constants(1) == pytest.approx((2**0.25, 8**-0.25))
    model = build(config("deepnorm", depth=6))
    assert all(block.gain == pytest.approx(alpha) for block in model.blocks)


def test_deepnorm_block_is_post_norm_with_the_skip_scaled_by_alpha():
    model = build(config("deepnorm", depth=6))
    block, x = model.blocks[2], torch.randn(2, N, D)
    alpha = deepnorm_constants(6)[0]
    h = block.norm1(alpha * x + block.mixer(x))
    torch.testing.assert_close(block(x), block.norm2(alpha * h + block.mlp(h)))


def test_deepnorm_init_gives_beta_to_values_outputs_and_ffn_and_1_to_queries_keys():
    """Xavier-normal std is gain·√(2 / (fan_in + fan_out)); measured on 128×128 (q, k, v, out)
    and 128×512 (FFN) weights, within 10%."""
    dim, depth = 128, 6
    beta = deepnorm_constants(depth)[1]
    torch.manual_seed(0)
    block = Block(
        dim,
        build_mixer("scaled_dot", dim=dim, heads=4),
        residual="deepnorm",
        residual_alpha=deepnorm_constants(depth)[0],
        norm_position="post",
        depth=depth,
    )
    xavier = math.sqrt(2 / (dim + dim))
    w_q, w_k, w_v = block.mixer.qkv.weight.chunk(3)
    expected = {
        "q": (w_q, xavier),
        "k": (w_k, xavier),
        "v": (w_v, beta * xavier),
        "out": (block.mixer.proj.weight, beta * xavier),
        "fc": (block.mlp.fc.weight, beta * math.sqrt(2 / (dim + 4 * dim))),
        "mlp proj": (block.mlp.proj.weight, beta * math.sqrt(2 / (dim + 4 * dim))),
    }
    for name, (w, std) in expected.items():
        assert w.std().item() == pytest.approx(std, rel=0.1), name


DEPTH_MIXING = ("denseformer", "attnres", "attnres-block", "attnres-per_block")


def test_depth_mixing_works_with_shared_blocks():
    for residual in DEPTH_MIXING:
        model = build(config(residual, share_blocks=True, depth=4))
        assert len({id(b) for b in model.blocks}) == 1
        _, hidden = model(tokens(), return_hidden=True)
        assert len(hidden) == 5


def test_depth_mixing_keeps_causality():
    for residual in DEPTH_MIXING:
        model = build(config(residual, causal=True))
        with torch.no_grad():
            for p in model.depth_mixing.parameters():
                p.normal_()
        x, changed = tokens(), tokens().clone()
        changed[:, 4:] = (changed[:, 4:] + 1) % VOCAB
        torch.testing.assert_close(model(x)[:, :4], model(changed)[:, :4])


# configuration, words the ValueError must contain (the keys and what is allowed)
BAD = [
    ({"residual": "highway"}, ["model.residual='highway'", "'rezero'", "'attnres'"]),
    (
        {"residual": "add", "residual_alpha": 0.5},
        ["model.residual_alpha=0.5", "scaled", "layerscale"],
    ),
    ({"residual": "rezero", "residual_alpha": 0.5}, ["model.residual_alpha=0.5", "'rezero'"]),
    ({"residual": "scaled", "residual_alpha": -1.0}, ["model.residual_alpha=-1.0", "> 0"]),
    ({"residual": "lambda", "residual_alpha": math.inf}, ["model.residual_alpha=inf", "finite"]),
    ({"residual": "deepnorm", "norm_position": "pre"}, ["deepnorm", "model.norm_position=post"]),
    (
        {"residual": "deepnorm", "norm_position": "post", "norm": "none"},
        ["deepnorm", "model.norm=layernorm or rmsnorm"],
    ),
    ({"residual": "attnres", "norm_position": "post"}, ["attnres", "model.norm_position=pre"]),
    (
        {"residual": "rezero", "rezero_alpha": "per_layer"},
        ["model.rezero_alpha='per_layer'", "'shared'", "'per_branch'"],
    ),
    (
        {"residual": "attnres", "attnres_form": "sublayer"},
        ["model.attnres_form='sublayer'", "'full'", "'block'", "'per_block'"],
    ),
    (
        {"residual": "attnres", "attnres_block_size": 2},
        ["model.attnres_block_size=2", "model.attnres_form='full'", "model.attnres_form=block"],
    ),
    (
        {"residual": "rezero", "attnres_block_size": -1},
        ["model.attnres_block_size=-1", "positive int"],
    ),
    (
        {"residual": "attnres", "attnres_form": "block", "attnres_block_size": 0},
        ["model.attnres_block_size=0", "positive int"],
    ),
]


@pytest.mark.parametrize("kw,words", BAD, ids=lambda v: str(v))
def test_bad_residual_values_raise_naming_the_value_and_what_is_allowed(kw, words):
    cfg = ModelConfig(dim=D, heads=H, **kw)
    with pytest.raises(ValueError) as info:
        resolve(cfg)
    with pytest.raises(ValueError):
        Model(cfg, out_features=2, max_len=8, vocab_size=VOCAB)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_the_form_keys_are_read_by_their_own_variant_only():
    """One sweep over model.residual may set rezero_alpha and attnres_form for every variant:
    the others build the same model as without them."""
    forms = {"rezero_alpha": "per_branch", "attnres_form": "block", "attnres_block_size": 2}
    x = tokens()
    for residual in ("add", "denseformer", "layerscale"):
        plain, with_forms = build(config(residual)), build(config(residual, **forms))
        assert with_forms.residual == plain.residual
        torch.testing.assert_close(with_forms(x), plain(x), rtol=0, atol=0)
    assert build(config("rezero", **forms)).residual.form == "per_branch"
    assert build(config("attnres", **forms)).residual.block_size == 2


def test_a_block_refuses_a_depth_mixing_residual():
    with pytest.raises(ValueError, match="'denseformer'.*build them with Model"):
        Block(D, build_mixer("identity", dim=D), residual="denseformer")


def test_a_contradiction_fails_before_training_with_a_config_error(tmp_path):
    cfg = compose(["model.residual=rezero", "model.residual_alpha=0.5", "logger.mode=disabled"])
    with pytest.raises(ConfigError, match="model.residual_alpha=0.5.*model.residual='rezero'"):
        run(cfg, tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    "key,allowed",
    [("residual", RESIDUALS), ("rezero_alpha", REZERO_ALPHAS), ("attnres_form", ATTNRES_FORMS)],
)
def test_an_unknown_choice_fails_at_composition_listing_the_allowed_values(key, allowed):
    with pytest.raises(Exception) as info:
        compose([f"model.{key}=highway"])
    text, err = [], info.value
    while err is not None:
        text.append(str(err))
        err = err.__cause__ or err.__context__
    for word in (f"model.{key}", "highway", *allowed):
        assert word in "\n".join(text)
