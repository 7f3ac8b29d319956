"""OpInfo sweep: every op in torch's own op test database, through Glassbox, against eager.

    python -m engine sweep opinfo                       # the full sweep -> reports/opinfo_sweep.{md,csv}
    python -m engine sweep opinfo --ops add,sum --max-samples 2 --out /tmp/sweep
    python -m engine sweep opinfo --backend triton      # Triton under the interpreter
    python -m engine sweep opinfo --ops add --json      # the summary alone on stdout, progress on stderr

Each sample becomes a function `lambda *tensors: op(input, *args, **kwargs)` whose tensors are graph inputs
and whose other arguments are baked in. It runs through `engine.explore` (capture, lowering, fusion, C++ or
Triton, verify against eager with the tolerance policy of engine/run.py) and gets one status:

    generated               matches eager, every op ran in generated code (or an extern library call)
    fallback                matches eager, some op ran eagerly as a Fallback node (the reason is kept)
    wrong                   does not match eager: a bug
    crash                   our engine raised (lowering, codegen, build, the wrapper at run time)
    unsupported-by-capture  Dynamo itself breaks the graph or cannot trace the op
    skipped                 eager rejects the sample, the op is random or uninitialized, complex dtypes

Work is split over worker processes (one per CPU by default); each takes a chunk of ops, writes a JSON line per
sample as it goes and stops a sample at --sample-timeout seconds. A worker that hangs past its chunk's budget is
killed and the ops it had not finished are given to a new one, the op it was on recorded as a crash (timeout).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

from engine import options as engine_options
from engine.tools.json_stdout import print_json, stdout_to_stderr

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python -m engine sweep opinfo"

STATUSES = ("generated", "fallback", "wrong", "crash", "unsupported-by-capture", "nothing-compared", "skipped")
DEFAULT_DTYPES = ("float32", "int64", "bool")
# samples per op and dtype: every float32 sample up to this many; fewer of the integer/bool ones
DEFAULT_MAX_SAMPLES = {"float32": 4, "int64": 2, "bool": 1}
SKIP_OPS = {
    # ops whose samples are not plain functional calls on dense CPU tensors
    "resize_", "resize_as_", "item", "tolist", "to_sparse", "sparse.sampled_addmm", "sparse.mm",
    "_chunk_cat",
}


# -- one sample ----------------------------------------------------------------------------------------------
def op_label(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def is_core_aten(op) -> bool:
    """The OpInfo's ATen name is a core ATen op (torch.Tag.core on one of its overloads)."""
    import torch

    name = (op.aten_name or op.name).split(".")[-1]
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(torch.Tag.core in getattr(packet, o).tags for o in packet.overloads())


def sample_function(op, sample):
    """(fn, tensors): fn(*tensors) calls the op on this sample, non-tensor arguments baked in."""
    import torch
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in positions]
    call = op.op

    def fn(*values):
        filled = list(leaves)
        for i, value in zip(positions, values):
            filled[i] = value
        first, args, kwargs = pytree.tree_unflatten(filled, spec)
        return call(first, *args, **kwargs)

    return fn, tensors


def _clone(tensors):
    return [t.clone() if t.layout == _strided() else t for t in tensors]


def _strided():
    import torch
    return torch.strided


def _outputs_identical(a, b) -> bool:
    """Bitwise-equal outputs (NaN equal to NaN): used to spot random ops by running eager twice."""
    import torch
    from torch.utils import _pytree as pytree

    la, lb = pytree.tree_leaves(a), pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if not isinstance(x, torch.Tensor):
            if x != y and not (x != x and y != y):
                return False
            continue
        if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.layout != torch.strided:
            continue
        x, y = x.detach(), y.detach()
        if x.is_floating_point() or x.is_complex():
            if not torch.equal(x.isnan(), y.isnan()):
                return False
            x, y = torch.where(x.isnan(), 0, x), torch.where(y.isnan(), 0, y)
        if not torch.equal(x, y):
            return False
    return True


