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
kind: shape, dtype, stride, device, requires_grad, module or global state, other; the version's own guards are
read from its guard tree, the ones that matter first (Note [Guards that matter] in guard_tree.py).

A dim can also be marked dynamic (torch._dynamo.mark_dynamic on the example input, `dynamic_dims`): the example
compile then takes that size as a symbol, and the same guards say whether the new inputs still recompile. The
sizes that changed are named per dim (input, dim, from, to, marked or not), so the answer says which marks
would avoid the recompile. A mark the model's code contradicts (it specializes the size: a broadcast against a
static dim) is Dynamo's constraint violation, returned as the answer, not raised.
"""
from __future__ import annotations

import inspect
import re

import torch

import engine
from engine.run import same_layout_copy
from engine.tools import guard_tree
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
        guards = guard_tree.version_guards(entries[-1], _self_names(code, model))  # the example's version
        return {**_verdict(checked, code), "guards": {**guards, "matters": guard_tree.matters(guards)},
                "input_names": _input_names(code, model, example)}
    return {"known": False, "reason": "no compiled version of the model's function accepts its example inputs"}


def _self_names(code, model) -> tuple[str, ...]:
    names = code.co_varnames[:1] if isinstance(model, torch.nn.Module) and code.co_argcount else ()
    return tuple(names) + ("self", "fn")


def _input_names(code, model, example: tuple) -> list[str]:
    """Each tensor input's name as the guards spell it (L['x'], or L['args'][0] through a wrapper)."""
    f_locals = _locals(code, model, example)
    names = []
    for value in example:
        if not isinstance(value, torch.Tensor):
            continue
        found = next((f"L['{k}']" for k, v in f_locals.items() if v is value), None)
        if found is None:
            found = next((f"L['{k}'][{i}]" for k, v in f_locals.items() if isinstance(v, tuple)
                          for i, item in enumerate(v) if item is value), None)
        names.append(found or f"input {len(names)}")
    return names


def changed_dims(example: tuple, inputs: tuple, marked: tuple = ()) -> list[dict]:
    """Each size that differs between the example's tensors and the new ones: {input (its position among the
    tensor inputs), dim, from, to, marked (dynamic on the example)}; a change of rank is dim None."""
    tensors = [(a, b) for a, b in zip(example, inputs) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)]
    changed = []
    for position, (old, new) in enumerate(tensors):
        if old.dim() != new.dim():
            changed.append({"input": position, "dim": None, "from": list(old.shape), "to": list(new.shape),
                            "marked": False})
            continue
        changed += [{"input": position, "dim": dim, "from": a, "to": b, "marked": (position, dim) in marked}
                    for dim, (a, b) in enumerate(zip(old.shape, new.shape)) if a != b]
    return changed


def mark_dims(example: tuple, dims) -> tuple:
    """Copies of the example's tensors with `dims` ((tensor position, dim) pairs) marked dynamic
    (torch._dynamo.mark_dynamic); the model file's own tensors stay unmarked."""
    tensors = [i for i, x in enumerate(example) if isinstance(x, torch.Tensor)]
    marked = list(example)
    for position, dim in dims:
        if not 0 <= position < len(tensors):
            raise WhatIfError(f"no tensor input {position}: the model takes {len(tensors)}")
        index = tensors[position]
        if not isinstance(marked[index], torch.Tensor) or marked[index] is example[index]:
            marked[index] = same_layout_copy(example[index])
        if not -marked[index].dim() <= dim < marked[index].dim():
            raise WhatIfError(f"tensor input {position} has {marked[index].dim()} dims, no dim {dim}")
        torch._dynamo.mark_dynamic(marked[index], dim % marked[index].dim())
    return tuple(marked)


