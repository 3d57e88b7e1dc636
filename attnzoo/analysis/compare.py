"""Comparisons along one axis of a sweep: within each block of configurations that differ only in
that axis, every configuration against a reference fixed before the runs (attnzoo.stats.compare:
the paired t-test on the seeds both ran, Welch's t-test when the seed sets differ; with a margin
δ, the test against δ and TOST), the p-values of the whole report corrected together
(Holm by default), and each verdict in words from the test that supports it.

One multiplicity policy: every hypothesis a verdict of the report can rest on is in one family
(`correct`): each comparison's two-sided test and, with a margin, its test against the margin and
its TOST. With m comparisons and a margin that is 3m hypotheses, Holm-adjusted together, so the
chance of any false verdict in the report is at most α, whichever test a verdict comes from.

The reference of an axis: `reference=` when given (an error if the sweep did not run it);
otherwise DEFAULT_REFERENCE when the sweep ran it (the mixer: scaled_dot, the residual: add);
otherwise the axis's first value in the sweep's order (the order of the grid on the command
line, which Hydra numbers its jobs by). Never the best of the same
runs: a reference picked after seeing the data favours itself.

Verdicts, at α = 1 − confidence, each on the family-wise adjusted p of its test:
- "worse/better by more than the margin": the test against δ, two-sided (the one-sided p in the
  observed direction, doubled: stats.Comparison.p_margin);
- "worse/better": the two-sided paired (or Welch) t-test, with ", within margin" when TOST also
  puts the difference inside ±δ (a real but negligible difference);
- "within margin": TOST;
- "not resolved": none of these; the sentence says the smallest |Δ| the seeds could have
  resolved in this family (`resolvable`): the half-width of the interval of the difference at
  level α/m (Bonferroni's simultaneous interval over the family's m hypotheses; at α without a
  correction), so
  that an observed difference that large would have been resolved whatever the other tests gave.
"""

from __future__ import annotations

import json
import math
from typing import Any

from attnzoo.analysis.groups import Group, axis_name, split_of
from attnzoo.analysis.runs import task_attr
from attnzoo.analysis.tables import fmt
from attnzoo.stats import (
    CORRECTIONS,
    RATE_TEST,
    Comparison,
    adjust,
    compare,
    compare_rates,
    rate_resolvable,
    t_ppf,
)

COMPARISON_COLUMNS = (
    "block",
    "config",
    "reference",
    "on",
    "split",  # val or test: which split the compared values are from (empty: a collapse measure)
    "method",
    "n",
    "n_reference",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
    "half_width",
    "resolvable",
    "p",
    "p_adjusted",
    "margin",
    "p_margin",
    "p_margin_adjusted",
    "p_tost",
    "p_tost_adjusted",
    "correction",
    "tests",
    "verdict",
    "sentence",
)
# the reference of an axis when none is given (any other axis: its first value in the sweep)
DEFAULT_REFERENCE = {"mixer.name": "scaled_dot", "model.residual": "add"}


def resolve_axis(name: str, axes: list[str]) -> str:
    """`mixer` or `mixer.name` or `model.residual`: the config key of a varied axis."""
    for key in (name, f"{name}.name"):
        if key in axes:
            return key
    shown = ", ".join(axis_name(a) for a in axes) or "none (the sweep varied only the seed)"
    raise ValueError(f"{name!r} is not an axis this sweep varied; its axes: {shown}")


def default_axis(axes: list[str]) -> str | None:
    """The axis the sweep varied: the only one, or the mixer, or the first."""
    if not axes:
        return None
    return "mixer.name" if "mixer.name" in axes else axes[0]


def lower_is_better(which: str, groups: list[Group]) -> bool:
    """Loss and rank: lower / higher is better; the task metric: the task's own direction."""
    if which in ("val_loss", "test_loss"):
        return True
    if which == "rank":
        return False  # a higher relative residual is less collapse
    tasks = {g.config.get("task.name") for g in groups}
    return not all(task_attr(t, "higher_is_better", True) for t in tasks)


def _in_scope(key: str, axis: str) -> bool:
    """`key` is the axis itself or under its config group (mixer.window for mixer.name)."""
    scope = axis.removesuffix("name") if axis.endswith(".name") else f"{axis}."
    return key == axis or key.startswith(scope)


