"""`python -m engine sweep models`: the catalogue's models (Note [Sweep catalogue]) through Glassbox, eager and
Inductor, one child process per model, with every fallback, every verdict and the times in one table.

    python -m engine sweep models --device cuda                       # every model, real sizes, GPU
    python -m engine sweep models --device cuda --only tv_swin_t,hf_deberta-v2 --modes default
    python -m engine sweep models --device cpu --size tiny --only hf_mistral --md /tmp/sweep.md
    python -m engine sweep models --join a.json,b.json --md reports/gpu_model_sweep.md
    python -m engine sweep models --list

Note [Sweep method]
Each model runs in a child process of its own (a crash, a hang or leaked GPU memory costs that model only,
under --timeout): it builds the model (seeded random weights), runs it eagerly, then for each mode compiles it
with Glassbox and with Inductor, makes each one's first call under fallbacks.collected() (Note [A fallback
is loud]: a whole graph or an op that ran eagerly is a row's finding, never a time passed off as ours),
judges both against eager (engine.verdict: close to eager, or where not, no further from a float64 run of the
model than eager is), and only then times eager, ours and Inductor. Children compile in parallel (--jobs) and
time one at a time (a lock file), since compiling is host work and timing wants the device alone; on a GPU a
figure is the median of GPU_ROUNDS rounds of triton's do_bench with the runners' order rotating
(engine.runtime.timing.gpu_rounds), on the CPU the interleaved rounds of Note [Fair timing]. A compile running
beside a GPU timing takes host cycles from it, so a launch-bound model's time can be high by the host's
share; the table's figures are for models at real sizes, whose kernels outlast their launches.
A row is "ok" only when every compiled graph ran our kernels and matched; the run exits 1 when any row fell
back as a whole graph, did not match, or crashed in our code.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROW = "SWEEP-ROW "
MODES = ("default", "reduce-overhead")
ABOVE = 1.15  # issue 27's bar: no model above 1.15 of Inductor


# --- the child: one model ---------------------------------------------------------------------------------------


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _first_call(runner, inputs, device) -> tuple[list, float]:
    from engine.run import flatten_outputs

    start = time.perf_counter()
    outputs = flatten_outputs(runner(*inputs))
    _sync(device)
    return outputs, time.perf_counter() - start


def _tolerance(dtype) -> dict | None:
    import torch

    return {"atol": 3e-2, "rtol": 3e-2} if dtype in (torch.float16, torch.bfloat16) else None


def run_child(name: str, device: str, size: str, modes: tuple[str, ...], lock: str | None,
              inductor: bool) -> list[dict]:
    import torch

    import engine
    from engine import fallbacks
    from engine.run import flatten_outputs
    from engine.tools.bench_verdicts import Verdicts
    from engine.tools.model_catalog import build, by_name

    entry = by_name()[name]
    base = {"name": name, "library": entry.library, "family": entry.family, "size": size, "device": device}
    missing = entry.missing()
    if missing:
        return [dict(base, status="build-error", why=missing)]
    try:
        model, inputs = build(entry, size, device)
    except Exception as error:  # noqa: BLE001 - the library could not build it here: not ours
        return [dict(base, status="build-error", why=f"{type(error).__name__}: {str(error)[:300]}")]
    base["dtype"] = str(next((p.dtype for p in model.parameters()), torch.float32)).replace("torch.", "")
    sets = [inputs] + [tuple(x.to(device) for x in more) for more in _dynamic_sets(entry, size)]
    dynamic = len(sets) > 1
    tolerance = _tolerance(next((p.dtype for p in model.parameters()), torch.float32))
    backend = "triton" if device.startswith("cuda") else "cpp"
    rows = []
    with torch.no_grad():
        expected = [flatten_outputs(model(*x)) for x in sets]
        _sync(device)
        judges = [Verdicts(model, x, want, tolerance) for x, want in zip(sets, expected)]
        for mode in modes:
            row = dict(base, mode=mode, dynamic=dynamic)
            torch._dynamo.reset()
            runners = {"eager": model}
            try:
                ours = engine.compile(model, backend=backend, device=device, mode=mode,
                                      dynamic=True if dynamic else None)
                with fallbacks.collected() as eager_runs:
                    compile_s = 0.0
                    for x, judge in zip(sets, judges):
                        got, seconds = _first_call(ours, x, device)
                        compile_s += seconds
                        verdict = judge("ours", got)
                        if not verdict["ours_ok"]:
                            break
                row["compile_s"] = round(compile_s, 1)
                row["graph_fallbacks"] = sorted({r.row_text() for r in eager_runs if r.scope == "graph"})
                row["eager_ops"] = sorted({r.row_text() for r in eager_runs if r.scope == "op"})
                row.update(verdict)
                runners["ours"] = ours
            except Exception as error:  # noqa: BLE001 - a crash in our code is this row's finding
                row["status"] = "crash"
                row["why"] = f"{type(error).__name__}: {str(error)[:400]}"
                row["traceback"] = traceback.format_exc()[-2000:]
                rows.append(row)
                continue
            if inductor:
                try:
                    compiled = torch.compile(model, mode=None if mode == "default" else mode,
                                             dynamic=True if dynamic else None)
                    seconds = 0.0
                    for x, judge in zip(sets, judges):
                        got, took = _first_call(compiled, x, device)
                        seconds += took
                        verdict = judge("inductor", got)
                    row["inductor_compile_s"] = round(seconds, 1)
                    row.update(verdict)
                    runners["inductor"] = compiled
                except Exception as error:  # noqa: BLE001 - Inductor's failure is a note, not ours
                    row["inductor_error"] = f"{type(error).__name__}: {str(error)[:300]}"
            row["status"] = ("fell back" if row["graph_fallbacks"] else
                             "mismatch" if not row.get("ours_ok") else "ok")
            timed = {k: v for k, v in runners.items() if k == "eager" or row.get(f"{k}_ok")}
            row["times"] = _time(timed, sets, device, lock)
            _ratios(row)
            rows.append(row)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    return rows


def _dynamic_sets(entry, size: str) -> list:
    return [tuple(x) for x in entry.dynamic_inputs(size)] if entry.dynamic_inputs else []


def _time(runners: dict, sets: list, device: str, lock: str | None) -> list[dict]:
    """Per input set: runner -> median ms (one timing at a time across children: Note [Sweep method])."""
    from engine.runtime.timing import gpu_rounds, interleaved

    handle = open(lock, "w") if lock else None
    try:
        if handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
        result = []
        for x in sets:
            calls = {name: (lambda runner=runner, x=x: runner(*x)) for name, runner in runners.items()}
            if device.startswith("cuda"):
                rounds = gpu_rounds(calls)
                result.append({name: statistics.median(times) for name, times in rounds.items()})
            else:
                timings = interleaved(calls, device=device)
                result.append({name: t.median_ms for name, t in timings.items() if t is not None})
        return result
    finally:
        if handle:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


def _ratios(row: dict) -> None:
    times = row.get("times") or []
    for key, (top, bottom) in {"ours_over_inductor": ("ours", "inductor"), "ours_over_eager": ("ours", "eager"),
                               "inductor_over_eager": ("inductor", "eager")}.items():
        ratios = [t[top] / t[bottom] for t in times if t.get(top) and t.get(bottom)]
        if ratios:
            row[key] = max(ratios)  # the worst input set speaks for a dynamic row


# --- the parent ---------------------------------------------------------------------------------------------------


def _child_command(name: str, args) -> list[str]:
    from engine.tools.model_catalog import by_name

    python = args.tv_python if by_name()[name].library in ("torchvision", "timm") and args.tv_python else sys.executable
    command = [python, "-m", "engine.tools.sweep_models", "--child", name, "--device", args.device, "--size",
               args.size, "--modes", ",".join(args.modes), "--lock", args.lock]
    return command + (["--no-inductor"] if args.no_inductor else [])


def _child_environment(jobs: int) -> dict:
    """Each of the `jobs` children compiles with its share of the cores (Note [Compiling a graph's kernels
    before its first call]), unless GLASSBOX_COMPILE_WORKERS says otherwise."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {"GLASSBOX_COMPILE_WORKERS": str(max(0, cores // max(jobs, 1) - 1)), **os.environ}