def parse_dims(text: str) -> list[tuple[int, int]]:
    """'0:0, 1:2' -> [(0, 0), (1, 2)]: tensor input : dim, as --mark-dynamic takes them."""
    pairs = []
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        position, colon, dim = part.partition(":")
        if not colon or not position.strip().isdigit() or not dim.strip().lstrip("-").isdigit():
            raise WhatIfError(f"mark-dynamic wants INPUT:DIM pairs (e.g. 0:0), not {part!r}")
        pairs.append((int(position), int(dim)))
    return pairs


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
            dynamic: bool | None = None, dynamic_dims=()) -> dict:
    """Explore on the example inputs (`dynamic_dims` marked dynamic), predict for `inputs` from the guards, then
    run them: prediction and outcome side by side (Note [Recompile what-if])."""
    predictions: list[dict] = []
    dims = tuple((int(p), int(d)) for p, d in dynamic_dims)
    example = mark_dims(tuple(spec.example_inputs), dims)
    changed = changed_dims(example, inputs, tuple((p, d % max(example_tensor(example, p).dim(), 1)) for p, d in dims))
    try:
        exploration = engine.explore(spec.model, example, backend=backend, device=device, dynamic=dynamic,
                                     dynamic_inputs=[inputs], name=spec.name,
                                     before_inputs=lambda extra: predictions.append(predict(spec.model, extra, example)))
    except Exception as error:  # noqa: BLE001 - a mark the code contradicts: Dynamo's answer, as data
        if "Constraints violated" not in str(error) and "ConstraintViolation" not in type(error).__name__:
            raise
        return _contradicted(spec, inputs, dynamic, dims, changed, error)
    record = exploration.to_json()
    contradiction = next((e for e in record.get("errors") or [] if "Constraints violated" in (e.get("message") or "")),
                         None)
    if contradiction is not None and not predictions:
        return _contradicted(spec, inputs, dynamic, dims, changed, contradiction["message"])
    run = (record.get("runs") or [{}])[0]
    recompiles = record.get("recompiles") or []
    happened = bool(run.get("new_graphs")) or bool(recompiles)
    prediction = predictions[0] if predictions else {"known": False, "reason": "the inputs never ran"}
    if prediction.get("known"):
        prediction["dynamic"] = _dynamic_words(prediction, changed, dynamic)
    return {"model": spec.name, "dynamic_dims": [list(d) for d in dims], "changed_dims": changed, "inputs": run.get("inputs") or ", ".join(spec_of(x) for x in inputs
                                                                         if isinstance(x, torch.Tensor)),
            "example_inputs": record.get("inputs"), "dynamic": dynamic, "prediction": prediction,
            "outcome": {"recompiled": happened, "new_graphs": run.get("new_graphs", 0),
                        "reasons": [r.get("reason") for r in recompiles], "verify_ok": (run.get("verify") or {}).get("ok")},
            "predicted_right": prediction.get("known") and prediction["recompile"] == happened,
            "guards": {"count": len(record.get("guards") or []), "by_kind": summarize_guards(record.get("guards") or []),
                       "all": record.get("guards") or []},
            "errors": record.get("errors") or []}


def example_tensor(example: tuple, position: int) -> torch.Tensor:
    return [x for x in example if isinstance(x, torch.Tensor)][position]


def _dim_name(change: dict, names: list[str] | None = None) -> str:
    name = (names or [])[change["input"]] if names and change["input"] < len(names) else f"input {change['input']}"
    return f"{name} dim {change['dim']}" if change["dim"] is not None else f"{name}'s rank"


def _dynamic_words(prediction: dict, changed: list[dict], dynamic: bool | None) -> str:
    """What marking dims dynamic (or dynamic=True) changes for these inputs, naming the dims."""
    names = prediction.get("input_names")
    unmarked = [c for c in changed if not c["marked"]]
    if not prediction["recompile"]:
        if changed and dynamic:
            return "no recompile: dynamic=True compiled the sizes as symbols, so the changed sizes fit"
        if changed:
            return ("no recompile: the changed sizes (" + ", ".join(_dim_name(c, names) for c in changed)
                    + ") are marked dynamic, so the compiled version takes them as symbols")
        return "no recompile either way: no size changed"
    kinds = prediction["failed_kinds"]
    if kinds != ["shape"]:
        return (f"dynamic=True would not avoid it: {', '.join(k for k in kinds if k != 'shape')} guards fail, "
                "and only sizes become symbols")
    if unmarked and all(c["dim"] is not None for c in unmarked):
        dims = ", ".join(f"{_dim_name(c, names)} ({c['from']} -> {c['to']})" for c in unmarked)
        return (f"mark_dynamic on {dims} (or dynamic=True, every size) compiles those sizes as symbols: one graph "
                "would serve these shapes too, without this recompile")
    return ("dynamic=True (or torch._dynamo.mark_dynamic on the changed dims) compiles sizes as symbols: one graph "
            "would serve these shapes too, without this recompile, unless the code specializes them")


