"""What the study commands (scripts/mixer_ablation.py, recall.py, sinks.py, rank_ablation.py)
share: the machine a report names, one `python -m attnzoo.train -m` sweep that a second run of
the same command skips when its jobs all completed and resumes otherwise, the tiny synthetic
corpora and toy size of their --smoke runs, the options and trainer overrides every study run
takes, and a tuned study's comparisons with its reference. The tuned-study engine itself
(tune, choose, rerun, collect, report) is attnzoo.engine."""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import math
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def machine() -> str:
    """CPU model, cores and torch version, from this process."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{cpu}, {cores} cores available, {gpu}; torch {torch.__version__}, "
        f"Python {platform.python_version()}, {platform.system()}"
    )


def completed(sweep: Path, expected: int) -> bool:
    """Every job of the sweep has a summary.json with status completed."""
    done = 0
    for summary in sweep.glob("*/summary.json"):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            done += json.loads(summary.read_text()).get("status") == "completed"
    return done >= expected


def sweep(overrides: list[str], folder: Path, expected: int, env: dict[str, str], log: Path):
    """One `python -m attnzoo.train -m` sweep into `folder` (skipped when it already completed;
    interrupted jobs resume). A failed job is left to the summary, which reports its status.

    The console gets the command (pasteable), where the jobs' own output goes, and a line per
    job as it ends: k of n, its overrides, its status and validation loss, the time so far and
    an estimate of the time left."""
    python = "python" if shutil.which("python") == sys.executable else sys.executable
    cmd = [python, "-m", "attnzoo.train", "-m", *overrides, f"hydra.sweep.dir={folder}"]
    if completed(folder, expected):
        print(f"  done already: {folder}")
        return
    print("  $ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    print(f"    {expected} jobs; their output goes to {log}", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    progress = _Progress(folder, expected)
    with open(log, "a") as f:
        proc = subprocess.Popen(
            [sys.executable, *cmd[1:]], stdout=f, stderr=subprocess.STDOUT, env=env
        )
        try:
            while proc.poll() is None:
                time.sleep(2)
                progress.report()
        except KeyboardInterrupt:
            proc.wait()  # the sweep got the Ctrl-C too: its job checkpoints and stops
            raise
    progress.report()
    if proc.returncode != 0:
        print(f"  the sweep exited with {proc.returncode} (see {log}); the summary keeps the jobs")


class Progress:
    """Lines that say where long work is: `done(label)` prints "k/n label (time so far, ~time
    left)", the time left being the mean time per item done since this began times the items
    still to do."""

    def __init__(self, total: int, indent: str = "    ", done: int = 0, stream=None) -> None:
        self.total, self.indent, self.count, self.stream = total, indent, done, stream
        self.before, self.start = done, time.monotonic()

    def done(self, label: str) -> None:
        self.count += 1
        elapsed = time.monotonic() - self.start
        left = elapsed / (self.count - self.before) * max(self.total - self.count, 0)
        print(
            f"{self.indent}{self.count}/{self.total} {label} ({duration(elapsed)} so far, "
            f"~{duration(left)} left)",
            file=self.stream or sys.stdout,
            flush=True,
        )


class _Progress:
    """The jobs of a sweep folder that have ended (their summary.json no longer says running),
    each reported once as a `Progress` line."""

    def __init__(self, folder: Path, expected: int) -> None:
        self.folder = folder
        self.seen = set(self._ended())
        self.lines = Progress(expected, indent="    job ", done=len(self.seen))

    def _ended(self) -> dict[Path, dict[str, Any]]:
        ended = {}
        for path in sorted(self.folder.glob("*/summary.json")):
            with contextlib.suppress(OSError, json.JSONDecodeError):
                summary = json.loads(path.read_text())
                if summary.get("status") not in (None, "running"):
                    ended[path.parent] = summary
        return ended

    def report(self) -> None:
        for job, summary in self._ended().items():
            if job not in self.seen:
                self.seen.add(job)
                loss = (summary.get("final") or {}).get("val/loss")
                result = summary["status"] + (f", val/loss {loss:.4g}" if loss is not None else "")
                self.lines.done(f"{job.name}: {result}")


def duration(seconds: float) -> str:
    """`seconds` as a person reads it: 42 s, 3 min 05 s, 2 h 10 min."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def write_smoke_data(folder: Path) -> dict[str, str]:
    """Tiny synthetic corpora in the real layouts (the smoke run needs no download); returns the
    environment that makes the loaders accept them."""
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "and", "i", "shall", "speak", "of", "love", "night"]
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(600)]
    text = "\n".join(f"{rng.choice(['KING', 'QUEEN'])}:\n{line}\n" for line in lines)
    path = folder / "tinyshakespeare" / "input.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    good, bad = ["great", "wonderful", "moving", "superb"], ["dull", "awful", "boring", "bad"]
    for split in ("train", "test"):
        for label, vocab in (("pos", good), ("neg", bad)):
            d = folder / "imdb" / "aclImdb" / split / label
            d.mkdir(parents=True, exist_ok=True)
            for i in range(12):
                review = " ".join(rng.choice(vocab + words) for _ in range(20))
                (d / f"{i}_{7 if label == 'pos' else 2}.txt").write_text(review)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"ATTNZOO_TINYSHAKESPEARE_SHA256": sha, "ATTNZOO_OFFLINE": "1"}


