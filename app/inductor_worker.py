"""Real Inductor on the same model, for the app's Inductor pane: its output code, kernel names, compile time.

Runs only in the worker process (app/worker_main.py --inductor -- FILE --out JSON [--device cpu|cuda]
[--dynamic]), never in the Streamlit server. It writes one JSON document to --out:
    {"ok", "device", "compile_s", "codes": [str, ...], "kernels": [{"name", "kind", "graph"}], "error"?}
The engine may later record this itself (DESIGN.md names engine/reference.py); until then this is the app's
own small view of Inductor, using torch's public-ish test helper run_and_get_code.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
import os
from pathlib import Path

# `name = async_compile.triton('name', ...)` / `name = async_compile.cpp_pybinding(...)` in Inductor's output
KERNEL_DEFINITION = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.MULTILINE)
# extern calls Inductor's wrapper makes directly (mm, convolution, sdpa, fallbacks)
EXTERN_CALL = re.compile(r"\b(extern_kernels\.\w+|aten\.\w+(?:\.\w+)?|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(")


def kernels_in(code: str, graph: int) -> list[dict]:
    found = [{"name": name, "kind": kind, "graph": graph} for name, kind in KERNEL_DEFINITION.findall(code)]
    seen = set()
    for call in EXTERN_CALL.findall(code):
        if call not in seen and not call.startswith("torch.ops.inductor"):
            seen.add(call)
            found.append({"name": call, "kind": "extern", "graph": graph})
    return found


def explore_inductor(target: str, device: str, dynamic: bool) -> dict:
    import torch
    from torch._inductor.utils import run_and_get_code

    from engine.tools.model_file import load_model_file, run_eager

    with contextlib.redirect_stdout(sys.stderr):
        spec = load_model_file(target)
        inputs = tuple(x.to(device) for x in spec.example_inputs)
        model = spec.model.to(device) if isinstance(spec.model, torch.nn.Module) else spec.model
        run_eager(spec)  # the user's errors read as theirs, not as Inductor's
        compiled = torch.compile(model, dynamic=True if dynamic else None)
        start = time.perf_counter()
        with torch.no_grad():
            _, codes = run_and_get_code(compiled, *inputs)
        compile_s = time.perf_counter() - start
    kernels = [k for number, code in enumerate(codes) for k in kernels_in(code, number)]
    return {"ok": True, "device": device, "compile_s": compile_s, "codes": codes, "kernels": kernels,
            "torch": torch.__version__}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="inductor_worker")
    parser.add_argument("target")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dynamic", action="store_true")
    args = parser.parse_args(argv)
    # a fresh Inductor cache: the compile time shown is a cold compile, like the bench's
    with tempfile.TemporaryDirectory(prefix="glassbox-inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        try:
            document = explore_inductor(args.target, args.device, args.dynamic)
            code = 0
        except Exception as error:  # noqa: BLE001 - reported to the app as a readable paragraph
            message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
            document = {"ok": False, "error": message, "lineno": getattr(error, "lineno", None)}
            code = 2 if type(error).__name__ == "ModelFileError" else 1
    args.out.write_text(json.dumps(document), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