def _skip_sample(op, sample, tensors) -> str | None:
    import torch
    from torch.utils import _pytree as pytree

    for leaf in pytree.tree_leaves((sample.input, list(sample.args), dict(sample.kwargs))):
        if isinstance(leaf, torch.Tensor):
            if leaf.is_complex():
                return "complex dtype"
            if leaf.layout != torch.strided:
                return "sparse layout"
        if isinstance(leaf, torch.dtype) and leaf.is_complex:
            return "complex dtype"
    if "out" in sample.kwargs:
        return "out= variant"
    return None


def _root_cause(error: BaseException) -> BaseException:
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = getattr(error, "inner_exception", None) or error.__cause__
        if inner is None:
            break
        error = inner
    return error


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}"


_CAPTURE_ERRORS = ("Unsupported", "TorchRuntimeError", "UserError", "InternalTorchDynamoError",
                   "GuardOnDataDependentSymNode", "DataDependentOutputException", "DynamicOutputShapeException",
                   "UnsupportedOperatorException", "ObservedException", "SkipFrame", "PendingUnbackedSymbolNotFound")


def classify_error(error: BaseException) -> tuple[str, str]:
    """crash (our engine) or unsupported-by-capture (Dynamo/fake tensors could not trace the call)."""
    import torch._dynamo.exc as dynamo_exc

    if isinstance(error, dynamo_exc.BackendCompilerFailed):
        root = _root_cause(error)
        return "crash", _describe(root)
    root = _root_cause(error)
    if isinstance(root, SampleTimeout) or isinstance(error, SampleTimeout) or "SampleTimeout" in str(error):
        return "crash", "timeout (the sample ran past --sample-timeout)"
    if isinstance(error, tuple(getattr(dynamo_exc, n) for n in _CAPTURE_ERRORS if hasattr(dynamo_exc, n))) \
            or type(root).__name__ in _CAPTURE_ERRORS:
        return "unsupported-by-capture", _describe(root)
    return "crash", _describe(root)


class SampleTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise SampleTimeout("sample timed out")


def run_sample(op, sample, backend: str = "cpp", timeout: int = 60) -> dict:
    """Classify one sample (see the module docstring). Never raises."""
    import torch
    import torch._dynamo

    import engine

    fn, tensors = sample_function(op, sample)
    result = {"status": "", "detail": "", "fallbacks": "", "max_abs_err": "", "fp64": ""}
    reason = _skip_sample(op, sample, tensors)
    if reason:
        return {**result, "status": "skipped", "detail": reason}
    if op.has_nondeterministic_output or op.skip_correctness_check_compile_vs_eager:
        return {**result, "status": "skipped", "detail": "random or uninitialized output"}
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            expected = fn(*_clone(tensors))
            torch.manual_seed(1)
            again = fn(*_clone(tensors))
    except Exception as error:
        return {**result, "status": "skipped", "detail": f"eager rejects the sample ({_describe(error)})"}
    if any(isinstance(t, torch.Tensor) and t.is_complex() for t in torch.utils._pytree.tree_leaves(expected)):
        return {**result, "status": "skipped", "detail": "complex dtype"}
    if not _outputs_identical(expected, again):
        return {**result, "status": "skipped", "detail": "random: eager differs between seeds"}
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    try:
        inputs = _clone(tensors)
        torch.manual_seed(0)
        exploration = engine.explore(fn, inputs, backend=backend)
    except SampleTimeout:
        return {**result, "status": "crash", "detail": f"timeout after {timeout} s"}
    except Exception as error:
        status, detail = classify_error(error)
        return {**result, "status": status, "detail": detail}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        torch._dynamo.reset()
    verify = exploration.verify.to_json()  # as the record's JSON: the sweep's summary of it
    kernels = [k for g in exploration.graphs for k in g.kernels]
    fallbacks = [k for k in kernels if k.kind == "fallback"]
    breaks = exploration.graph_breaks or sum(torch._dynamo.utils.counters["graph_break"].values())
    graphs = [g for g in exploration.graphs if g.ir]
    fp64 = [o.get("judged_by") for o in verify.get("outputs", [])]
    result.update(max_abs_err=verify.get("max_abs_err", ""), fp64="fp64" if "fp64" in fp64 else "",
                  fallbacks="; ".join(sorted({f.reason for f in fallbacks if f.reason}))[:400]
                  or ("eager op" if fallbacks else ""))
    if verify.get("verdict") == "nothing compared":  # Note [Verdicts] in engine/run.py: no pass, no mismatch
        return {**result, "status": "nothing-compared", "detail": verify.get("problem", "")}
    if not verify.get("ok"):
        problem = verify.get("problem") or next((f"output {i}: {o.get('problem') or 'max abs err %.3g' % o['max_abs_err']}"
                                                 for i, o in enumerate(verify.get("outputs", [])) if not o["ok"]), "")
        return {**result, "status": "wrong", "detail": problem}
    if breaks:
        reasons = "; ".join(b["reason"][:200] for b in exploration.graph_breaks) or "; ".join(
            str(reason).strip().splitlines()[0][:200] for reason in torch._dynamo.utils.counters["graph_break"]
            if str(reason).strip()) or "graph break"
        return {**result, "status": "unsupported-by-capture", "detail": reasons}
    if not graphs:
        return {**result, "status": "unsupported-by-capture", "detail": "Dynamo captured no graph"}
    if fallbacks:
        return {**result, "status": "fallback", "detail": result["fallbacks"]}
    return {**result, "status": "generated"}