# ---- the options and trainer overrides every study run shares ---------------------------------


def int_list(text: str) -> list[int]:
    """A comma-separated list of ints (`0,1,2`)."""
    return [int(x) for x in text.split(",") if x.strip()]


def float_list(text: str) -> list[float]:
    """A comma-separated list of floats (`5e-4,1e-3`)."""
    return [float(x) for x in text.split(",") if x.strip()]


# The mixers the committed studies ran, their default: the commands in docs/results.md reproduce
# their tables; a mixer added to the zoo since joins a study with --mixers.
STUDY_MIXERS = (
    "scaled_dot",
    "quadratic",
    "metric",
    "pooling",
    "identity",
    "linear",
    "favor",
    "nystrom",
    "fourier",
    "local",
    "token_mlp",
)


# Every mixer of the package, in the order the studies over the whole zoo (rank_collapse) and
# the benchmarks list them: their tables keep it whatever order the registry has.
ZOO_MIXERS = (
    *STUDY_MIXERS,
    "retention",
    "gla",
    "mamba2",
    "deltanet",
    "sigmoid",
    "softpick",
    "stick_breaking",
    "diff_attention",
    "forgetting",
    "ssmax",
)


def study_mixers(causal: bool = False) -> list[str]:
    """STUDY_MIXERS, only those that can run a causal task when `causal`."""
    from attnzoo.mixers import causal_mixers

    return [m for m in STUDY_MIXERS if not causal or m in causal_mixers()]


def in_zoo_order(mixers: Iterable[str]) -> list[str]:
    """`mixers` in ZOO_MIXERS' order; any other (a user's, or one added since) after them, in the
    order given."""
    rank = {m: i for i, m in enumerate(ZOO_MIXERS)}
    return sorted(mixers, key=lambda m: rank.get(m, len(rank)))


# The files (under the data folder) whose presence means a task's corpus is there.
CORPUS = {
    "shakespeare_char": ["tinyshakespeare/input.txt"],
    "imdb": ["imdb/aclImdb", "imdb/aclImdb_v1.tar.gz", "imdb/aclImdb_labeled.tar.gz"],
}


def data_dir_of(args: argparse.Namespace) -> Path:
    """The corpora folder a study reads: --data-dir, else the trainer's default."""
    from attnzoo.config import default_data_dir

    return Path(args.data_dir) if args.data_dir else default_data_dir()


def has_corpus(task: str, data_dir: Path) -> bool:
    """Whether `data_dir` holds `task`'s corpus (any of CORPUS's files)."""
    return any((data_dir / p).exists() for p in CORPUS.get(task, []))


class Clock:
    """The command a study runs, the machine, when it started and its wall time so far."""

    def __init__(self) -> None:
        self.command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
        self.started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        self._start = time.perf_counter()

    def header(self, **protocol: Any) -> dict[str, Any]:
        """What the report's JSON opens with: the command, machine, start and wall time, then
        `protocol` (what the numbers depend on)."""
        return {
            "command": self.command,
            "machine": machine(),
            "started": self.started,
            "wall_s": time.perf_counter() - self._start,
            **protocol,
        }


