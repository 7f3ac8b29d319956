"""A compiled version's guards read from Dynamo's own guard tree, summarized by kind, the ones that matter first.

Note [Guards that matter]
Dynamo checks a few thousand things before it reuses a compiled version, but the ones a user changes are
few: each input tensor's dtype, sizes (a dynamic dim is None, a symbol), strides, requires_grad and device
(one TENSOR_MATCH per tensor), the relations between symbolic sizes (the shape environment's guards, "2 <=
L['x'].size()[0]"), and the global state (grad mode, default dtype). The rest check that the module, its
parameters and the globals it reads are the same objects (identity, types, dict keys): they fail only when the
program itself changes. So a version's guards are read from its guard tree (str of the guard manager: one
"+- KIND: code" line per guard), each check gets a kind (shape, dtype, stride, requires_grad, device, global,
module, identity, aliasing, other; a TENSOR_MATCH is one check of each of its first five), and what matters
comes first: the input tensors, the size relations, the global state; the raw lines stay for the folded dump.
"""
from __future__ import annotations

import json
import re

KIND_ORDER = ("shape", "dtype", "stride", "requires_grad", "device", "global", "module", "identity", "aliasing",
              "other")
LINE = re.compile(r"\+- (?P<kind>[A-Z_]+): (?P<code>.*)$")
TENSOR = re.compile(r"check_tensor\((?P<source>.+?), \w+, DispatchKeySet\(.*?\), torch\.(?P<dtype>\w+), "
                    r"device=(?P<device>[^,]+), requires_grad=(?P<grad>\w+), size=\[(?P<size>[^\]]*)\], "
                    r"stride=\[(?P<stride>[^\]]*)\]\)")
GLOBAL_KINDS = ("GLOBAL_STATE", "TORCH_FUNCTION_MODE_STACK", "DEFAULT_DEVICE", "GRAD_MODE",
                "DETERMINISTIC_ALGORITHMS", "TORCH_FUNCTION_STATE")
IDENTITY_KINDS = ("ID_MATCH", "TYPE_MATCH", "CLOSURE_MATCH", "FUNCTION_MATCH", "NN_MODULE", "BUILTIN_MATCH")


def _without_comment(code: str) -> str:
    """The guard's code without Dynamo's trailing `# user line` comment (a `#` inside quotes is kept)."""
    quoted, quote = False, ""
    for position, char in enumerate(code):
        if char in "'\"" and (not quoted or char == quote):
            quoted, quote = not quoted, char
        elif char == "#" and not quoted and code[position - 1:position] in (" ", "\t"):
            return code[:position].rstrip()
    return code.rstrip()


def _numbers(text: str) -> list:
    return [None if part.strip() == "None" else int(part) for part in text.split(",") if part.strip()]


def _input_source(source: str, self_names: tuple[str, ...]) -> bool:
    """A local of the call (an input), not the module (`L['self']...`) or something reached through it."""
    return source.startswith("L[") and not any(source.startswith(f"L['{name}']") for name in self_names) \
        and "_parameters" not in source and "_buffers" not in source and "._modules" not in source


def parse(tree: str, self_names: tuple[str, ...] = ("self", "fn")) -> dict:
    """str(guard_manager) -> {inputs, relations, global_state, checks (kind -> count), raw} (Note [Guards that
    matter]). `self_names`: the locals that are the module (its forward's first argument; `fn` for Dynamo's
    wrapper of a built-in module)."""
    inputs, relations, raw = [], [], []
    checks: dict[str, int] = {}
    global_state: dict = {}

    def count(kind: str, number: int = 1) -> None:
        checks[kind] = checks.get(kind, 0) + number

    for line in tree.splitlines():
        match = LINE.search(line)
        if match is None:
            continue
        kind, code = match["kind"], _without_comment(match["code"])
        raw.append(f"{kind}: {code}")
        tensor = TENSOR.search(code) if kind == "TENSOR_MATCH" else None
        if tensor is not None:
            if _input_source(tensor["source"], self_names):
                inputs.append({"source": tensor["source"], "dtype": tensor["dtype"], "size": _numbers(tensor["size"]),
                               "stride": _numbers(tensor["stride"]), "requires_grad": tensor["grad"] == "True",
                               "device": tensor["device"]})
                for facet in ("shape", "dtype", "stride", "requires_grad", "device"):
                    count(facet)
            else:
                count("module")
        elif kind == "LAMBDA_GUARD" and ".size()" in code or kind == "SHAPE_ENV":
            relations.append(code)
            count("shape")
        elif kind in GLOBAL_KINDS or kind == "LAMBDA_GUARD":
            count("global")
            if kind == "GLOBAL_STATE" and " against " in code:
                try:
                    global_state = json.loads(code.split(" against ", 1)[1])
                except ValueError:
                    pass
        elif kind == "NO_TENSOR_ALIASING":
            count("aliasing")
        elif kind == "DIMENSION_DYNAMIC_MARKING_GUARD":  # which dims were marked dynamic: a shape fact
            subject = re.search(r"L\[[^(),]*?\](?:\[\d+\])?", code)
            count("shape" if subject and _input_source(subject.group(0), self_names) else "module")
        elif any(f"L['{name}']" in code for name in self_names):
            count("module")
        elif kind in IDENTITY_KINDS or kind.startswith(("DICT", "DUAL_LEVEL", "HASATTR", "LENGTH", "EQUALS")):
            count("identity")
        else:
            count("other")
    ordered = {kind: checks[kind] for kind in KIND_ORDER if checks.get(kind)}
    return {"inputs": inputs, "relations": relations, "global_state": _global_words(global_state),
            "checks": ordered, "raw": raw}


def _global_words(state: dict) -> list[str]:
    """The global-state facts a user may change between calls, in words."""
    words = []
    if "grad_mode" in state:
        words.append(f"grad mode {'on' if state['grad_mode'] else 'off (no_grad)'}")
    if "deterministic_algorithms" in state:
        words.append(f"deterministic algorithms {'on' if state['deterministic_algorithms'] else 'off'}")
    if "num_threads" in state:
        words.append(f"{state['num_threads']} threads")
    if state.get("allow_tf32"):
        words.append("TF32 allowed")
    return words


def matters(summary: dict) -> list[str]:
    """The guards that matter, first to last, one line each (Note [Guards that matter])."""
    lines = []
    for tensor in summary["inputs"]:
        sizes = ", ".join("dynamic" if s is None else str(s) for s in tensor["size"])
        lines.append(f"{tensor['source']}: {tensor['dtype']}[{sizes}], strides {tensor['stride']}, "
                     f"requires_grad={tensor['requires_grad']}")
    lines += [f"sizes: {relation}" for relation in summary["relations"]]
    if summary["global_state"]:
        lines.append("global state: " + ", ".join(summary["global_state"]))
    module = summary["checks"].get("module", 0) + summary["checks"].get("identity", 0)
    if module:
        lines.append(f"{module} checks that the module, its parameters and the globals it reads are the same "
                     "objects (they fail only when the program changes)")
    return lines


def version_guards(entry, self_names: tuple[str, ...]) -> dict:
    """One cache entry's guards, parsed; best effort (a guard tree Dynamo cannot print gives an empty summary)."""
    try:
        tree = str(entry.guard_manager)
    except Exception:  # noqa: BLE001 - the tree is for reading; the prediction does not depend on it
        tree = ""
    return parse(tree, self_names)
