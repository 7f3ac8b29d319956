"""The worker process's entry point: limits first, then the engine's CLI (or the Inductor script).

Run as `python app/worker_main.py [--memory-gb N] [--inputs-out FILE] -- <engine CLI arguments>`, or with
`--inductor` instead of engine arguments. It never runs inside the Streamlit server: app/worker.py starts it in its
own process group, so a model that hangs or crashes takes down this process only.

`python app/worker_main.py --standby` is the same process started ahead of time: it imports torch and the engine
(most of a small model's exploration time), then waits for one job on stdin, a JSON line
{"argv": [...], "stdout": FILE, "stderr": FILE}, and runs it exactly like a fresh worker (one job, then exit, so
no state from one model reaches the next).

Why a launcher instead of `python -m engine` directly: the memory limit must be set inside the child before torch
loads (a preexec_fn is unsafe in Streamlit's threaded server), and the app wants the example inputs' shapes, which
the record does not hold yet; both are a few lines here.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def limit_memory(gigabytes: float) -> None:
    """Cap the address space so a runaway model gets a MemoryError instead of swapping the machine."""
    if gigabytes <= 0:
        return
    limit = int(gigabytes * 2**30)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def describe_example_inputs(target: str, out: Path) -> None:
    """Write the model's example inputs as [{"dtype", "shape"}] to `out`; silent on failure (the CLI reports it)."""
    import contextlib

    from engine.model_file import ModelFileError, load_model_file

    try:
        # the user's prints must not reach stdout, which carries the CLI's JSON
        with contextlib.redirect_stdout(sys.stderr):
            spec = load_model_file(target)
    except (ModelFileError, Exception):  # noqa: BLE001 - the CLI run that follows reports the same problem
        return
    described = []
    for value in spec.example_inputs:
        described.append({"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape)})
    out.write_text(json.dumps(described), encoding="utf-8")


def assembly(in_path: Path, out_path: Path, kernel_names: list[str] | None) -> int:
    """The engine's on-request Triton lowerings (engine/codegen/triton_build.add_assembly) for a record's
    graphs, written back as {kernel name: {"ttir", "ttgir", "llir", "ptx", "sass", "target", "error"?}}."""
    document = json.loads(in_path.read_text(encoding="utf-8"))
    try:
        from engine.codegen.triton_build import add_assembly
    except ImportError as error:
        out_path.write_text(json.dumps({"error": f"this engine cannot lower Triton for display: {error}"}))
        return 1
    try:
        add_assembly(document, kernel_names)
    except Exception as error:  # noqa: BLE001 - shown in the app as the reason there is no assembly
        out_path.write_text(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    found = {k["name"]: k["asm"] for g in document.get("graphs") or [] for k in g.get("kernels") or [] if "asm" in k}
    out_path.write_text(json.dumps({"kernels": found}), encoding="utf-8")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="app/worker_main.py")
    parser.add_argument("--memory-gb", type=float, default=0.0)
    parser.add_argument("--inputs-out", type=Path)
    parser.add_argument("--inductor", action="store_true", help="run app/inductor_worker.py instead of the CLI")
    parser.add_argument("--asm", action="store_true",
                        help="IN OUT [KERNEL...]: Triton lowerings (TTIR..SASS) of a record's kernels")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    limit_memory(args.memory_gb)
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    if args.inductor:
        from app import inductor_worker
        return inductor_worker.main(rest)
    if args.asm:
        return assembly(Path(rest[0]), Path(rest[1]), rest[2:] or None)
    if args.inputs_out is not None and len(rest) >= 2:
        describe_example_inputs(rest[1], args.inputs_out)
    sys.argv = ["python -m engine", *rest]
    try:
        runpy.run_module("engine", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def standby() -> int:
    """Import the heavy modules, then run the one job that arrives on stdin (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    import torch  # noqa: F401 - imported now, while nobody waits
    import engine.__main__  # noqa: F401

    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the app went away (the pipe closed) before giving a job
    job = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    for path, fd in ((job["stdout"], 1), (job["stderr"], 2)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    return main(job["argv"])


if __name__ == "__main__":
    if sys.argv[1:] == ["--standby"]:
        sys.exit(standby())
    sys.exit(main(sys.argv[1:]))