def run_one(name: str, args) -> list[dict]:
    root = Path(__file__).resolve().parents[2]
    start = time.perf_counter()
    limit = min(args.timeout, args.deadline - time.monotonic())
    if limit < 30:
        return [{"name": name, "status": "not run", "why": "the run's --budget was spent"}]
    try:
        done = subprocess.run(_child_command(name, args), cwd=root, capture_output=True, text=True,
                              timeout=limit, env=_child_environment(args.jobs))
    except subprocess.TimeoutExpired:
        return [{"name": name, "status": "timeout", "why": f"over {limit:.0f} s", "seconds": round(limit)}]
    rows = [json.loads(line[len(ROW):]) for line in done.stdout.splitlines() if line.startswith(ROW)]
    if not rows:
        tail = (done.stderr or done.stdout)[-1500:]
        rows = [{"name": name, "status": "crash", "why": f"the child exited {done.returncode} with no row",
                 "traceback": tail}]
    for row in rows:
        row["seconds"] = round(time.perf_counter() - start, 1)
    return rows


def summary(rows: list[dict]) -> dict:
    result = {}
    for mode in sorted({r.get("mode") for r in rows if r.get("mode")}):
        these = [r for r in rows if r.get("mode") == mode]
        ratios = [r["ours_over_inductor"] for r in these if r.get("ours_over_inductor")]
        result[mode] = {
            "rows": len(these),
            "geomean ours/inductor": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3) if ratios else None,
            f"above {ABOVE} of inductor": [r["name"] for r in these if (r.get("ours_over_inductor") or 0) > ABOVE],
            "not faster than eager": [r["name"] for r in these if (r.get("ours_over_eager") or 0) >= 1.0],
            "whole-graph fallbacks": [r["name"] for r in these if r.get("graph_fallbacks")],
            "with eager ops": [r["name"] for r in these if r.get("eager_ops")],
            "mismatch": [r["name"] for r in these if r.get("status") == "mismatch"],
        }
    result["crash or timeout"] = [r["name"] for r in rows if r.get("status") in ("crash", "timeout")]
    result["not run (budget)"] = [r["name"] for r in rows if r.get("status") == "not run"]
    result["build-error (not ours)"] = [r["name"] for r in rows if r.get("status") == "build-error"]
    return result


