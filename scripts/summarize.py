"""Summarise a Hydra multirun of attnzoo.train: one row per job, one row per configuration over
its seeds with 95% intervals, which differences the seeds resolve, and (optionally) the learning
rate to keep per configuration.

Reads, for each job folder of the sweep, `.hydra/config.yaml`, `.hydra/overrides.yaml`,
`metrics.jsonl` and `summary.json` (nothing from the network, nothing from W&B) and writes to
--out (default: the sweep folder):

- summary.md, summary.csv: one row per job, the per-seed values behind every interval and test:
  its configuration (`group` in the csv, as in groups.csv), mixer, residual (the variant the job ran,
  `model.residual` resolved by attnzoo.residual), MLP, norm, depth,
  task, seed, final validation loss and metric, final rank (the relative residual) and
  final_<measure> for each other collapse measure (effective_rank, stable_rank,
  token_similarity, attention_entropy; the last layer's `rank/<measure>/layer_<k>`, empty when
  n/a or not logged), steps/s, parameters, tokens, wall time, FLOPs, status, and the job's own
  overrides. A job that failed, diverged or was preempted keeps the status its
  summary.json gives; a job with metrics but no summary is "incomplete" (still running or
  killed), one with a folder but no metrics "missing", one whose files do not parse "corrupt".
  A job number the sweep's launcher never reached (a gap in 0..max, or fewer folders than the
  sweep's grid) appears as "missing" too. Tokens, FLOPs and wall time are what the run
  recorded in summary.json's `compute` (FLOPs: tokens × the analytic training FLOPs per token of
  the blocks, attnzoo.flops: matmuls, backward = 2 × forward, embedding and head excluded; wall
  time: the training loop's seconds, evaluation included, over every resume); for a run that
  did not record them, tokens are steps × train.batch_size × context of the resolved config and
  wall time is time.total_s.
- groups.md, groups.csv: one row per configuration. Jobs whose resolved configs differ only in
  `train.seed` (and in non-semantic keys: logger.*, data_dir, train.progress/resume/threads/
  ckpt_every/device) are replicates of one configuration. Columns: the axes that vary between
  configurations, n_seeds (completed seeds with a finite value), n_jobs, seeds, then for
  val_loss, metric (the task's), rank and each other collapse measure (<measure>_mean, ...):
  _mean, _std, _ci_low, _ci_high (Student-t, see attnzoo.stats for why not the bootstrap), then steps_per_s_mean, params, tokens, wall_s_mean,
  flops, note. A configuration with one seed has an empty interval and says so; a seed that did
  not complete is left out and named in the note.
- which split: --metric (val_loss, metric, test_loss, test_metric; default auto: test_loss when
  every completed job has held-out test numbers and nothing is selected, else val_loss) is what
  the comparisons, groups.md's loss and metric columns and intervals.png show; groups.md says
  which split and comparisons.csv has `split`. Jobs that did not complete are printed as
  warnings with their reasons; a configuration with no completed seed says n=0 and why.
- comparisons.csv and a section of groups.md: along one axis (--compare, default: the axis the
  sweep varied, the mixer when it varied several), each configuration against a reference fixed
  up front (--reference; default scaled_dot for the mixer, add for model.residual, else the
  axis's first value in the sweep's grid), never the best of the same runs, with the other axes
  fixed: the paired t-test on the seeds both ran (a seed fixes data order and initialisation, so
  matching seeds share noise that pairing removes), Welch's t-test when their seed sets differ.
  Every p-value is corrected over the report's comparisons (--correction, default holm);
  comparisons.csv has both (p, p_adjusted) and the verdicts use the adjusted ones: "better" /
  "worse" than the reference (two-sided test); with --margin δ, "worse (better) by more than the
  margin" (the test against δ, two-sided) and "within margin" (two one-sided tests, TOST); "not
  resolved with n seeds (could resolve |Δ| ≥ h)" otherwise, h the interval's half-width.
- intervals.png: per configuration, the mean and its interval (whiskers) of the final
  validation loss, metric and rank, each seed as a grey dot. val_bands.png: validation loss
  against step, mean over seeds with its interval as a band.
- rank_vs_depth.png: the relative residual after each block at the final evaluation, one panel per
  ablation (residual/MLP/norm), each configuration's seeds faint and their mean bold, on a log axis
  only where the values span decades. val_curves.png: validation loss against step, one line per
  job.
- with --select-by val_loss --tune-axis train.lr: selected.json, selected.md, selected.sh: for
  each configuration of the other axes, the value of the tuned axis with the best mean over the
  tuning seeds (a value at the edge of the grid is flagged), and the commands that rerun each at
  its value with fresh seeds and summarise the reruns.

    python scripts/summarize.py multirun/2026-11-22_12-00-00
    python scripts/summarize.py multirun/2026-11-22_12-00-00 --out reports/sweep1 --margin 0.02
    python scripts/summarize.py multirun/a multirun/b --out reports/ab     # several sweeps as one

Everything here is attnzoo.analysis (docs/analysis.md), which gives the same numbers in Python.

A replicated, tuned ablation (tune on seeds 100-101 over a log-spaced grid, then report on fresh
seeds 0-4, so the reported numbers are not the ones the choice was made on):

    python -m attnzoo.train -m mixer=scaled_dot,pooling train.lr=1e-3,2e-3,4e-3,8e-3 \\
        train.seed=100,101 hydra.sweep.dir=multirun/tune
    python scripts/summarize.py multirun/tune --select-by val_loss --tune-axis train.lr \\
        --final-dir multirun/final
    bash multirun/tune/selected.sh      # one sweep per configuration at its selected LR, seeds
                                        # 0-4, then: summarize.py multirun/final/*/ --out
                                        # multirun/final-report --compare mixer
"""

