"""Write a standalone reproducer file from the record (Note [Kernel reproducers] in engine/reproducer.py).

`repro_text(record, graph, kernel)` is a pure function of the record's JSON (no torch here): the CLI's
`python -m engine repro`, the app's "download reproducer" and a saved record.json all give the same file. The
file imports torch and the project's loaders (engine.runtime.build for C++, engine.runtime.triton_build for Triton), so
it runs from a Glassbox checkout (it puts the checkout it was written from on sys.path when it still exists).
"""
from __future__ import annotations

import pprint
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ReproError(Exception):
    """No reproducer for what was asked (an unknown kernel, a library call): the message says why."""


def _literal(text: str) -> str:
    """`text` as a Python string literal that reads like the source it holds."""
    if "'''" not in text and not text.endswith("\\") and "\r" not in text:
        return "r'''" + text + "'''"
    return repr(text)


def find_kernels(record: dict, graph: int | None, kernel: str | None) -> list[tuple[dict, dict]]:
    """(graph, kernel) pairs asked for: one kernel (by name, in `graph` or the first graph that has it), or every
    kernel of `graph` that has a reproducer."""
    graphs = record.get("graphs") or []
    if graph is not None:
        graphs = [g for g in graphs if g.get("index") == graph]
        if not graphs:
            raise ReproError(f"no graph {graph}; the record has graphs "
                             f"{', '.join(str(g.get('index')) for g in record.get('graphs') or []) or 'none'}")
    if kernel is not None:
        for g in graphs:
            for k in g.get("kernels") or []:
                if k.get("name") == kernel:
                    repro = k.get("repro") or {}
                    if "unsupported" in repro or not repro:
                        raise ReproError(f"{kernel} of graph {g['index']}: "
                                         f"{repro.get('unsupported', 'the record has no reproducer data')}")
                    return [(g, k)]
        names = sorted({k.get("name") for g in graphs for k in g.get("kernels") or []})
        raise ReproError(f"no kernel {kernel!r}" + (f" in graph {graph}" if graph is not None else "")
                         + f"; kernels: {', '.join(names) or 'none'}")
    found = [(g, k) for g in graphs for k in g.get("kernels") or []
             if (k.get("repro") or {}) and "unsupported" not in k["repro"]]
    if not found:
        raise ReproError("no generated kernel with a reproducer" + (f" in graph {graph}" if graph is not None else ""))
    return found


def _prelude(graph: dict) -> str:
    code = graph.get("code") or {}
    lines = (code.get("source") or "").splitlines()
    return "\n".join(lines[: code.get("prelude_lines", 0)])


def _case(graph: dict, kernel: dict) -> tuple[str, str]:
    """(the case's reference function, the case's dict literal)."""
    repro = kernel["repro"]
    name = f"g{graph['index']}_{kernel['name']}"
    reference = repro.get("reference") or {}
    function = ""
    case = {"name": kernel["name"], "graph": graph["index"], "language": repro["language"],
            "device": repro["device"], "args": repro["args"], "size_args": repro["size_args"],
            "launch": repro.get("launch"), "ops": kernel.get("ops") or [],
            "unchecked": reference.get("unchecked") or []}
    if "code" in reference:
        function = reference["code"].replace("def forward(self", f"def reference_{name}(self", 1)
        case["reference"] = f"reference_{name}"
        case["inputs"], case["outputs"] = reference["inputs"], reference["outputs"]
    else:
        case["no_reference"] = reference.get("error", "no reference")
    case_text = pprint.pformat(case, width=116, sort_dicts=False).replace("\n", "\n    ")
    case_text = case_text.replace("'reference': 'reference_" + name + "'", "'reference': reference_" + name)
    source = (kernel.get("source") or "")
    return function, f"dict(source=PRELUDE_{graph['index']} + '\\n' + {_literal(source)},\n    **{case_text})"


