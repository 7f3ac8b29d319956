"""Recompile what-if: would other inputs recompile, and why, asked of Dynamo's own guards before they run.

Note [Recompile what-if]
Dynamo keeps, per compiled function, one cache entry per set of guards; a call reuses the first entry whose
guards all pass and recompiles when none does. So the question "would these inputs recompile?" has an exact
answer before the model runs on them: build the function's locals for the new inputs (tensors of the asked
sizes and dtypes, the model as `self`) and run every cache entry's guard manager on them (check_verbose, the
check Dynamo itself runs, which also names the first guard that fails). The what-if explores the model on its
example inputs, asks the guards about the new ones, then runs them and reports what really happened, so the
prediction is checked against the outcome. With dynamic shapes the same question is asked of the dynamic
compile. Only the model's own function is asked (the frames after a graph break compile separately; their
entries are asked when Dynamo has them, found by the graph break's code). The failing guards are summarized by
kind: shape, dtype, stride, device, requires_grad, module or global state, other.
"""
from __future__ import annotations

import inspect
import re

import torch

import engine
from engine.tools.model_file import ModelSpec

SPEC = re.compile(r"(\w+)\s*\[([^\]]*)\]")
KINDS = (("shape", ("size mismatch", "dimension mismatch", "ndim", "sizes", "size()", "shape_env")),
         ("dtype", ("dtype",)), ("stride", ("stride",)), ("device", ("device",)),
         ("requires_grad", ("requires_grad",)), ("tensor", ("check_tensor", "TENSOR_MATCH", "_dynamo_dynamic_indices")),
         ("module", ("L['self']", "L['fn']", "nn_module", "training")),
         ("global", ("G[", "___check_global", "global", "grad_mode", "deterministic", "torch_function",
                     "CURRENT_DEVICE")))


class WhatIfError(Exception):
    """The inputs asked for cannot be made (a bad spec, or not as many tensors as the model takes)."""


def parse_inputs(text: str, example: tuple) -> tuple:
    """'float32[8, 512], int64[8]' -> tensors of those sizes and dtypes, in the place of the example's tensors
    (other example values are kept). Random values, seeded: the guards look at sizes and dtypes, not values."""
    specs = SPEC.findall(text)
    tensors = [i for i, x in enumerate(example) if isinstance(x, torch.Tensor)]
    if len(specs) != len(tensors):
        raise WhatIfError(f"{len(specs)} input spec(s) given for {len(tensors)} tensor input(s); write one per "
                          f"tensor, e.g. {', '.join(spec_of(example[i]) for i in tensors)}")
    generator = torch.Generator().manual_seed(0)
    made = list(example)
    for position, (dtype_name, sizes) in zip(tensors, specs):
        dtype = getattr(torch, dtype_name, None)
        if not isinstance(dtype, torch.dtype):
            raise WhatIfError(f"unknown dtype {dtype_name!r}")
        shape = [int(s) for s in sizes.replace(" ", "").split(",") if s]
        old = example[position]
        value = torch.randn(shape, generator=generator).to(dtype) if dtype.is_floating_point else \
            torch.randint(0, 2, shape, generator=generator).to(dtype)
        made[position] = value.to(old.device).requires_grad_(old.requires_grad and dtype.is_floating_point)
    return tuple(made)


def spec_of(x: torch.Tensor) -> str:
    return f"{str(x.dtype).replace('torch.', '')}[{', '.join(str(s) for s in x.shape)}]"


def guard_kind(text: str) -> str:
    for kind, words in KINDS:
        if any(word in text for word in words):
            return kind
    return "other"


def summarize_guards(guards: list[str]) -> dict[str, int]:
    """How many guards of each kind (Note [Recompile what-if])."""
    counts: dict[str, int] = {}
    for guard in guards:
        kind = guard_kind(guard)
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _locals(code, model, inputs: tuple) -> dict:
    """The frame locals Dynamo's guards read for a call of `model` on `inputs`, for a compiled `code`: the
    model's forward (self and its parameters), a plain function's parameters, or Dynamo's wrapper of a
    built-in module (`fn` closed over, `*args`, `**kwargs`)."""
    names = code.co_varnames[:code.co_argcount]
    f_locals: dict = {}
    values = list(inputs)
    if names and names[0] == "self" and isinstance(model, torch.nn.Module):
        f_locals["self"], names = model, names[1:]
    f_locals.update(zip(names, values))
    rest = values[len(names):]
    flags = code.co_flags
    position = code.co_argcount + code.co_kwonlyargcount
    if flags & inspect.CO_VARARGS:
        f_locals[code.co_varnames[position]] = tuple(rest)
        position += 1
    if flags & inspect.CO_VARKEYWORDS:
        f_locals[code.co_varnames[position]] = {}
    if "fn" in code.co_freevars:
        f_locals["fn"] = model
    return f_locals


def _candidate_codes(model) -> list:
    """Compiled code objects that may be the model's: its forward (or the function), then every code Dynamo
    has compiled (a built-in module runs through Dynamo's own wrapper)."""
    import torch._dynamo.convert_frame as convert_frame

    function = model.forward if isinstance(model, torch.nn.Module) else model
    first = getattr(getattr(function, "__func__", function), "__code__", None)
    seen = [ref() for ref in list(getattr(convert_frame.input_codes, "seen", []))]
    return [code for code in [first] + seen if code is not None]