def attached_keys(groups: list[Group], axis: str) -> list[str]:
    """Other axes that were chosen per value of `axis` rather than crossed with it: leaving one
    out of the blocks still puts each value of `axis` at most once in a block. A sweep rerun at
    a learning rate selected per mixer has train.lr attached to the mixer, so the mixers are
    still compared with each other (each at its own learning rate)."""
    rest = [k for k in (groups[0].label if groups else {}) if not _in_scope(k, axis)]
    attached: list[str] = []
    for key in rest:
        keep = [k for k in rest if k != key and k not in attached]
        seen: set[tuple[str, str]] = set()
        unique = True
        for g in groups:
            cell = (
                json.dumps([g.label.get(k) for k in keep], default=str),
                json.dumps(g.label.get(axis), default=str),
            )
            unique &= cell not in seen
            seen.add(cell)
        if unique:
            attached.append(key)
    return attached


def blocks(groups: list[Group], axis: str, attach: bool = True) -> dict[str, list[Group]]:
    """Groups that differ only in `axis` (and keys under its config group, and with `attach`
    the keys chosen per value of it: `attached_keys`), by the other axes' values."""
    skip = set(attached_keys(groups, axis)) if attach else set()
    out: dict[str, list[Group]] = {}
    for g in groups:
        rest = {k: v for k, v in g.label.items() if not _in_scope(k, axis) and k not in skip}
        name = ", ".join(f"{axis_name(k)}={fmt(v)}" for k, v in rest.items()) or "all"
        out.setdefault(name, []).append(g)
    return out


def config_name(g: Group, axis: str, attached: list[str]) -> str:
    """The value of `axis`, with the attached keys' values: `pooling (train.lr=0.01)`."""
    extra = ", ".join(f"{axis_name(k)}={fmt(g.label.get(k))}" for k in attached)
    return fmt(g.label.get(axis)) + (f" ({extra})" if extra else "")


def _same(value: Any, reference: Any) -> bool:
    """A config value and a reference given as text (`--reference true`, `0.01`) or a value."""
    if value == reference and type(value) is type(reference):
        return True
    text = str(reference).strip()
    if isinstance(value, bool):
        return text.lower() == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(text) == float(value)
        except ValueError:
            return False
    return str(value) == text


def reference_value(groups: list[Group], axis: str, reference: Any = None) -> Any:
    """The value of `axis` every other is compared with (see the module docstring); a ValueError
    naming the axis's values when the reference is not one of them."""
    values: list[Any] = []
    for g in groups:
        if repr(g.label.get(axis)) not in map(repr, values):
            values.append(g.label.get(axis))
    if reference is None:  # the axis's default when the sweep ran it, else its first value
        default = DEFAULT_REFERENCE.get(axis)
        found = [v for v in values if default is not None and _same(v, default)]
        return found[0] if found else (values[0] if values else None)
    for v in values:
        if _same(v, reference):
            return v
    shown = ", ".join(fmt(v) for v in values)
    raise ValueError(
        f"--reference {fmt(reference)!r} is not a value of {axis_name(axis)} in this sweep "
        f"({shown})"
    )


def _seeds(r: dict[str, Any]) -> str:
    if r["method"] == "paired t":
        return f"{min(r['n'], r['n_reference'])} seeds"
    return f"{r['n']}+{r['n_reference']} seeds"


def _small(p: Any, alpha: float) -> bool:
    return isinstance(p, float) and not math.isnan(p) and p < alpha


def judge(r: dict[str, Any]) -> str:
    """The verdict of one comparison row from its adjusted p-values (the module docstring)."""
    alpha = 1.0 - r["confidence"]
    if not isinstance(r["p"], float) or math.isnan(r["p"]):
        return "too few seeds"
    lower_better = r["lower_is_better"]
    side = "better" if (r["diff"] < 0) == lower_better else "worse"
    if _small(r["p_margin_adjusted"], alpha):
        return f"{side} by more than the margin"
    if _small(r["p_adjusted"], alpha):
        return side + (", within margin" if _small(r["p_tost_adjusted"], alpha) else "")
    if _small(r["p_tost_adjusted"], alpha):
        return "within margin"
    return "not resolved"


