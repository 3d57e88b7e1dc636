"""The rank-collapse study's reading checked against what is known (scripts/rank_collapse.py):
a pure Re(fft2) stack keeps rank, a frozen random row-stochastic mixer and a local mask collapse
singly exponentially, and a local mask decays more slowly than full attention (Wu et al. 2024)."""

from __future__ import annotations

from attnzoo.analysis.tables import fmt
from attnzoo.stats import Interval


def ci(x: Interval, spec: str) -> str:
    """`mean [low, high]`, each in `spec` ("n/a" for NaN)."""
    mean, low, high = (fmt(v, spec, nan="n/a") for v in (x.mean, x.low, x.high))
    return f"{mean} [{low}, {high}]"


def known_answers(rate: dict[str, dict], control: str) -> list[str]:
    """What is known, read off the rate study (its rows by mixer, `control` the control's):
    each line says whether it holds here."""
    lines = []
    if "fourier" in rate:
        kind = rate["fourier"]["kind"]
        lines.append(
            f"- A pure Re(fft2) stack (fourier) keeps rank: {kind} — "
            f"{'holds' if kind == 'no collapse' else 'does not hold'}."
        )
    kind = rate[control]["kind"]
    lines.append(
        f"- A frozen random row-stochastic mixer collapses singly exponentially: {kind} — "
        f"{'holds' if 'singly' in kind else 'does not hold'}."
    )
    if "local" in rate:
        kind = rate["local"]["kind"]
        lines.append(
            f"- A local mask collapses singly exponentially: {kind} — "
            f"{'holds' if 'singly' in kind else 'does not hold'}."
        )
    if "local" in rate and "scaled_dot" in rate:
        local, full = rate["local"]["depth3"], rate["scaled_dot"]["depth3"]
        lines.append(
            "- A local mask decays more slowly than full attention (Wu et al. 2024): log10 r at "
            f"depth 3, local {ci(local, '.2f')} vs scaled_dot {ci(full, '.2f')} — "
            f"{'holds' if local.low > full.high else 'not resolved'} (95% intervals "
            f"{'disjoint' if local.low > full.high else 'overlap or reversed'})."
        )
    return lines