def iter_samples(op, dtype, limit: int):
    if not op.supports_dtype(dtype, "cpu"):
        return
    try:
        samples = op.sample_inputs("cpu", dtype, requires_grad=False)
        for index, sample in enumerate(samples):
            if index >= limit:
                break
            yield index, sample
    except Exception as error:  # a sample generator that fails on this build of torch
        yield -1, error


def sweep_op(op, dtypes, max_samples: dict, backend: str, timeout: int, emit) -> None:
    import torch

    label = op_label(op)
    core = is_core_aten(op)
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for index, sample in iter_samples(op, dtype, max_samples.get(dtype_name, 1)):
            start = time.perf_counter()
            row = {"op": label, "core_aten": core, "dtype": dtype_name, "sample": index}
            if isinstance(sample, Exception):
                emit({**row, "status": "skipped", "detail": f"sample generator failed ({_describe(sample)})",
                      "fallbacks": "", "max_abs_err": "", "fp64": "", "seconds": 0.0})
                continue
            if label.split(".")[0] in SKIP_OPS or op.name in SKIP_OPS:
                outcome = {"status": "skipped", "detail": "not a functional op on dense tensors", "fallbacks": "",
                           "max_abs_err": "", "fp64": ""}
            else:
                try:
                    outcome = run_sample(op, sample, backend, timeout)
                except Exception as error:  # a harness bug must not stop the sweep
                    outcome = {"status": "crash", "detail": f"harness: {_describe(error)}", "fallbacks": "",
                               "max_abs_err": "", "fp64": ""}
            emit({**row, **outcome, "seconds": round(time.perf_counter() - start, 3)})


def load_ops(names: list[str] | None):
    from torch.testing._internal.common_methods_invocations import op_db

    if not names:
        return list(op_db)
    wanted = set(names)
    return [op for op in op_db if op_label(op) in wanted or op.name in wanted]