def _ms(value) -> str:
    return f"{value:.3f}" if value else "-"


def markdown(rows: list[dict], header: str = "") -> str:
    lines = [header, "",
             "| model | family | mode | status | eager ms | ours ms | Inductor ms | ours/Ind | ours/eager | "
             "verdict | ran eagerly |", "|---|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in sorted(rows, key=lambda r: (r.get("name", ""), r.get("mode") or "")):
        times = r.get("times") or [{}]
        worst = max(times, key=lambda t: (t.get("ours", 0) / t["inductor"]) if t.get("inductor") else 0)
        eager = "; ".join(r.get("graph_fallbacks", []) + r.get("eager_ops", []))
        verdict = f"{'match' if r.get('ours_ok') else 'differs'} ({r.get('ours_judged_by', '-')})" \
            if "ours_ok" in r else "-"
        status = r.get("status", "?") + (f": {r['why'][:120]}" if r.get("why") else "")
        lines.append(f"| {r.get('name')} | {r.get('family', '')} | {r.get('mode', '-')}"
                     f"{' (dynamic, worst length)' if r.get('dynamic') else ''} | {status} | "
                     f"{_ms(worst.get('eager'))} | {_ms(worst.get('ours'))} | {_ms(worst.get('inductor'))} | "
                     f"{r.get('ours_over_inductor', 0):.2f} | {r.get('ours_over_eager', 0):.2f} | {verdict} | "
                     f"{eager[:200] or '-'} |")
    lines += ["", "```", json.dumps(summary(rows), indent=1), "```", ""]
    return "\n".join(lines)


def failed(rows: list[dict]) -> bool:
    return any(r.get("status") in ("fell back", "mismatch", "crash") for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine sweep models", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--size", choices=("real", "tiny"), help="real on cuda, tiny on cpu unless given")
    parser.add_argument("--modes", default=None, help="comma-separated of default,reduce-overhead "
                                                      "(cuda: both; cpu: default)")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--skip", help="comma-separated model names")
    parser.add_argument("--jobs", type=int, default=1, help="models compiled at once (each times alone)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a model may take")
    parser.add_argument("--budget", type=float, default=math.inf,
                        help="seconds for the whole run: a model that would start or run past it is 'not run'")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--tv-python", help="interpreter that has torchvision/timm (default: this one)")
    parser.add_argument("--json", help="write every row here (rewritten as rows arrive)")
    parser.add_argument("--md", help="write the table here")
    parser.add_argument("--join", help="comma-separated JSON files of earlier runs: one table, nothing run")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--lock", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.size = args.size or ("real" if args.device == "cuda" else "tiny")
    args.modes = tuple((args.modes or ("default,reduce-overhead" if args.device == "cuda" else "default")).split(","))
    if set(args.modes) - set(MODES):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    from engine.tools.model_catalog import catalog

    names = [entry.name for entry in catalog()]
    if args.list:
        for entry in catalog():
            print(f"{entry.name:28s} {entry.library:12s} {entry.family}")
        print(f"{len(names)} models")
        return 0
    if args.child:
        for row in run_child(args.child, args.device, args.size, args.modes, args.lock, not args.no_inductor):
            print(ROW + json.dumps(row, default=str), flush=True)
        return 0
    if args.join:
        rows = [row for path in args.join.split(",") for row in json.loads(Path(path).read_text())["rows"]]
        return _finish(rows, args)
    if args.only:
        unknown = set(args.only.split(",")) - set(names)
        if unknown:
            parser.error(f"unknown models {sorted(unknown)}; see --list")
        names = [n for n in names if n in args.only.split(",")]
    if args.skip:
        names = [n for n in names if n not in args.skip.split(",")]
    args.deadline = time.monotonic() + args.budget
    args.lock = args.lock or f"/tmp/glassbox-sweep-{os.getpid()}.lock"
    rows: list[dict] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_one, name, args): name for name in names}
        for future in as_completed(futures):
            for row in future.result():
                rows.append(row)
                print(_progress(row), flush=True)
            if args.json:
                _write_json(rows, args)
    return _finish(rows, args)


def _progress(row: dict) -> str:
    ratio = f"ours/Ind {row['ours_over_inductor']:.2f}" if row.get("ours_over_inductor") else ""
    extra = "; ".join(row.get("graph_fallbacks", []) + row.get("eager_ops", []))[:160]
    return (f"[sweep] {row.get('name')} {row.get('mode', '')} {row.get('status')} {ratio} "
            f"{row.get('why', '')[:160]} {extra} [{row.get('seconds', 0):.0f} s]")


def _write_json(rows: list[dict], args) -> None:
    Path(args.json).write_text(json.dumps({"device": args.device, "size": args.size, "rows": rows}, indent=1,
                                          default=str))


def _finish(rows: list[dict], args) -> int:
    table = markdown(rows, f"Model sweep: {len(rows)} rows, device {args.device}, size {args.size}")
    print(table, flush=True)
    if args.md:
        Path(args.md).write_text(table)
    if args.json and not args.join:
        _write_json(rows, args)
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