def predict(model, inputs: tuple, example: tuple) -> dict:
    """Ask every cached version of the model's compiled function whether its guards pass for `inputs`. The
    function is the one whose guards pass for the example inputs (that checks the locals are built right)."""
    with torch.no_grad():  # as explore runs every input set: grad mode is one of the global guards
        return _predict(model, inputs, example)


def _predict(model, inputs: tuple, example: tuple) -> dict:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    for code in dict.fromkeys(_candidate_codes(model)):
        entries = _debug_get_cache_entry_list(code)
        if not entries:
            continue
        try:
            if not any(e.guard_manager.check(_locals(code, model, example)) for e in entries):
                continue
        except Exception:  # noqa: BLE001 - locals of another shape than this code's: not the model's
            continue
        f_locals = _locals(code, model, inputs)
        checked = []
        for number, entry in enumerate(entries):
            result = entry.guard_manager.check_verbose(f_locals)
            checked.append({"entry": number, "passes": bool(result.result),
                            "failed": [str(part) for part in result.verbose_code_parts]})
        return _verdict(checked, code)
    return {"known": False, "reason": "no compiled version of the model's function accepts its example inputs"}


def _verdict(checked: list[dict], code) -> dict:
    failed = [f for c in checked for f in c["failed"]]
    kinds = sorted({guard_kind(f) for f in failed})
    recompile = not any(c["passes"] for c in checked)
    if not recompile:
        dynamic = "no recompile either way"
    elif kinds == ["shape"]:
        dynamic = ("dynamic=True (or torch._dynamo.mark_dynamic on the changed dims) compiles sizes as symbols: one "
                   "graph would serve these shapes too, without this recompile")
    else:
        dynamic = (f"dynamic=True would not avoid it: {', '.join(k for k in kinds if k != 'shape')} guards fail, "
                   "and only sizes become symbols")
    return {"known": True, "recompile": recompile, "entries": len(checked), "checked": checked,
            "failed_kinds": kinds, "dynamic": dynamic, "function": code.co_name}


def what_if(spec: ModelSpec, inputs: tuple, backend: str = "cpp", device: str = "cpu",
            dynamic: bool | None = None) -> dict:
    """Explore on the example inputs, predict for `inputs` from the guards, then run them: prediction and
    outcome side by side (Note [Recompile what-if])."""
    predictions: list[dict] = []
    exploration = engine.explore(spec.model, spec.example_inputs, backend=backend, device=device, dynamic=dynamic,
                                 dynamic_inputs=[inputs], name=spec.name,
                                 before_inputs=lambda extra: predictions.append(
                                     predict(spec.model, extra, tuple(spec.example_inputs))))
    record = exploration.to_json()
    run = (record.get("runs") or [{}])[0]
    recompiles = record.get("recompiles") or []
    happened = bool(run.get("new_graphs")) or bool(recompiles)
    prediction = predictions[0] if predictions else {"known": False, "reason": "the inputs never ran"}
    return {"model": spec.name, "inputs": run.get("inputs") or ", ".join(spec_of(x) for x in inputs
                                                                         if isinstance(x, torch.Tensor)),
            "example_inputs": record.get("inputs"), "dynamic": dynamic, "prediction": prediction,
            "outcome": {"recompiled": happened, "new_graphs": run.get("new_graphs", 0),
                        "reasons": [r.get("reason") for r in recompiles], "verify_ok": (run.get("verify") or {}).get("ok")},
            "predicted_right": prediction.get("known") and prediction["recompile"] == happened,
            "guards": {"count": len(record.get("guards") or []), "by_kind": summarize_guards(record.get("guards") or []),
                       "all": record.get("guards") or []},
            "errors": record.get("errors") or []}


def what_if_lines(result: dict) -> list[str]:
    prediction, outcome = result["prediction"], result["outcome"]
    lines = [f"What if {result['model']} got {result['inputs']} (explored on {result['example_inputs']}"
             + (", dynamic=True" if result.get("dynamic") else "") + ")?"]
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(result["guards"]["by_kind"].items(),
                                                                  key=lambda item: -item[1]))
    lines.append(f"  guards: {result['guards']['count']} ({kinds or 'none'})")
    if not prediction.get("known"):
        lines.append(f"  prediction: unknown ({prediction.get('reason')})")
    else:
        lines.append(f"  prediction (Dynamo's guards, before running): "
                     + ("RECOMPILE" if prediction["recompile"] else "no recompile, a cached version fits"))
        for check in prediction["checked"]:
            for failed in check["failed"]:
                lines.append(f"    version {check['entry']}: fails {failed}")
        lines.append(f"  dynamic=True: {prediction['dynamic']}")
    lines.append(f"  outcome (ran them): " + (f"recompiled ({outcome['new_graphs']} new graph(s))" if outcome["recompiled"]
                                              else "no recompile") + f"; prediction {'right' if result['predicted_right'] else 'WRONG'}")
    return lines
