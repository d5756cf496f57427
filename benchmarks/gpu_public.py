"""Predicted vs published step time on published GPU training runs (the GPU truth gputopo is held against).

Run: .venv/bin/python benchmarks/gpu_public.py [--only WORD ...] [--save JSON] [--baseline JSON] [--coverage]
                                               [--compat] [--data JSON]

Each case in gpu_public.json is one measured training run someone published (a paper's table, a framework's
benchmark page, an issue thread with its full config): its citation and the numbers as published, the
conversion of its throughput into seconds per optimizer step (the arithmetic is in the data), the `gputopo plan`
arguments that express it, the strategy it ran, and what had to be assumed. Nothing here is fitted to a case:
the prediction is whatever `gputopo plan --json` prints for those arguments, the published step is the run's.

Printed per case: published and predicted step, the error, the predicted parts (compute, exposed communication,
offload, optimizer), and whether plan says the run fits (every run here trained, so "no" is a miss). Then the
median and worst |error|. --coverage lists the corpus by GPU, strategy, nodes, model size and source.
--save writes the results; --baseline prints a saved run's prediction beside today's (before/after a change).
--compat drops the options this checkout's plan does not know (to run the corpus against an older gputopo).
--data reads another set of cases in the same form: benchmarks/gpu_record.json holds gputopo's own measurements on
real GPUs (docs/measurements/h200-2026-11-27.md), which the step-time model is held against the same way.
"""
import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

from gputopo.cli import cli

DATA = Path(__file__).with_name("gpu_public.json")
MODELS = Path(__file__).with_name("gpu_public_models")   # config.json of models the catalog does not name
TARGET_MEDIAN, TARGET_WORST = 0.10, 0.25


def known_options() -> set:
    """The option strings this checkout's `plan` accepts."""
    return {o for p in cli.commands["plan"].params for o in p.opts + p.secondary_opts}


def compatible(args: list[str], known: set) -> list[str]:
    """args without the options `known` lacks (with their value, when the next item is not an option)."""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a.startswith("--") and a.split("=")[0] not in known:
            skip = "=" not in a and i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(a)
    return out


def predict(case: dict, known: set | None = None) -> dict:
    """`gputopo plan --json` for the case's arguments, and the row of the strategy the run used."""
    args = [a.replace("{models}", str(MODELS)) for a in case["plan"]["args"]]
    if known is not None:
        args = compatible(args, known)
    res = CliRunner().invoke(cli, ["plan", *args, "--json"])
    if res.exit_code not in (0, 1) or not res.stdout.startswith("{"):
        raise SystemExit(f"{case['id']}: gputopo plan {' '.join(args)} -> exit {res.exit_code}: "
                         f"{(res.stderr or res.stdout).strip()}")
    data = json.loads(res.stdout)
    rows = {s["name"]: s for s in data["strategies"]}
    name = case["plan"]["strategy"]
    if known is not None and name not in rows and name == "fsdp":
        name = "zero3"   # a gputopo before FSDP was expressible: its nearest, DeepSpeed's stage 3
    if name not in rows:
        raise SystemExit(f"{case['id']}: plan has no strategy {name} (it has {', '.join(rows)})")
    row = rows[name]
    t = dict(row["time"])
    if case["plan"].get("p2p") is False:   # the run had NCCL_P2P_DISABLE=1: plan's other arm of the link A/B
        ab = data["interconnect_ab"]
        if not ab or ab["strategy"] != name:
            raise SystemExit(f"{case['id']}: plan's link A/B is for {ab and ab['strategy']}, not {name}")
        t = {**{k: None for k in t}, "step_s": ab["step_s_without_p2p"]}
    return {"id": case["id"], "published_s": case["step_time"]["seconds"], "predicted_s": t["step_s"],
            "compute_s": t["compute_s"], "exposed_comm_s": t["exposed_comm_s"], "comm_s": t["comm_s"],
            "offload_s": t["offload_s"], "optimizer_s": t["optimizer_s"], "fits": row["fits"],
            "why_not": row["why_not"], "recommended": data["recommendation"]["strategy"],
            "error": t["step_s"] / case["step_time"]["seconds"] - 1 if t["step_s"] else None}


def _s(v) -> str:
    return "?" if v is None else f"{v:.3f}" if v < 100 else f"{v:.1f}"


