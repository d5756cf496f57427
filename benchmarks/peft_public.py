"""Predicted vs published memory and step time on published LoRA and QLoRA runs (issue 48's GPU truth).

Run: .venv/bin/python benchmarks/peft_public.py [--only WORD ...] [--save JSON] [--coverage]

Each case in peft_public.json is one published parameter-efficient fine-tuning run (a framework's README table,
a benchmark page, a blog's table): its citation and quote, the numbers as published, the statistic its memory is
(torch.cuda.max_memory_allocated or max_memory_reserved; "unknown" where the source does not say, compared with
the allocated peak), the conversion of its throughput into seconds per optimizer step, the `gputopo plan`
arguments that express it, the strategy it ran and what had to be assumed. Nothing is fitted to a case: the
prediction is whatever `gputopo plan --json` prints for those arguments, for the strategy the run used.

Printed per case: published and predicted memory and step, their errors, and whether plan says the run fits
(every run here trained: "no" is a miss). Then the medians, against the targets: memory median |error| <= 10 %,
step median |error| <= 20 %, every run said to fit. A case whose model this checkout cannot name is listed as
skipped, with the reason.
"""
import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

from gputopo import files
from gputopo.cli import cli
from gputopo.errors import GputopoError

HERE = Path(__file__).parent
DATA = HERE / "peft_public.json"
TARGET_MEMORY, TARGET_STEP = 0.10, 0.20
# the plan field a source's statistic is: an unknown one is compared with the allocated peak (the smaller)
STATISTIC = {"max_memory_allocated": "allocated_bytes", "max_memory_reserved": "reserved_bytes",
             "unknown": "allocated_bytes"}


def args_of(case: dict) -> list[str]:
    """The plan arguments, a model folder of this corpus (peft_public_models/...) made absolute."""
    return [str(HERE / a) if a.startswith("peft_public_models/") else a for a in case["plan"]["args"]]


def predict(case: dict) -> dict:
    """`gputopo plan --json` for the case, and the row of the strategy it ran; skipped with the reason when plan
    refuses the arguments (a model this checkout does not know)."""
    res = CliRunner().invoke(cli, ["plan", *args_of(case), "--json"])
    out = {"id": case["id"], "published_bytes": (case["memory"] or {}).get("bytes"),
           "published_s": (case["step_time"] or {}).get("seconds")}
    if res.exit_code not in (0, 1) or not res.stdout.startswith("{"):
        return {**out, "skipped": (res.stderr or res.stdout).strip().splitlines()[-1]}
    data = json.loads(res.stdout)
    rows = {s["name"]: s for s in data["strategies"]}
    row = rows.get(case["plan"]["strategy"])
    if row is None:
        return {**out, "skipped": f"plan has no {case['plan']['strategy']} row (it has {', '.join(rows)})"}
    stat = (case["memory"] or {}).get("statistic") or "unknown"
    mem = row[STATISTIC[stat]] if out["published_bytes"] else None
    step = row["time"]["step_s"]
    return {**out, "statistic": stat, "predicted_bytes": mem, "predicted_s": step, "fits": row["fits"],
            "tight": row["tight"], "why_not": row["why_not"], "recommended": data["recommendation"]["strategy"],
            "memory_error": mem / out["published_bytes"] - 1 if mem and out["published_bytes"] else None,
            "step_error": step / out["published_s"] - 1 if step and out["published_s"] else None}


def _g(b) -> str:
    return "-" if b is None else f"{b / 2 ** 30:.1f}"


def _e(e) -> str:
    return "-" if e is None else f"{e:+.1%}"