def _contradicted(spec: ModelSpec, inputs: tuple, dynamic, dims, changed, error) -> dict:
    """The marks contradict the code: Dynamo refused to compile the example with them (Note [Recompile
    what-if])."""
    message = str(error)
    lines = [line.strip(" -") for line in message.splitlines() if "marked" in line or "Constraints" in line]
    return {"model": spec.name, "dynamic_dims": [list(d) for d in dims], "changed_dims": changed,
            "inputs": ", ".join(spec_of(x) for x in inputs if isinstance(x, torch.Tensor)),
            "example_inputs": ", ".join(spec_of(x) for x in spec.example_inputs if isinstance(x, torch.Tensor)),
            "dynamic": dynamic,
            "prediction": {"known": False, "contradiction": " ".join(lines)[:600] or message[:600],
                           "reason": "the model's code specializes a size marked dynamic, so Dynamo refuses the "
                                     "mark: " + (" ".join(lines)[:400] or message[:400])
                                     + " (torch._dynamo.maybe_mark_dynamic lets it specialize instead)"},
            "outcome": {"recompiled": None, "new_graphs": 0, "reasons": [], "verify_ok": None},
            "predicted_right": None, "guards": {"count": 0, "by_kind": {}, "all": []}, "errors": []}


def what_if_lines(result: dict) -> list[str]:
    prediction, outcome = result["prediction"], result["outcome"]
    lines = [f"What if {result['model']} got {result['inputs']} (explored on {result['example_inputs']}"
             + (", dynamic=True" if result.get("dynamic") else "") + ")?"]
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(result["guards"]["by_kind"].items(),
                                                                  key=lambda item: -item[1]))
    checks = (prediction.get("guards") or {}).get("checks")
    if checks:  # the asked version's own guard tree (Note [Guards that matter])
        kinds = ", ".join(f"{count} {kind}" for kind, count in checks.items())
        raw = (prediction.get("guards") or {}).get("raw") or []  # one check per line of the guard tree
        lines.append(f"  guards: {len(raw)} checks ({kinds}), the ones that matter:")
    else:
        lines.append(f"  guards: {result['guards']['count']} ({kinds or 'none'})")
    if result.get("dynamic_dims"):
        lines.append("  marked dynamic: " + ", ".join(f"tensor input {p} dim {d}" for p, d in result["dynamic_dims"]))
    for change in result.get("changed_dims") or []:
        lines.append(f"  changed: {_dim_name(change, prediction.get('input_names'))} {change['from']} -> {change['to']}"
                     + (" (marked dynamic)" if change["marked"] else ""))
    for line in (prediction.get("guards") or {}).get("matters") or []:
        lines.append(f"    {line}")
    if not prediction.get("known"):
        lines.append(f"  prediction: unknown ({prediction.get('reason')})")
    else:
        lines.append(f"  prediction (Dynamo's guards, before running): "
                     + ("RECOMPILE" if prediction["recompile"] else "no recompile, a cached version fits"))
        for check in prediction["checked"]:
            for failed in check["failed"]:
                lines.append(f"    version {check['entry']}: fails {failed}")
        lines.append(f"  dynamic=True: {prediction['dynamic']}")
    if outcome["recompiled"] is None:
        return lines
    lines.append(f"  outcome (ran them): " + (f"recompiled ({outcome['new_graphs']} new graph(s))" if outcome["recompiled"]
                                              else "no recompile") + f"; prediction {'right' if result['predicted_right'] else 'WRONG'}")
    return lines