# -- workers ----------------------------------------------------------------------------------------------------
def worker_main(args) -> None:
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(1)
    ops = load_ops(None)
    max_samples = json.loads(args.max_samples_json)
    with open(args.worker_out, "a") as out:
        def emit(row):
            out.write(json.dumps(row, default=str) + "\n")
            out.flush()

        for position in map(int, args.worker_ops.split(",")):
            out.write(json.dumps({"event": "start", "position": position}) + "\n")
            out.flush()
            sweep_op(ops[position], args.dtypes.split(","), max_samples, args.backend, args.sample_timeout, emit)
            out.write(json.dumps({"event": "done", "position": position}) + "\n")
            out.flush()


def _read_events(path: Path) -> tuple[list[dict], set[int], int | None]:
    rows, done, started = [], set(), None
    if not path.exists():
        return rows, done, started
    for line in path.read_text().splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        if item.get("event") == "start":
            started = item["position"]
        elif item.get("event") == "done":
            done.add(item["position"])
            started = None
        else:
            rows.append(item)
    return rows, done, started


def run_sweep(positions: list[int], args, work_dir: Path) -> list[dict]:
    """Run `positions` (indices into op_db) over worker processes; returns every row."""
    import torch  # noqa: F401  (fail early if the environment is broken)
    from torch.testing._internal.common_methods_invocations import op_db

    queue = list(positions)
    chunk = max(1, args.chunk)
    running: list[tuple[subprocess.Popen, list[int], Path, float]] = []
    rows: list[dict] = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    counter = 0
    total = len(positions)
    finished = 0

    def launch(ops_chunk):
        nonlocal counter
        counter += 1
        out_path = work_dir / f"worker{counter}.jsonl"
        command = [sys.executable, "-m", "engine", "sweep", "opinfo", "--worker-ops", ",".join(map(str, ops_chunk)), "--worker-out",
                   str(out_path), "--backend", args.backend, "--dtypes", args.dtypes,
                   "--max-samples-json", json.dumps(args.max_samples_map), "--sample-timeout", str(args.sample_timeout)]
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        budget = args.op_timeout * len(ops_chunk)
        running.append((proc, ops_chunk, out_path, time.time() + budget))

    while queue or running:
        while queue and len(running) < args.jobs:
            launch(queue[:chunk])
            del queue[:chunk]
        time.sleep(0.5)
        for item in list(running):
            proc, ops_chunk, out_path, deadline = item
            if proc.poll() is None and time.time() < deadline:
                continue
            killed = proc.poll() is None
            if killed:
                proc.kill()
                proc.wait()
            running.remove(item)
            chunk_rows, done, started = _read_events(out_path)
            rows += chunk_rows
            unfinished = [p for p in ops_chunk if p not in done]
            if unfinished:
                stuck = started if started in unfinished else unfinished[0]
                op = op_db[stuck]
                seen = {(r["dtype"], r["sample"]) for r in chunk_rows if r["op"] == op_label(op)}
                reason = "worker killed (op budget exceeded)" if killed else \
                    f"worker died (signal {-proc.returncode})" if proc.returncode < 0 else \
                    f"worker died (exit code {proc.returncode})"
                rows.append({"op": op_label(op), "core_aten": is_core_aten(op), "dtype": "?",
                             "sample": len(seen), "status": "crash", "detail": reason, "fallbacks": "",
                             "max_abs_err": "", "fp64": "", "seconds": 0.0})
                queue[:0] = [p for p in unfinished if p != stuck]
            finished += len([p for p in ops_chunk if p in done]) + (1 if unfinished else 0)
            print(f"[{time.strftime('%H:%M:%S')}] {finished}/{total} ops, {len(rows)} samples: "
                  f"{dict(Counter(r['status'] for r in rows))}", flush=True)
            write_reports(rows, args, partial=bool(queue or running))
    return rows


# -- reports ---------------------------------------------------------------------------------------------------
CSV_FIELDS = ["op", "core_aten", "dtype", "sample", "status", "detail", "fallbacks", "max_abs_err", "fp64", "seconds"]