from __future__ import annotations

import argparse
import os
import shlex
import warnings
from pathlib import Path

from attnzoo.analysis import summarize
from attnzoo.analysis.groups import X_AXES
from attnzoo.analysis.report import METRICS
from attnzoo.analysis.runs import SweepWarning


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__[__doc__.index("A replicated, tuned ablation") :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", type=Path, nargs="+", help="multirun folder(s) (hold 0/, 1/, ...)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: sweep)")
    parser.add_argument(
        "--compare",
        default=None,
        help="axis to compare along (e.g. mixer, model.residual); default: the axis "
        "the sweep varied (the mixer when it varied several)",
    )
    parser.add_argument(
        "--reference",
        default=None,
        help="the value of the compared axis every other is compared with "
        "(default: scaled_dot for mixer, add for model.residual, else the "
        "axis's first value in the sweep)",
    )
    parser.add_argument(
        "--correction",
        choices=("holm", "bonferroni", "none"),
        default="holm",
        help="family-wise correction over the report's comparisons (default holm)",
    )
    parser.add_argument(
        "--metric",
        choices=METRICS,
        default="auto",
        help="what to compare on: val_loss, metric (the task's, on val), "
        "test_loss, test_metric (held-out test); auto (default): test_loss "
        "when every completed job has it and no --select-by, else val_loss",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=None,
        help="equivalence margin on the compared value for TOST (e.g. 0.01)",
    )
    parser.add_argument("--confidence", type=float, default=0.95, help="default 0.95")
    parser.add_argument(
        "--select-by",
        choices=("val_loss", "metric"),
        default=None,
        help="pick the --tune-axis value with the best mean of this",
    )
    parser.add_argument("--tune-axis", default=None, help="the tuned axis, e.g. train.lr")
    parser.add_argument(
        "--fresh-seeds",
        default="0,1,2,3,4",
        help="seeds of the follow-up runs at the selected values",
    )
    parser.add_argument(
        "--final-dir", default="multirun/final", help="where selected.sh puts the follow-up sweeps"
    )
    parser.add_argument(
        "--x",
        choices=tuple(X_AXES),
        default="steps",
        dest="x_axis",
        help="what val_bands.png is drawn against (default: steps)",
    )
    parser.add_argument(
        "--wandb",
        choices=("auto", "offline", "online", "disabled"),
        default="auto",
        dest="wandb_mode",
        help="log the groups table as a W&B Table in a summary run; auto: "
        "offline when the sweep's runs used W&B",
    )
    args = parser.parse_args()
    if not 0.0 < args.confidence < 1.0:
        parser.error("--confidence must be in (0, 1)")
    try:
        with warnings.catch_warnings(record=True) as caught:  # printed after the tables
            warnings.simplefilter("always")
            summarize(
                args.sweep,
                args.out,
                compare_axis=args.compare,
                margin=args.margin,
                reference=args.reference,
                correction=args.correction,
                metric=args.metric,
                confidence=args.confidence,
                select_by=args.select_by,
                tune_axis=args.tune_axis,
                fresh_seeds=args.fresh_seeds,
                final_dir=args.final_dir,
                x_axis=args.x_axis,
                wandb_mode=args.wandb_mode,
                script=shlex.quote(os.path.relpath(Path(__file__).resolve())),  # from where it runs
            )
    except ValueError as err:
        parser.error(str(err))
    out = args.out or args.sweep[0]
    print((out / "summary.md").read_text())
    print((out / "groups.md").read_text())
    written = "summary.{md,csv}, groups.{md,csv}, intervals.png, val_bands.png"
    if (out / "comparisons.csv").exists():
        written += ", comparisons.csv"
    if args.select_by:
        print((out / "selected.md").read_text())
        written += ", selected.{json,md,sh}"
    print(f"wrote {out}/: {written}, rank_vs_depth.png, val_curves.png")
    for run_folder in sorted((out / "wandb").glob("offline-run-*"))[-1:]:
        print(f"W&B summary run (the groups table): {run_folder}   upload: wandb sync {run_folder}")
    for w in caught:  # which jobs did not complete and why, what was left out
        if issubclass(w.category, SweepWarning):
            print(f"WARNING: {w.message}")
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


if __name__ == "__main__":
    main()