def table(cases: list[dict], results: list[dict]) -> None:
    head = ["case", "GPUs", "strategy", "statistic", "pub GiB", "pred GiB", "mem err", "pub s", "pred s",
            "step err", "fits"]
    rows = []
    for c, r in zip(cases, results):
        hw = c["hardware"]
        gpus = f"{hw['gpus_per_node'] * hw['nodes']}x {hw['gpu']}"
        if "skipped" in r:
            rows.append([c["id"], gpus, c["plan"]["strategy"], "skipped: " + r["skipped"][:60]] + [""] * 7)
            continue
        rows.append([c["id"], gpus, c["plan"]["strategy"], r["statistic"].replace("max_memory_", ""),
                     _g(r["published_bytes"]), _g(r["predicted_bytes"]), _e(r["memory_error"]),
                     "-" if r["published_s"] is None else f"{r['published_s']:.2f}",
                     "-" if r["predicted_s"] is None else f"{r['predicted_s']:.2f}", _e(r["step_error"]),
                     "tight" if r["tight"] else "yes" if r["fits"] else "NO"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in [head] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def summary(results: list[dict]) -> dict:
    done = [r for r in results if "skipped" not in r]
    mem = sorted(abs(r["memory_error"]) for r in done if r["memory_error"] is not None)
    step = sorted(abs(r["step_error"]) for r in done if r["step_error"] is not None)
    out = {"cases": len(results), "skipped": len(results) - len(done),
           "memory": {"compared": len(mem), "median_abs": statistics.median(mem) if mem else None,
                      "within_10": sum(a <= 0.10 for a in mem), "within_25": sum(a <= 0.25 for a in mem)},
           "step": {"compared": len(step), "median_abs": statistics.median(step) if step else None,
                    "within_20": sum(a <= 0.20 for a in step), "within_50": sum(a <= 0.50 for a in step)},
           "said_to_fit": sum(r["fits"] for r in done), "planned": len(done)}
    m, s = out["memory"], out["step"]
    if mem:
        print(f"memory: {m['compared']} compared, median |error| {m['median_abs']:.1%} (target {TARGET_MEMORY:.0%}),"
              f" {m['within_10']} within 10 %, {m['within_25']} within 25 %")
    if step:
        print(f"step:   {s['compared']} compared, median |error| {s['median_abs']:.1%} (target {TARGET_STEP:.0%}),"
              f" {s['within_20']} within 20 %, {s['within_50']} within 50 %")
    print(f"fits:   {out['said_to_fit']} of {out['planned']} said to fit (every one trained)"
          + (f"; {out['skipped']} skipped" if out["skipped"] else ""))
    return out


def coverage(cases: list[dict]) -> None:
    def count(key) -> str:
        return ", ".join(f"{k} {v}" for k, v in Counter(key(c) for c in cases).most_common())
    print(f"{len(cases)} cases")
    print("  method:   " + count(lambda c: c["training"]["method"]))
    print("  GPUs:     " + count(lambda c: "1 GPU" if c["hardware"]["gpus_per_node"] * c["hardware"]["nodes"] == 1
                                 else "several GPUs"))
    print("  strategy: " + count(lambda c: c["plan"]["strategy"]))
    print("  GPU:      " + count(lambda c: c["plan"]["gpu_generation"]))
    print("  source:   " + count(lambda c: c["source"]["group"]))
    print("  memory:   " + count(lambda c: (c["memory"] or {}).get("statistic") or "none"))
    print("  step:     " + count(lambda c: "published" if c["step_time"] else "none"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="cases whose id contains any of these words")
    ap.add_argument("--save", metavar="JSON", help="write the results here (a new file, or --force)")
    ap.add_argument("--force", action="store_true", help="with --save: replace the file")
    ap.add_argument("--coverage", action="store_true", help="what the corpus spans, and stop")
    args = ap.parse_args()
    if args.save:   # checked before the work, as gputopo checks its outputs (a FIFO, a folder, no --force: refused)
        try:
            files.check_output(args.save, args.force)
        except GputopoError as e:
            raise SystemExit(f"Error: {e}") from None
    elif args.force:
        raise SystemExit("Error: --force replaces --save's file: give --save")
    cases = json.loads(DATA.read_text())
    if args.only:
        cases = [c for c in cases if any(w in c["id"] for w in args.only)]
    if args.coverage:
        coverage(cases)
        return
    results = [predict(c) for c in cases]
    table(cases, results)
    print()
    s = summary(results)
    if args.save:
        try:
            files.write_atomic(args.save, json.dumps(results, indent=1) + "\n")
        except GputopoError as e:
            raise SystemExit(f"Error: {e}") from None
    ok = (s["memory"]["median_abs"] is not None and s["memory"]["median_abs"] <= TARGET_MEMORY
          and s["step"]["median_abs"] is not None and s["step"]["median_abs"] <= TARGET_STEP
          and s["said_to_fit"] == s["planned"] and not s["skipped"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