def summarize(rows: list[dict]) -> dict:
    counts = Counter(r["status"] for r in rows)
    # core-ATen share: of the samples that reached our backend (Dynamo captured them, eager accepts them)
    core = [r for r in rows if r["core_aten"] in (True, "True") and r["status"] in ("generated", "fallback", "wrong", "crash")]
    core_generated = sum(r["status"] == "generated" for r in core)
    return {"counts": {s: counts.get(s, 0) for s in STATUSES}, "samples": len(rows),
            "core_samples": len(core), "core_generated": core_generated,
            "core_generated_pct": 100.0 * core_generated / len(core) if core else 0.0}


def write_reports(rows: list[dict], args, partial: bool = False) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: (r["op"], str(r["dtype"]), int(r["sample"])))
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    out.with_suffix(".md").write_text(markdown_report(rows, args, partial))


def markdown_report(rows: list[dict], args, partial: bool) -> str:
    summary = summarize(rows)
    counts = summary["counts"]
    ops = sorted({r["op"] for r in rows})
    lines = [f"# OpInfo sweep ({args.backend} backend){' — PARTIAL, still running' if partial else ''}", "",
             "Every op of torch's OpInfo database (`torch.testing._internal.common_methods_invocations.op_db`) through "
             "Glassbox, each sample compared with eager under engine/run.py's tolerance policy.", "",
             f"Command: `{args.command}`", "",
             f"torch {_torch_version()}; dtypes {args.dtypes}; at most {args.max_samples_map} samples per op and dtype; "
             f"{len(ops)} ops, {summary['samples']} samples.", "",
             "| status | samples |", "| --- | --- |"]
    lines += [f"| {s} | {counts[s]} |" for s in STATUSES]
    lines += ["", f"Core-ATen ops (the OpInfo's ATen name carries torch.Tag.core): {summary['core_generated']} of "
              f"{summary['core_samples']} samples that reached Glassbox (captured by Dynamo, accepted by eager) fully generated "
              f"(**{summary['core_generated_pct']:.1f}%**).", ""]
    baseline = getattr(args, "baseline_rows", None)
    if baseline:
        before = summarize(baseline)
        lines += ["## Before and after this sweep's fixes", "",
                  f"The same sweep on the engine before the fixes it prompted ({args.baseline_note}):", "",
                  "| status | before | after |", "| --- | --- | --- |"]
        lines += [f"| {s} | {before['counts'][s]} | {counts[s]} |" for s in STATUSES]
        lines += [f"| core-ATen generated | {before['core_generated_pct']:.1f}% ({before['core_generated']}/"
                  f"{before['core_samples']}) | {summary['core_generated_pct']:.1f}% ({summary['core_generated']}/"
                  f"{summary['core_samples']}) |", ""]
    for note in getattr(args, "notes", []):
        lines += [note, ""]
    for status in ("wrong", "crash"):
        bad = [r for r in rows if r["status"] == status]
        lines += [f"## {status} ({len(bad)})", ""]
        lines += [f"- `{r['op']}` {r['dtype']} #{r['sample']}: {r['detail']}" for r in bad[:200]] or ["none"]
        lines.append("")
    reasons = Counter()
    for r in rows:
        if r["status"] == "fallback":
            for reason in str(r["fallbacks"]).split("; "):
                reasons[_shorten(reason)] += 1
    lines += ["## Fallback reasons (samples)", ""]
    lines += [f"- {n} × {reason}" for reason, n in reasons.most_common(60)] or ["none"]
    capture = Counter(_shorten(r["detail"]) for r in rows if r["status"] == "unsupported-by-capture")
    lines += ["", "## Unsupported by capture (samples)", ""]
    lines += [f"- {n} × {reason}" for reason, n in capture.most_common(40)] or ["none"]
    skipped = Counter(_shorten(r["detail"], 60) for r in rows if r["status"] == "skipped")
    lines += ["", "## Skipped (samples)", ""]
    lines += [f"- {n} × {reason}" for reason, n in skipped.most_common(25)] or ["none"]
    lines += ["", "## Per op", "", "| op | core | " + " | ".join(STATUSES) + " |",
              "| --- | --- |" + " --- |" * len(STATUSES)]
    per_op: dict[str, Counter] = {}
    core_ops = {}
    for r in rows:
        per_op.setdefault(r["op"], Counter())[r["status"]] += 1
        core_ops[r["op"]] = r["core_aten"] in (True, "True")
    for op in ops:
        c = per_op[op]
        lines.append(f"| `{op}` | {'yes' if core_ops[op] else ''} | " + " | ".join(str(c.get(s, '') or '') for s in STATUSES) + " |")
    return "\n".join(lines) + "\n"


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["core_aten"] = row["core_aten"] == "True"
        row["sample"] = int(row["sample"]) if str(row["sample"]).lstrip("-").isdigit() else 0
    return rows


