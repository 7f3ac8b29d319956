"""The worker process's entry point: the engine's CLI (or the Inductor script, or Triton's lowerings).

app/worker.py starts it through engine/tools/sandbox.py (Note [Sandbox]: its own session, a clean environment, a
private directory, limits, a group kill), as `python app/worker_main.py --standby`: it imports torch and the
engine while nobody waits (Note [Standby worker]), then reads one job from stdin, a JSON line
{"argv": [...], "started": FILE, "finished": FILE}, and runs it: `-- <engine CLI arguments>`, or
`--inductor -- ...`, or `--asm -- ...`. One job, then exit, so no state from one model reaches the next. Once
the job has returned normally, the worker writes its exit code to the "finished" file: a worker that exits
without it was ended by the model itself (os._exit), which the app reports as such. The "started" file is
written as the job is read, after the imports: the job's time limit counts from then (Note [Standby worker]).

`python app/worker_main.py ARGS` runs ARGS directly (handy by hand). It never runs inside the Streamlit server.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import runpy
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STACK_SIGNAL = signal.SIGUSR1  # app/worker.py sends it before a limit kill


def assembly(in_path: Path, out_path: Path, kernel_names: list[str] | None) -> int:
    """The engine's on-request Triton lowerings (engine/tools/assembly.add_assembly) for a record's
    graphs, written back as {kernel name: {"ttir", "ttgir", "llir", "ptx", "sass", "target", "error"?}}."""
    try:
        from engine.record import CodeRecord, Exploration, GraphRecord, KernelRecord
        from engine.tools.assembly import add_assembly
    except ImportError as error:
        out_path.write_text(json.dumps({"error": f"this engine cannot lower Triton for display: {error}"}))
        return 1
    try:
        document = json.loads(in_path.read_text(encoding="utf-8"))  # app/worker.py: each graph's code and kernels
        record = Exploration(model="", backend="triton", device="", graphs=[
            GraphRecord(index=number, code=CodeRecord.from_json(graph["code"]) if graph["code"] else None,
                        kernels=[KernelRecord.from_json(kernel) for kernel in graph["kernels"]])
            for number, graph in enumerate(document["graphs"])])
        add_assembly(record, kernel_names)
    except Exception as error:  # noqa: BLE001 - shown in the app as the reason there is no assembly
        out_path.write_text(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    found = {k.name: k.asm.to_json() for k in record.kernels if k.asm is not None}
    out_path.write_text(json.dumps({"kernels": found}), encoding="utf-8")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="app/worker_main.py")
    parser.add_argument("--inductor", action="store_true", help="run app/inductor_worker.py instead of the CLI")
    parser.add_argument("--asm", action="store_true",
                        help="IN OUT [KERNEL...]: Triton lowerings (TTIR..SASS) of a record's kernels")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    sys.path.insert(0, str(ROOT))
    if args.inductor:
        from app import inductor_worker
        return inductor_worker.main(rest)
    if args.asm:
        return assembly(Path(rest[0]), Path(rest[1]), rest[2:] or None)
    sys.argv = ["python -m engine", *rest]
    try:
        runpy.run_module("engine", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def standby() -> int:
    """Import the heavy modules, then run the one job that arrives on stdin (see the module docstring)."""
    # where the model was when it crashed (a fatal signal) or was stopped at a limit (the sandbox sends
    # STACK_SIGNAL first): its Python stack on stderr, from which the app takes the user's line
    faulthandler.enable(all_threads=True)
    faulthandler.register(STACK_SIGNAL, all_threads=True)
    sys.path.insert(0, str(ROOT))
    import torch  # noqa: F401 - imported now, while nobody waits
    import engine.__main__  # noqa: F401

    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the app went away (the pipe closed) before giving a job
    job = json.loads(line)
    if job.get("started"):
        Path(job["started"]).write_text("", encoding="utf-8")
    code = main(job["argv"])
    sys.stdout.flush()
    sys.stderr.flush()
    if job.get("finished"):
        Path(job["finished"]).write_text(str(code), encoding="utf-8")
    return code


if __name__ == "__main__":
    if sys.argv[1:] == ["--standby"]:
        sys.exit(standby())
    sys.exit(main(sys.argv[1:]))