def _p(p: Any) -> str:
    return "n/a" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:.2g}"


def sentence(r: dict[str, Any]) -> str:
    """One comparison in words: the verdict and the test it rests on, then the seeds, the
    difference with its interval, and every p-value (raw and adjusted)."""
    a, ref, v = r["config"], r["reference"], r["verdict"]
    if v == "too few seeds":
        return (
            f"{a} vs {ref}: too few seeds to tell ({r['n']} and {r['n_reference']}; 2 each needed)"
        )
    how = "" if r["correction"] == "none" else f" {r['correction'].capitalize()}-adjusted"
    margin = r["margin"]
    if v.endswith("by more than the margin"):
        head = (
            f"{v.split()[0]} than {ref} by more than the margin {margin:g} (test against "
            f"{margin:g}, two-sided:{how} p = {_p(r['p_margin_adjusted'])})"
        )
    elif v in ("better", "worse", "better, within margin", "worse, within margin"):
        head = f"{v.split(',')[0]} than {ref} (two-sided test:{how} p = {_p(r['p_adjusted'])})"
        if v.endswith("within margin"):
            head += (
                f", and within margin ±{margin:g} (TOST:{how} p = "
                f"{_p(r['p_tost_adjusted'])}), a real but negligible difference"
            )
    elif v == "within margin":
        head = f"within margin ±{margin:g} (TOST:{how} p = {_p(r['p_tost_adjusted'])})"
    elif math.isinf(r["resolvable"]):
        head = (
            f"not resolved with {_seeds(r)} (no outcome of these seeds could be resolved in "
            "this family; not the same as equal)"
        )
    else:
        head = (
            f"not resolved with {_seeds(r)} (could resolve |Δ| ≥ {r['resolvable']:.2g}; "
            "not the same as equal)"
        )
    stats = (
        f"{r['method']}, {_seeds(r)}, Δ{r['on'] if ' ' not in r['on'] else '(' + r['on'] + ')'}"
        f" = {r['diff']:+.3g}, {r['confidence']:.0%} CI "
        f"[{r['diff_ci_low']:+.3g}, {r['diff_ci_high']:+.3g}], p = {_p(r['p'])}"
    )
    if margin is not None:
        stats += f"; beyond ±{margin:g}: p = {_p(r['p_margin'])}; TOST ±{margin:g}: p = {_p(r['p_tost'])}"
    return f"{a} vs {ref}: {head} [{stats}]"


def comparison_row(a: str, ref: str, on: str, c: Comparison, lower_is_better: bool) -> dict:
    """One comparison (COMPARISON_COLUMNS and what `judge` needs), not yet adjusted: its
    adjusted p-values are its own until `correct` puts it in a family."""
    return {
        "config": a,
        "reference": ref,
        "on": on,
        "split": split_of(on),
        "method": c.method,
        "n": c.n_a,
        "n_reference": c.n_b,
        "diff": c.diff,
        "diff_ci_low": c.low,
        "diff_ci_high": c.high,
        "half_width": c.half_width,
        "df": c.df,
        "p": c.p_value,
        "margin": c.margin,
        "p_margin": c.p_margin,
        "p_tost": c.p_tost,
        "confidence": c.confidence,
        "lower_is_better": lower_is_better,
    }


def _resolvable(r: dict[str, Any], m: int) -> float:
    """The half-width of the interval of the difference at level α/m (see the module docstring);
    for success rates, the smallest difference of rates the trials could resolve at α/m
    (stats.rate_resolvable)."""
    alpha, df, half = 1.0 - r["confidence"], r["df"], r["half_width"]
    if r["method"] == RATE_TEST:
        return rate_resolvable(r["n"], r["n_reference"], alpha / max(m, 1))
    if not (isinstance(half, float) and math.isfinite(half)) or m < 1:
        return math.nan
    if half == 0.0:
        return 0.0
    return half * t_ppf(1.0 - alpha / (2 * m), df) / t_ppf(1.0 - alpha / 2, df)


HYPOTHESES = ("p", "p_margin", "p_tost")  # the tests of one comparison (the last two: a margin)


