"""GPU checks of issue 15 (trust): the sandbox on a GPU machine, and the fp64 verdict on half precision.

    python -m engine.tools.gpu_trust [--device cuda|cpu]     # (`python -m engine bench gpu --trust` runs it)

1. `python -m engine explore gpt_decoder --backend triton --device DEVICE --sandbox --json` under bubblewrap
   (the GPU's device nodes are bound into the sandbox's /dev): the record comes back and verifies.
2. gpt_decoder in float16 on DEVICE, Glassbox (triton) and Inductor on the same inputs: each one's max error
   against eager and against the float64 reference, and Glassbox's verdict (engine/run.py, Note [Tolerance
   policy]): an error like Inductor's must not be a mismatch.
Prints one JSON document; exit 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def sandboxed_explore(device: str) -> dict:
    from engine.tools import isolation
    command = [sys.executable, "-m", "engine", "explore", "gpt_decoder", "--backend", "triton", "--device", device,
               "--sandbox", "--timeout", "600", "--json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    try:
        verify = json.loads(done.stdout)["verify"]
    except (ValueError, KeyError):
        verify = None
    return {"protection_missing": isolation.missing_protection_words(), "returncode": done.returncode,
            "verify_ok": bool(verify and verify.get("ok")), "stderr_tail": done.stderr[-1500:]}


def half_precision(device: str) -> dict:
    import torch

    import engine
    from engine import run
    from engine.tools.model_file import load_model_file

    spec = load_model_file("gpt_decoder")
    model = spec.model.to(device).half().eval()
    inputs = tuple(x.to(device) for x in spec.example_inputs)
    exploration = engine.explore(model, inputs, backend="triton", device=device)
    with torch.no_grad():
        eager = run.flatten_outputs(model(*run.fresh(inputs)))
        inductor = run.flatten_outputs(torch.compile(model)(*run.fresh(inputs)))
    reference, why_not = run.fp64_reference(model, run.fresh(inputs))
    inductor_entries = [run.compare_tensor(e, a, r if reference else None)
                        for e, a, r in zip(eager, inductor, reference or [None] * len(eager))]
    verify = exploration.verify.to_json()  # as the record's JSON: a tool's summary of it
    return {"verdict": verify.get("verdict"), "ok": verify.get("ok"), "fp64": why_not or "used",
            "glassbox": [{k: o.get(k) for k in ("max_abs_err", "judged_by")} | {"fp64": o.get("fp64")}
                         for o in verify.get("outputs", [])],
            "inductor": [{k: o.get(k) for k in ("ok", "max_abs_err", "judged_by")} | {"fp64": o.get("fp64")}
                         for o in inductor_entries]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.tools.gpu_trust", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    document = {"sandbox": sandboxed_explore(args.device), "half": half_precision(args.device)}
    print(json.dumps(document, indent=2, default=str))
    inductor_ok = all(o.get("ok") for o in document["half"]["inductor"])
    passed = document["sandbox"]["verify_ok"] and (document["half"]["ok"] or not inductor_ok)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