def repro_text(record: dict, graph: int | None = None, kernel: str | None = None) -> str:
    """The reproducer file: one case per kernel asked for (find_kernels)."""
    pairs = find_kernels(record, graph, kernel)
    model = record.get("model", "model")
    what = (f"kernel {pairs[0][1]['name']} of graph {pairs[0][0]['index']}" if kernel is not None
            else f"the {len(pairs)} generated kernel(s) of " + (f"graph {graph}" if graph is not None else "every graph"))
    preludes = {g["index"]: _prelude(g) for g, _ in pairs}
    functions, cases = zip(*(_case(g, k) for g, k in pairs))
    parts = [HEADER.format(what=what, model=model, backend=record.get("backend", ""), device=record.get("device", ""),
                           root=repr(str(ROOT)))]
    for index, text in preludes.items():
        parts.append(f"PRELUDE_{index} = {_literal(text)}\n")
    parts.append("\n# --- eager references: the ATen ops each kernel was lowered from -----------------------------\n")
    parts += [f + "\n" for f in functions if f]
    parts.append("\nCASES = [\n    " + ",\n    ".join(cases) + ",\n]\n")
    parts.append(RUNNER)
    return "\n".join(parts)


HEADER = '''"""Reproducer for {what} of {model} (backend {backend}, device {device}), written by Glassbox.

    python THIS_FILE.py [--iters N] [--seed S]

Each case loads the generated kernel with Glassbox's own loader, fills its inputs with random values (a seed)
in the recorded sizes, strides and dtypes, computes the eager reference from the same ATen ops, checks the
kernel's outputs against it (Glassbox's per-dtype tolerance, and a float64 run where eager is not exact), and
times the kernel. Exit status 0 when every checked output matches, 1 otherwise.
Note [Kernel reproducers] in engine/reproducer.py says what is checked and what cannot be.
"""
import argparse
import os
import sys
import time

GLASSBOX = {root}  # the checkout this was written from; or run with Glassbox on PYTHONPATH
if os.path.isdir(GLASSBOX) and GLASSBOX not in sys.path:
    sys.path.insert(0, GLASSBOX)

import torch  # noqa: E402
from torch import device  # noqa: E402,F401 - the ATen code below may name devices
inf, nan = float("inf"), float("nan")
'''