def _made(p: Any) -> bool:
    return isinstance(p, float) and not math.isnan(p)


def correct(rows: list[dict[str, Any]], correction: str = "holm") -> list[dict[str, Any]]:
    """Adjust the p-values of `rows` as one family (every comparison of a report): every test a
    verdict can rest on (the two-sided p, the p against the margin, TOST's) goes into one list
    adjusted by `correction`; then each row's verdict and sentence from the adjusted ones.
    `tests` is the family's size, the hypotheses tested (a comparison with a margin counts
    three). Returns `rows`, changed in place."""
    if correction not in CORRECTIONS:
        raise ValueError(f"--correction {correction!r}: allowed: {', '.join(CORRECTIONS)}")
    family = [(r, key) for r in rows for key in HYPOTHESES if _made(r.get(key))]
    for r in rows:
        for key in HYPOTHESES:
            r[f"{key}_adjusted"] = None if r.get(key) is None else math.nan
    for (r, key), q in zip(family, adjust([r[k] for r, k in family], correction), strict=True):
        r[f"{key}_adjusted"] = q
    tests = len(family)
    for r in rows:
        r["correction"], r["tests"] = correction, tests
        r["resolvable"] = _resolvable(r, tests if correction != "none" else 1)
        r["verdict"] = judge(r)
        r["sentence"] = sentence(r)
    return rows


def comparisons(
    groups: list[Group],
    axis: str,
    on: str = "val_loss",
    confidence: float = 0.95,
    margin: float | None = None,
    reference: Any = None,
    correction: str = "holm",
    success: float | None = None,
) -> list[dict[str, Any]]:
    """Within each block (the other axes fixed), every configuration against the reference
    (`reference_value`) on `on`: attnzoo.stats.compare, i.e. the paired t-test on the seeds both
    ran, Welch's t-test when the seed sets differ, with `margin` the (two-sided) test against it
    and TOST; the p-values corrected together by `correction` (holm, bonferroni, none). One row
    (COMPARISON_COLUMNS) per configuration that is not the reference; a block without the
    reference is left out. To correct over several calls (axes, tasks, metrics of one report),
    `correct` their rows together.

    With `success` (a threshold fixed before the runs) the outcome of a seed is whether its `on`
    reached it (≥ where higher is better, ≤ where lower is), and each configuration's success
    rate is compared with the reference's by Boschloo's exact test (stats.compare_rates; no
    margin): for outcomes that are success or failure, where a mean and its t-interval mislead.
    Such a row is `on` "success: <on> ≥ <threshold>"."""
    lower = lower_is_better(on, groups)
    attached = attached_keys(groups, axis)
    ref_value = reference_value(groups, axis, reference)
    rows = []
    for block, members in blocks(groups, axis).items():
        scored = [g for g in members if g.values(on)]
        refs = [g for g in scored if _same(g.label.get(axis), ref_value)]
        if not refs:
            continue
        ref = refs[0]
        for g in scored:
            if g is ref:
                continue
            if success is None:
                c = compare(g.values(on), ref.values(on), confidence, margin)
                what, better_low = on, lower
            else:
                (k_a, n_a), (k_b, n_b) = (successes(x.values(on), success, lower) for x in (g, ref))
                c = compare_rates(k_a, n_a, k_b, n_b, confidence)
                what, better_low = success_name(on, success, lower), False
            a_name = config_name(g, axis, attached)
            row = comparison_row(a_name, config_name(ref, axis, attached), what, c, better_low)
            rows.append({"block": block, **row, "value": g.label.get(axis)})
    return correct(rows, correction)


def successes(values: dict[Any, float], threshold: float, lower: bool) -> tuple[int, int]:
    """(seeds that reached `threshold`, seeds): ≤ it where lower is better, ≥ where higher is."""
    hits = [v <= threshold if lower else v >= threshold for v in values.values()]
    return sum(hits), len(hits)


def success_name(on: str, threshold: float, lower: bool) -> str:
    """What a success-rate comparison is on: `success: test_metric ≥ 0.9`."""
    return f"success: {on} {'≤' if lower else '≥'} {threshold:g}"