def default_out(name: str) -> Path:
    """Where a study script writes when not told (`--out`): `results/<name>/` under the folder it
    is run from, which git ignores, so that a first try never overwrites the committed results
    (`scripts/results/<name>/`, regenerated with an explicit `--out scripts/results/<name>`)."""
    return Path("results") / name


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """--parallel, --device, --preset, --data-dir and --override, as every study driver takes
    them."""
    parser.add_argument(
        "--parallel",
        type=int,
        default=0,
        metavar="N",
        help="run N jobs at a time (hydra/launcher=parallel); 0: one at a time",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="train.device (auto picks a GPU); default cpu, cuda with --preset gpu",
    )
    parser.add_argument(
        "--preset",
        choices=("cpu", "gpu"),
        default="cpu",
        help="the study's sizes: cpu (default) or gpu (one H100, docs/sweeps.md)",
    )
    parser.add_argument("--data-dir", default=None, help="corpora folder (trainer's data_dir)")
    parser.add_argument("--override", nargs="*", default=[], help="extra trainer overrides")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the sweeps, their jobs and an estimate of the time; run and write nothing",
    )


def price(sweeps: list[tuple[str, int, float]], parallel: int, basis: str, note: str = "") -> str:
    """What a study will cost, before it runs: each sweep's jobs and seconds per job (`sweeps`:
    name, jobs, seconds per job), the total, and the wall time at `parallel` jobs at a time
    (one at a time for 0), with the `basis` of the per-job seconds (where they were measured)."""
    lines = [f"  {name}: {n} jobs × ~{s:.0f} s" for name, n, s in sweeps]
    jobs = sum(n for _, n, _ in sweeps)
    seconds = sum(n * s for _, n, s in sweeps) / max(parallel, 1)
    at = f"{parallel} at a time" if parallel > 1 else "one at a time"
    lines.append(f"  total: {jobs} jobs, about {duration(seconds)} {at} ({basis}){note}")
    return "\n".join(lines)


def tuned_study_price(
    args: argparse.Namespace, cells: list[tuple[str, int, float, str]], basis: str
) -> str:
    """`price` for a tuned study (attnzoo.engine): per cell (`cells`: its name, its arms, seconds
    per run and how they were had, or "") the tuning runs (arms × --lrs × --tune-seeds) and the
    fresh-seed runs (arms × --seeds); the grid extensions, which depend on the choices, as an
    upper bound beside."""
    sweeps, extra = [], 0
    for name, arms, seconds, how in cells:
        tuning = f"{name} tuning" + (f" ({how})" if how else "")
        sweeps.append((tuning, arms * len(args.lrs) * len(args.tune_seeds), seconds))
        sweeps.append((f"{name} fresh seeds", arms * len(args.seeds), seconds))
        extra += args.max_extensions * len(args.tune_seeds) * arms
    return price(sweeps, args.parallel, basis, f"; grid extensions add up to {extra} runs more")


def pilot_spread(pilot: Path, reference: str, on: str) -> dict[str, float]:
    """Per arm of a pilot's runs.csv (columns arm, seed and `on`), the standard deviation of its
    paired differences from `reference` on `on`, over the seeds both ran (arms with ≥ 2)."""
    with pilot.open(encoding="utf-8", newline="") as f:
        runs = [r for r in csv.DictReader(f) if r[on]]
    value = {(r["arm"], r["seed"]): float(r[on]) for r in runs}
    spread = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        diffs = [
            value[(arm, seed)] - value[(reference, seed)]
            for a, seed in value
            if a == arm and (reference, seed) in value
        ]
        if arm != reference and len(diffs) >= 2:
            mean = sum(diffs) / len(diffs)
            spread[arm] = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    return spread


def seeds_projection(
    pilot: Path,
    reference: str,
    arms: Sequence[str],
    on: str,
    margin: float,
    confidence: float,
    m: int,
    seeds: Sequence[int],
) -> tuple[int | None, str]:
    """How many fresh seeds a study needs, from its pilot: the fewest that give the paired
    difference of the widest-spread arm an interval at level α/m no wider than ±`margin`
    (stats.seeds_to_resolve; an arm the pilot did not run is taken at the pilot's largest
    spread), and a sentence that says so and how many `seeds` the study has."""
    from attnzoo.stats import seeds_to_resolve

    spread = pilot_spread(pilot, reference, on) if pilot.is_file() else {}
    others = [a for a in arms if a != reference]
    if not spread or not others:
        return None, "No pilot to size the seeds by."
    sd = max(spread.get(a, max(spread.values())) for a in others)
    n = seeds_to_resolve(sd, margin, confidence, m)
    listed = ", ".join(f"{a} {v:.4f}" for a, v in spread.items())
    return n, (
        f"Seeds sized before the runs from the pilot (`{pilot.parent.name}/{pilot.name}`: SD of "
        f"the paired differences from {reference} on {on}, {listed}; an arm it did not run taken "
        f"at the largest): {n} fresh seeds give an interval at level α/m (m = {m}) no wider than "
        f"±{margin:g} for an SD of {sd:.4f}; this study has {len(seeds)}."
    )