def _shorten(text: str, n: int = 140) -> str:
    import re
    text = re.sub(r"0x[0-9a-f]+", "0x…", str(text))
    text = re.sub(r"\[[0-9, ]+\]", "[…]", text)
    return text[:n]


def _torch_version() -> str:
    import torch
    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    engine_options.add_flag(parser, "backend")
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES))
    parser.add_argument("--max-samples", type=int, default=0,
                        help="samples per op and dtype (default: float32 4, int64 2, bool 1)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=int, default=8, help="ops per worker process")
    parser.add_argument("--sample-timeout", type=int, default=60)
    parser.add_argument("--op-timeout", type=int, default=240, help="seconds of budget per op in a chunk")
    parser.add_argument("--out", default=str(ROOT / "reports" / "opinfo_sweep"))
    parser.add_argument("--from-csv", default="", help="rewrite the markdown report from this CSV (no sweep)")
    parser.add_argument("--sweep-command", default=COMMAND,
                        help="with --from-csv: the command that made the CSV, for the report")
    parser.add_argument("--baseline", default="", help="CSV of an earlier sweep, compared in the report")
    parser.add_argument("--baseline-note", default="an earlier sweep")
    parser.add_argument("--note", action="append", default=[], help="a paragraph for the report (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout and nothing else")
    parser.add_argument("--worker-ops", default="", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--max-samples-json", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_ops:
        worker_main(args)
        return 0
    args.max_samples_map = ({d: args.max_samples for d in args.dtypes.split(",")} if args.max_samples
                            else {d: DEFAULT_MAX_SAMPLES.get(d, 2) for d in args.dtypes.split(",")})
    args.notes = args.note
    args.baseline_rows = read_csv(Path(args.baseline)) if args.baseline else None
    if args.from_csv:
        rows = read_csv(Path(args.from_csv))
        args.command = args.sweep_command
        Path(args.out).with_suffix(".md").write_text(markdown_report(rows, args, partial=False))
        print(json.dumps(summarize(rows)))
        return 0
    args.command = f"{COMMAND} " + " ".join(argv if argv is not None else sys.argv[1:])
    with stdout_to_stderr() if args.json else nullcontext():  # progress lines: stderr under --json
        summary = sweep(args)
    print_json(summary)
    return 0


def sweep(args) -> dict:
    """The sweep of args.ops (all ops when empty) over worker processes; writes the reports, returns the summary."""
    from torch.testing._internal.common_methods_invocations import op_db
    names = [n for n in args.ops.split(",") if n]
    wanted = {id(op) for op in load_ops(names)}
    positions = [i for i, op in enumerate(op_db) if id(op) in wanted]
    work_dir = Path(args.out).with_suffix(".parts")
    work_dir.mkdir(parents=True, exist_ok=True)
    for stale in work_dir.glob("worker*.jsonl"):
        stale.unlink()
    start = time.time()
    rows = run_sweep(positions, args, work_dir)
    write_reports(rows, args)
    return {**summarize(rows), "minutes": round((time.time() - start) / 60, 1)}


if __name__ == "__main__":
    sys.exit(main())
