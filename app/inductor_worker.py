"""Real Inductor on the same model, for the app's Inductor page, in the worker process (app/worker_main.py
--inductor -- FILE --out JSON [--device cpu|cuda] [--dynamic]); never in the Streamlit server.

It loads the model file once, runs it eagerly (the user's errors read as theirs, not as Inductor's), and writes
engine/reference.py's report as one JSON document to --out: {"ok": true, "device", "code", "calls", "kernels",
"extern_calls", "compile_s", "verify", "torch_version"}, or {"ok": false, "errors": [ErrorRecord]}: kind model
(the model file is at fault, at its lineno) or inductor (torch.compile failed), as data, like explore's record.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

from engine import options as engine_options


def explore_inductor(target: str, device: str, dynamic: bool, evidence_out: Path | None = None) -> dict:
    """Inductor's report; its check's evidence (eager's, Inductor's and the float64 shadow's outputs) goes to
    `evidence_out` for the app to judge outside this process (Note [Judged outside the job])."""
    import dataclasses

    import torch

    from engine import run
    from engine.record import to_plain
    from engine.reference import inductor_reference
    from engine.tools.judged import save_evidence
    from engine.tools.model_file import load_model_file, run_eager

    with contextlib.redirect_stdout(sys.stderr):
        spec = load_model_file(target)
        inputs = tuple(x.to(device) for x in spec.example_inputs)
        model = spec.model.to(device) if isinstance(spec.model, torch.nn.Module) else spec.model
        run_eager(spec)
        with run.collect_evidence() as evidence:
            report = inductor_reference(model, inputs, dynamic=True if dynamic else None)
    if evidence_out is not None:
        save_evidence([dataclasses.replace(found, role="inductor") for found in evidence], evidence_out)
    return {"ok": True, "device": device, **to_plain(report)}


def failure_record(error: Exception, target: str):
    """What went wrong, as the record's ErrorRecord: the model's fault (ModelFileError: its message already
    names the user's line) or Inductor's."""
    from engine.record import ErrorRecord
    from engine.tools.model_file import ModelFileError

    if isinstance(error, ModelFileError):
        return ErrorRecord(kind="model", stage="load", message=error.message, type=type(error).__name__,
                           filename=target, lineno=error.lineno)
    return ErrorRecord(kind="inductor", stage="inductor", message=f"{type(error).__name__}: {error}",
                       type=type(error).__name__)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="inductor_worker")
    parser.add_argument("target")
    parser.add_argument("--out", type=Path, required=True)
    engine_options.add_flag(parser, "device")
    parser.add_argument("--dynamic", action="store_true")
    args = parser.parse_args(argv)
    from engine.tools.judged import EVIDENCE_NAME  # read back and judged by app/worker.py
    # a fresh Inductor cache: the compile time shown is a cold compile, like the bench's
    with tempfile.TemporaryDirectory(prefix="glassbox-inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        try:
            document = explore_inductor(args.target, args.device, args.dynamic, args.out.parent / EVIDENCE_NAME)
            code = 0
        except Exception as error:  # noqa: BLE001 - reported to the app as a structured error
            document = {"ok": False, "errors": [failure_record(error, args.target).to_json()]}
            code = 2 if type(error).__name__ == "ModelFileError" else 1
    args.out.write_text(json.dumps(document), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