def table(cases: list[dict], results: list[dict], baseline: dict) -> None:
    head = ["case", "GPUs", "strategy", "published s", "predicted s", "error", "compute", "exp.comm", "offload",
            "optim", "fits"] + (["before s", "before err"] if baseline else [])
    rows = []
    for c, r in zip(cases, results):
        hw = c["hardware"]
        n = hw["gpus_per_node"] * hw["nodes"]
        row = [c["id"], f"{n}x {hw['gpu']}", c["plan"]["strategy"], _s(r["published_s"]), _s(r["predicted_s"]),
               "?" if r["error"] is None else f"{r['error']:+.1%}", _s(r["compute_s"]), _s(r["exposed_comm_s"]),
               _s(r["offload_s"]), _s(r["optimizer_s"]), "yes" if r["fits"] else "NO"]
        if baseline:
            b = baseline.get(c["id"])
            row += [_s(b["predicted_s"]) if b else "-",
                    f"{b['error']:+.1%}" if b and b["error"] is not None else "-"]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in [head] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def summary(results: list[dict], label: str = "") -> dict:
    errs = [r["error"] for r in results if r["error"] is not None]
    absolute = sorted(abs(e) for e in errs)
    worst = max(errs, key=abs) if errs else None
    out = {"cases": len(results), "predicted": len(errs), "median_abs": statistics.median(absolute) if errs else None,
           "worst": worst, "within_25": sum(a <= 0.25 for a in absolute), "within_10": sum(a <= 0.10 for a in absolute),
           "faster_than_run": sum(e < 0 for e in errs), "said_to_fit": sum(r["fits"] for r in results)}
    if errs:
        print(f"{label}{out['predicted']} of {out['cases']} predicted: median |error| {out['median_abs']:.1%}"
              f" (target {TARGET_MEDIAN:.0%}), worst {worst:+.1%} (target {TARGET_WORST:.0%});"
              f" {out['within_10']} within 10 %, {out['within_25']} within 25 %; {out['faster_than_run']} predicted"
              f" faster than the run; {out['said_to_fit']} of {out['cases']} said to fit (all trained)")
    return out


def size_class(params: int) -> str:
    for bound, name in ((3e8, "<300M"), (2e9, "300M-2B"), (1e10, "2B-10B"), (3e10, "10B-30B")):
        if params < bound:
            return name
    return ">=30B"


def coverage(cases: list[dict]) -> None:
    """What the corpus spans, and the share of its largest source."""
    def count(key) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(Counter(key(c) for c in cases).items(), key=lambda x: -x[1]))
    print(f"{len(cases)} cases")
    print("  GPU:      " + count(lambda c: c["plan"]["gpu_generation"]))
    print("  strategy: " + count(lambda c: c["plan"]["strategy"]))
    print("  run as:   " + count(lambda c: c["training"]["strategy"]))
    print("  nodes:    " + count(lambda c: "1 node" if c["hardware"]["nodes"] == 1 else "several nodes"))
    print("  model:    " + count(lambda c: size_class(c["model"]["params"])))
    sources = Counter(c["source"]["group"] for c in cases)
    print("  source:   " + ", ".join(f"{k} {v}" for k, v in sources.most_common()))
    top, n = sources.most_common(1)[0]
    print(f"  largest source: {top}, {n} of {len(cases)} ({n / len(cases):.0%}; at most a third)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="cases whose id contains any of these words")
    ap.add_argument("--save", metavar="JSON", help="write the results here")
    ap.add_argument("--baseline", metavar="JSON", help="results saved by --save, printed beside today's")
    ap.add_argument("--coverage", action="store_true", help="what the corpus spans, and stop")
    ap.add_argument("--compat", action="store_true", help="drop options this checkout's plan does not know")
    ap.add_argument("--data", metavar="JSON", default=str(DATA), help="the cases (default: the published corpus)")
    args = ap.parse_args()
    cases = json.loads(Path(args.data).read_text())
    if args.only:
        cases = [c for c in cases if any(w in c["id"] for w in args.only)]
    if args.coverage:
        coverage(cases)
        return
    known = known_options() if args.compat else None
    results = [predict(c, known) for c in cases]
    baseline = {r["id"]: r for r in json.loads(Path(args.baseline).read_text())} if args.baseline else {}
    table(cases, results, baseline)
    print()
    s = summary(results)
    if baseline:
        summary([baseline[c["id"]] for c in cases if c["id"] in baseline], "before: ")
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=1) + "\n")
    sys.exit(0 if s["median_abs"] is not None and s["median_abs"] <= TARGET_MEDIAN
             and abs(s["worst"]) <= TARGET_WORST and s["said_to_fit"] == s["cases"] else 1)


if __name__ == "__main__":
    main()