RUNNER = r'''

def random_tensor(shape, stride, dtype, device_name, generator):
    """A tensor in the recorded layout, its memory filled at random (expanded dims share their values)."""
    dtype = getattr(torch, dtype)
    numel = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
    if dtype.is_floating_point or dtype.is_complex:
        flat = torch.randn(numel, generator=generator).to(dtype)
    elif dtype == torch.bool:
        flat = torch.randint(0, 2, (numel,), generator=generator).bool()
    else:
        flat = torch.randint(0, 2, (numel,), generator=generator).to(dtype)
    return flat.to(device_name).as_strided(shape, stride)


def make_arguments(case, seed):
    """The kernel's tensors (by buffer name) and the reference's inputs, with the same values."""
    generator = torch.Generator().manual_seed(seed)
    args = {a["name"]: a for a in case["args"]}
    tensors, ref_inputs = {}, []
    for value in case.get("inputs", []):
        first = None
        for name in value["buffers"]:
            spec = args[name]
            if first is None:
                first = random_tensor(spec["shape"], spec["stride"], spec["dtype"], case["device"], generator)
                tensors[name] = first
            else:
                tensors[name] = torch.empty_strided(spec["shape"], spec["stride"], dtype=first.dtype,
                                                    device=case["device"]).copy_(first)
        ref_inputs.append(first)
    for spec in case["args"]:
        if spec["name"] in tensors:
            continue
        if spec["read"] and not spec["zeroed"]:
            tensors[spec["name"]] = random_tensor(spec["shape"], spec["stride"], spec["dtype"], case["device"],
                                                  generator)
        else:
            tensors[spec["name"]] = torch.empty_strided(spec["shape"], spec["stride"], dtype=getattr(
                torch, spec["dtype"]), device=case["device"]).zero_()
    return tensors, ref_inputs


def load(case):
    """The kernel, compiled and loaded by Glassbox's loader: a function of the tensors and sizes."""
    import ctypes

    if case["language"] == "cpp":
        from engine.runtime.build import build_library, load_library

        path, _ = build_library(case["source"])
        library = load_library(path)
        function = getattr(library, case["name"])
        threads = getattr(library, "gb_set_threads", None)  # as the wrapper does: torch's thread count
        if threads is not None:
            threads.argtypes, threads.restype = [ctypes.c_int], None
            threads(torch.get_num_threads())
        function.restype = None
        function.argtypes = [ctypes.c_void_p] * len(case["args"]) + [ctypes.c_int64] * len(case["size_args"])

        def run(tensors, sizes):
            function(*[t.data_ptr() for t in tensors], *sizes)
        return run
    from engine.runtime.triton_build import load_source

    launch = case["launch"]
    module, _ = load_source(case["source"], interpret=launch["interpret"])
    jit_function = getattr(module, case["name"])

    def run(tensors, sizes):
        import numpy

        with numpy.errstate(all="ignore"):  # masked-off lanes compute on fill values (log(0)), never stored
            jit_function.run(*tensors, *sizes, grid=tuple(launch["grid"]), warmup=False, **launch["constexprs"],
                             num_warps=launch["num_warps"])
    return run


def upcast(value):
    if isinstance(value, torch.Tensor) and value.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return value.double()
    return value


def check(case, tensors, ref_inputs):
    """Each checked output against eager (and float64): Glassbox's own rule (engine/run.py, compare_tensor)."""
    from engine.run import compare_tensor

    if "reference" not in case:
        print(f"  not checked: {case['no_reference']}")
        return True
    expected = case["reference"](None, *[t.clone() for t in ref_inputs])
    try:
        fp64 = case["reference"](None, *[upcast(t) for t in ref_inputs])
    except Exception:  # an op that has no float64 kernel: rule 1 alone decides
        fp64 = [None] * len(expected)
    ok = True
    for output, eager, reference in zip(case["outputs"], expected, fp64):
        actual = tensors[output["buffer"]]
        result = compare_tensor(eager, actual, reference if isinstance(reference, torch.Tensor) else None)
        ok = ok and result["ok"]
        print(f"  {output['buffer']} (ATen {output['node']}): {'ok' if result['ok'] else 'MISMATCH'}, max abs err "
              f"{result['max_abs_err']:.3g} vs eager" + (f", judged by {result['judged_by']}" if result["ok"] else ""))
    for item in case["unchecked"]:
        print(f"  {item['buffer']} not checked: {item['why']}")
    return ok


def time_kernel(run, arguments, sizes, iters, on_gpu):
    run(arguments, sizes)
    if on_gpu:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(iters):
        run(arguments, sizes)
    if on_gpu:
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / iters * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=None, help="timed launches (default 100; 3 interpreted)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    all_ok = True
    for case in CASES:
        print(f"graph {case['graph']} {case['name']} ({case['language']}, {case['device']}): "
              f"{' + '.join(case['ops']) or 'generated kernel'}")
        run = load(case)
        tensors, ref_inputs = make_arguments(case, args.seed)
        arguments = [tensors[a["name"]] for a in case["args"]]
        sizes = [s["value"] for s in case["size_args"]]
        run(arguments, sizes)
        if case["device"].startswith("cuda"):
            torch.cuda.synchronize()
        ok = check(case, tensors, ref_inputs)
        all_ok = all_ok and ok
        interpreted = (case.get("launch") or {}).get("interpret", False)
        iters = args.iters if args.iters is not None else (3 if interpreted else 100)
        if iters > 0:
            ms = time_kernel(run, arguments, sizes, iters, case["device"].startswith("cuda"))
            print(f"  {ms:.4f} ms per launch over {iters} launches" + (" (Triton interpreter: not a GPU time)"
                                                                        if interpreted else ""))
    print("all checked outputs match" if all_ok else "MISMATCH: a kernel differs from its eager reference")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''