def run_overrides(args: argparse.Namespace, data_dir: str | Path | None) -> list[str]:
    """What every run of a study sets: no W&B, no progress bar, resume where a run left off, the
    device, the corpora folder (when given) and the parallel launcher (with --parallel)."""
    out = ["logger.mode=disabled", "train.progress=false", "train.resume=true"]
    gpu = getattr(args, "preset", "cpu") == "gpu" and not getattr(args, "smoke", False)
    device = args.device or ("cuda" if gpu else "cpu")  # a --smoke of the GPU preset: on CPU
    out += [f"train.device={device}"] + ([f"data_dir={data_dir}"] if data_dir else [])
    if args.parallel:
        out += ["hydra/launcher=parallel", f"hydra.launcher.n_jobs={args.parallel}"]
    return out


# The toy size of a driver's --smoke (each adds its own depth and measures): seconds per run.
SMOKE_SIZE = [
    "model.dim=16",
    "model.heads=2",
    "task.seq_len=16",
    "train.max_steps=3",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "train.eval_every=3",
    "train.eval_batches=1",
    "train.log_every=1",
    "train.probe_batch_size=4",
]


def lr_text(lr: float) -> str:
    """A learning rate as the folder names and overrides write it."""
    return f"{lr:g}"


def check_seeds(tune_seeds: list[int], seeds: list[int]) -> str | None:
    """Why the tuning and fresh seeds cannot be used (None when they can): the study needs at
    least two tuning seeds, two fresh seeds, and no seed in both (the reported numbers must not
    be the ones the choice was made on)."""
    if len(tune_seeds) < 2 or len(seeds) < 2:
        return "the study needs ≥ 2 tuning seeds (--tune-seeds) and ≥ 2 fresh seeds (--seeds)"
    both = sorted(set(tune_seeds) & set(seeds))
    if both:
        return (
            f"--seeds {','.join(map(str, seeds))} and --tune-seeds "
            f"{','.join(map(str, tune_seeds))} share seed(s) {','.join(map(str, both))}: the "
            "fresh seeds must be disjoint from the tuning seeds"
        )
    return None


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a committed CSV table (runs.csv, tune_runs.csv), as strings."""
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def mixers_for_task(task: str, mixers: list[str]) -> tuple[list[str], list[str]]:
    """The mixers of `mixers` that can run `task` (a registered task name), and those left out:
    a causal task (a language model) leaves out the mixers with `supports_causal = False`, a
    bidirectional one those with `supports_bidirectional = False`: the trainer would refuse them."""
    from attnzoo.mixers import can_run, mixer_class
    from attnzoo.tasks import TASKS

    able = [m for m in mixers if can_run(mixer_class(m), TASKS[task].causal)]
    return able, [m for m in mixers if m not in able]


# ---- a tuned study's comparisons with its reference ----------------------------------------------

STUDY_REFERENCE = "scaled_dot"  # every mixer of a tuned study is compared with it, fixed up front
# The mixer study's published claims (scripts/mixer_ablation.py, the results pages): (task,
# sentence (its source in the closing parentheses), the mixers it names, the reference, on).
MIXER_STUDY_CLAIMS = [
    (
        "imdb",
        "quadratic, pooling and identity substitute scaled-dot with no signs of decreasing "
        "accuracy (NLP-MetaFormer, IMDB, one block)",
        ["quadratic", "pooling", "identity"],
        "scaled_dot",
        "test_metric",
    ),
    (
        "shakespeare_char",
        "metric trains with not much difference from a transformer "
        "(NLP-MetaFormer, character-level language model)",
        ["metric"],
        "scaled_dot",
        "test_loss",
    ),
]


def compared_measures(task: str) -> tuple[str, ...]:
    """What a tuned study compares on the held-out test split: the loss, and on a classification
    task (IMDB) its accuracy too."""
    return ("test_loss", "test_metric") if task == "imdb" else ("test_loss",)


def reanalyse(
    runs_files: list[Path], margins: dict[str, float], confidence: float, correction: str
) -> dict[str, Any]:
    """A tuned study's comparisons recomputed from committed per-seed values, without its run
    folders: the rows of `runs_files` (runs.csv), where a later file's rows replace an earlier
    file's for the same task and mixer (a rerun of some mixers), grouped per task, each mixer
    against the reference (attnzoo.engine.compare.against) and every task's rows corrected as
    one family.
    Returns the merged rows, the corrected family and per task its groups."""

    from attnzoo.analysis.compare import correct
    from attnzoo.analysis.groups import groups_from_rows
    from attnzoo.engine.cell import row_lr
    from attnzoo.engine.compare import against

    merged: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in runs_files:
        rows = read_rows(path)
        replaced: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows:  # the study's configuration: its mixer at its learning rate
            group = f"mixer={r['mixer']}, train.lr={row_lr(r)}"
            replaced.setdefault((r["task"], r["mixer"]), []).append(
                r | {"group": group, "source": str(path)}
            )
        merged |= replaced
    runs = [r for rows in merged.values() for r in rows]
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    by_task = {
        t: groups_from_rows([r for r in runs if r["task"] == t], by=("task",)) for t in tasks
    }
    family = [
        r | {"task": t}
        for t in tasks
        for r in against(
            by_task[t], "mixer.name", STUDY_REFERENCE, compared_measures(t), margins, confidence
        )
    ]
    return {"runs": runs, "family": correct(family, correction), "groups": by_task}


def write_reanalysis(result: dict[str, Any], out: Path, header: dict[str, Any]) -> Path:
    """reanalysis.md, reanalysis.json (per task its groups over the merged seeds), runs.csv (the
    merged per-seed values) and comparisons.csv (the family) of `reanalyse`'s result in `out`."""
    from attnzoo.analysis.compare import COMPARISON_COLUMNS
    from attnzoo.analysis.report import protocol_text, write_runs
    from attnzoo.analysis.tables import ci_text, write_csv
    from attnzoo.engine.spec import KIND

    out.mkdir(parents=True, exist_ok=True)
    family, confidence = result["family"], header["confidence"]
    write_runs(result["runs"], out / "runs.csv")
    write_csv(out / "comparisons.csv", ["task", *COMPARISON_COLUMNS], family)
    sources: dict[str, set[str]] = {}
    for r in result["runs"]:
        sources.setdefault(r["source"], set()).add(r["mixer"])
    margins = header["margins"]
    lines = [
        "# Mixer ablation: reanalysed from per-seed values",
        "",
        f"Command: `{header['command']}`",
        "Per-seed values (a later file's rows replace an earlier one's for the same task and "
        "mixer): " + "; ".join(f"`{s}` ({', '.join(sorted(m))})" for s, m in sources.items()) + ".",
        f"Equivalence margins, fixed before the runs: ±{margins['loss']:g} loss (nats), "
        f"±{margins['accuracy']:g} accuracy ({header['margin_reason']}). "
        + protocol_text(family, confidence, 0.0, header["correction"]).replace("±0", "the margin"),
        "",
    ]
    tables = {}
    for task, groups in result["groups"].items():
        lines += [
            f"## {task}",
            "",
            f"Mean over the seeds [{confidence:.0%} Student-t interval, "
            "ddof = 1], held-out test split.",
            "",
            "| mixer | train.lr | seeds | test loss | test metric | val loss |",
            "|---|---|---|---|---|---|",
        ]
        tables[task] = []
        for g in groups:
            row = {
                "mixer": g.config["mixer.name"],
                "train.lr": g.config.get("train.lr"),
                "n_seeds": len(g.values("test_loss")),
            }
            for which in ("test_loss", "test_metric", "val_loss"):
                ci = g.interval(which, confidence)
                row |= {
                    f"{which}_mean": ci.mean,
                    f"{which}_ci_low": ci.low,
                    f"{which}_ci_high": ci.high,
                }
            tables[task].append(row)
            cells = [
                ci_text(row[f"{w}_mean"], row[f"{w}_ci_low"], row[f"{w}_ci_high"])
                for w in ("test_loss", "test_metric", "val_loss")
            ]
            lines.append(
                f"| {row['mixer']} | {row['train.lr']:g} | {row['n_seeds']} | "
                + " | ".join(cells)
                + " |"
            )
        lines += ["", f"### Against {STUDY_REFERENCE} (held-out test)", ""]
        for on in compared_measures(task):
            lines.append(f"On {on.replace('_', ' ')} (margin ±{margins[KIND[on]]:g}):")
            lines += [f"- {r['sentence']}" for r in family if r["task"] == task and r["on"] == on]
            lines.append("")
    (out / "reanalysis.json").write_text(
        json.dumps(
            {**header, "tasks": [{"task": t, "groups": g} for t, g in tables.items()]},
            indent=2,
            default=str,
        )
        + "\n"
    )
    path = out / "reanalysis.md"
    path.write_text("\n".join(lines) + "\n")
    return path
