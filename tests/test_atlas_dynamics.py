"""The claims of two atlas figures, checked at a seconds-scale size: Giorlandino & Goldt's two
failure modes at init (attnzoo.atlas.giorlandino2025_phases) and the clusters of Geshkovski et
al.'s self-attention dynamics (attnzoo.atlas.geshkovski2023_clusters).

With ATTNZOO_AUTHORS_CODE naming a folder that holds the authors' repositories
(ICLR-Signal-Propagation-Transformers/, 2023-transformers-rotf/), their code is run beside
attnzoo's; without it those tests skip and say why."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from attnzoo.atlas import geshkovski2023_clusters as clusters_fig
from attnzoo.atlas import giorlandino2025_phases as phases
from attnzoo.rank import rank_profile

AUTHORS = os.environ.get("ATTNZOO_AUTHORS_CODE")


def _authors(folder: str, file: str) -> Path:
    if not AUTHORS:
        pytest.skip("ATTNZOO_AUTHORS_CODE is not set (a folder holding the authors' repositories)")
    path = Path(AUTHORS) / folder / file
    if not path.is_file():
        pytest.skip(f"ATTNZOO_AUTHORS_CODE has no {folder}/{file}")
    return path


# ---- Giorlandino & Goldt 2025 ------------------------------------------------------------------


def _first_block_entropy(beta: float, p0: float, dim: int = 128, tokens: int = 256) -> float:
    model = phases.build_model(beta, 1.0, dim, tokens, 1, seed=0)
    x = phases.tokens_with_similarity(p0, dim, tokens, seed=0)
    profile = rank_profile(model, x, measures=("attention_entropy",))
    return profile.measures["attention_entropy"][1] / math.log(tokens)


@pytest.mark.parametrize("p0", [0.2, 0.5])
def test_entropy_collapses_at_the_rem_critical_beta(p0):
    """ "[The attention row] condenses above β_c = √(2/(1−p))": the first block's entropy per
    log T follows the REM's 1 − β²(1−p)/2 below β_c, and that law's zero, fitted on β ≤ 1, is
    β_c(p) within 10% — for two input similarities, so the boundary moves with p as predicted."""
    betas = (0.25, 0.5, 0.75, 1.0)
    h = [_first_block_entropy(b, p0) for b in betas]
    for b, hb in zip(betas, h, strict=True):
        assert hb == pytest.approx(phases.theory_entropy(p0, b), abs=0.05)
    c = sum(b**2 * (1 - hb) for b, hb in zip(betas, h, strict=True)) / sum(b**4 for b in betas)
    assert 1 / math.sqrt(c) == pytest.approx(phases.beta_c(p0), rel=0.10)
    # far above β_c the rows have condensed: the entropy is a small share of log T
    assert _first_block_entropy(3 * phases.beta_c(p0), p0) < 0.2


def test_rank_collapse_boundary_is_the_closed_form_alpha_c():
    """ "Below β_c ... we calculate the critical strength for the residual connection": at β = 0.5
    the similarity after 6 post-LN blocks tracks the theory's map within 0.05 at every block,
    and it ends above τ = 0.9 at α_c/1.5 and below it at 1.5·α_c (α_c in closed form)."""
    depth, dim, tokens, beta = 6, 128, 256, 0.5
    alpha_c = phases.closed_form_alpha_c(phases.P0, depth)
    assert phases.theory_alpha_c(beta, phases.P0, depth) == pytest.approx(alpha_c, rel=1e-6)
    x = phases.tokens_with_similarity(phases.P0, dim, tokens, seed=0)
    ends = []
    for alpha in (alpha_c / 1.5, alpha_c * 1.5):
        model = phases.build_model(beta, alpha, dim, tokens, depth, seed=0)
        sim = rank_profile(model, x, measures=("token_similarity",)).measures["token_similarity"]
        theory = phases.theory_similarity(phases.P0, beta, alpha, depth)
        assert max(abs(a - b) for a, b in zip(sim, theory, strict=True)) < 0.05
        ends.append(sim[-1])
    assert ends[0] > phases.TAU > ends[1]


def test_condensed_rows_keep_the_signal():
    """ "a previously unexplored high-variance regime, where signal is preserved but entropy
    collapse occurs": at β = 3 β_c with a weak skip (α = 0.25) the similarity after 4 blocks
    stays far below its value at β = 0.5 (which the theory's map predicts within 0.1), and at
    or below the map's value."""
    depth, dim, tokens, alpha = 4, 128, 256, 0.25
    x = phases.tokens_with_similarity(phases.P0, dim, tokens, seed=0)
    ends, theory = {}, {}
    for beta in (0.5, 3 * phases.beta_c(phases.P0)):
        model = phases.build_model(beta, alpha, dim, tokens, depth, seed=0)
        sim = rank_profile(model, x, measures=("token_similarity",)).measures["token_similarity"]
        ends[beta] = sim[-1]
        theory[beta] = phases.theory_similarity(phases.P0, beta, alpha, depth)[-1]
    (cold, hot), (cold_th, hot_th) = ends.values(), theory.values()
    assert cold == pytest.approx(cold_th, abs=0.1) and cold > 0.8
    # at T = 256 the rows condense further than T → ∞ says: at least the theory's signal is kept
    assert hot < hot_th + 0.05 and hot < cold - 0.3


def test_theory_map_is_the_authors_code():
    """Our block map is the authors' get_block_update_wres (theory_update_relu.py) with their
    MLP switched off, to float precision, over the figure's whole (β, α) grid."""
    _authors(phases.AUTHORS_DIR, "theory_update_relu.py")
    assert phases._authors_theory_gap(phases.P0, phases.DEPTH) < 1e-12


# ---- Geshkovski, Letrouit, Polyanskiy & Rigollet 2023 ------------------------------------------


def test_attention_step_is_the_papers_vector_field():
    """The step's attention is Σ_j e^{β⟨x_i,x_j⟩} x_j / Z_i, and the step stays on the sphere."""
    x = clusters_fig.initial_tokens(3, 5, seed=0, tokens=7)
    beta = 2.5
    x_bnd = x[:, 0]
    w = torch.exp(beta * x_bnd @ x_bnd.transpose(1, 2))
    want = (w / w.sum(-1, keepdim=True)) @ x_bnd
    got = clusters_fig.kernels.scaled_dot_attention(x, x, x, scale=beta)[:, 0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    stepped = clusters_fig.step(x, beta)
    torch.testing.assert_close(stepped.norm(dim=-1), torch.ones(3, 1, 7, dtype=torch.float64))
    expected = torch.nn.functional.normalize(x_bnd + clusters_fig.DT * want, dim=-1)
    torch.testing.assert_close(stepped[:, 0], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dim", [2, 3])
def test_clusters_form_and_their_number_falls_with_time(dim):
    """ "the particles gather into clusters that merge as time runs", toward one cluster: on the
    circle and the sphere at β = 1 the mean count over 8 systems never rises across t = 0, 5,
    …, 20, starts near n and ends below 2."""
    x0 = clusters_fig.initial_tokens(8, dim, seed=1)
    counts = [
        float(clusters_fig.clusters(x).mean()) for _, x in clusters_fig.run(x0, 1.0, 20.0, 5.0)
    ]
    assert all(a >= b for a, b in zip(counts, counts[1:], strict=False))
    assert counts[0] > 0.9 * clusters_fig.TOKENS and counts[-1] < 2


def test_large_beta_merges_slower():
    """Metastability: at β = 9 more clusters remain at t = 20 than at β = 1 (d = 3)."""
    x0 = clusters_fig.initial_tokens(8, 3, seed=1)
    end = {}
    for beta in (1.0, 9.0):
        *_, (_, x) = clusters_fig.run(x0, beta, 20.0, 20.0)
        end[beta] = float(clusters_fig.clusters(x).mean())
    assert end[9.0] > end[1.0] + 1


def test_high_dimension_follows_the_equiangular_ode():
    """ "for d large the inner products follow the equiangular ODE": at d = 512, n = 32, β = 1 the
    mean inner product is within 0.06 of y(t) at t = 2, 4, 6."""
    x0 = clusters_fig.initial_tokens(4, 512, seed=3)
    n = clusters_fig.TOKENS
    for t, x in clusters_fig.run(x0, 1.0, 6.0, 2.0):
        if t == 0:
            continue
        g = x[:, 0] @ x[:, 0].transpose(1, 2)
        mean_ip = float(((g.sum((1, 2)) - n) / (n * (n - 1))).mean())
        assert mean_ip == pytest.approx(clusters_fig.equiangular_inner_product(1.0, t), abs=0.06)


def test_dynamics_match_the_authors_code():
    """The authors' simu_xform (phase-diagrams.py, run on the CPU) and attnzoo's step from the
    same initial points end at the same points (float64) after t = 5."""
    _authors(clusters_fig.AUTHORS_DIR, "phase-diagrams.py")
    module = clusters_fig.authors_module(AUTHORS)
    x0 = clusters_fig.initial_tokens(4, 3, seed=5)
    *_, (_, ours) = clusters_fig.run(x0, 4.0, 5.0, 5.0)
    theirs, _ = clusters_fig.authors_run(module, x0, 4.0, 5.0)
    assert float((ours - theirs).abs().max()) < 1e-10


# ---- the committed files -----------------------------------------------------------------------


@pytest.mark.parametrize("module", [phases, clusters_fig], ids=lambda m: m.ID)
def test_committed_figure_is_its_csv_described(module):
    """scripts/results/atlas/ID.md is describe() of the committed ID.csv read back, and the CSV
    has the columns a quick measure() gives (tests/test_atlas.py checks its own figures so)."""
    from attnzoo import atlas

    base = atlas.ROOT / atlas.RESULTS / module.ID
    for suffix in atlas.SUFFIXES:
        assert base.with_suffix(suffix).is_file(), f"{module.ID}{suffix} is not committed"
    rows = atlas.read_csv(base.with_suffix(".csv"))
    assert base.with_suffix(".md").read_text(encoding="utf-8") == module.describe(rows) + "\n"
    assert atlas.columns(rows) == atlas.columns(module.measure(1, quick=True))
