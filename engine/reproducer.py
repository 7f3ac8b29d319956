"""What a standalone reproducer of one generated kernel needs, as record data (KernelRecord.repro).

Note [Kernel reproducers]
A reproducer is one Python file that runs one generated kernel away from the model: the kernel's source,
loaded by the project's own loader (g++ through engine.runtime.build, Triton through triton_build.load_source), its
arguments with the recorded sizes, strides and dtypes (random values from a seed), the eager reference computed
by the very ATen ops the kernel was lowered from, a check and a timing loop. The file is written from the
record (engine/tools/repro_file.py), so the app, the CLI and a saved record.json all write the same file; what
only the compiler knows (buffer layouts, launch settings, which ATen nodes hold the kernel's inputs) is
gathered here, where the kernel is compiled.

The reference is a slice of the graph's ATen graph: the kernel's outputs' ATen nodes, back to the nodes whose
values the kernel reads. Every buffer the kernel reads must be the whole value of one ATen node (same sizes and
dtype): then the reproducer fills the node's value at random, lays it out in the buffer's strides for the
kernel, and runs the slice on it for the reference. A kernel that reads a part-result (a split reduction's
partial sums) or a value no ATen node holds gets no reference, and the record says why: its reproducer still
runs and times the kernel, and says that nothing was checked. An output that is a lowering's intermediate (no
ATen node of its own) is left unchecked, with the reason, while the others are checked.
"""
from __future__ import annotations

import sympy
import torch
import torch.fx

from engine.ir.nodes import InputBuffer

GENERATED_KINDS = ("pointwise", "reduction")  # kernels whose whole launch is a plain call of generated code


def _int(expr, hints: dict) -> int:
    value = sympy.sympify(expr).subs(hints)
    if not value.is_Integer:
        raise ValueError(f"size {expr} has no value for these inputs")
    return int(value)


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _concrete(value):
    """A SymInt (dynamic shapes) as the int it has for the example inputs."""
    if isinstance(value, torch.SymInt):
        node = value.node
        hint = getattr(node, "hint", None)
        return int(hint if hint is not None else node.shape_env.size_hint(node.expr))
    return value


def _sizes(values, hints) -> list[int]:
    return [_int(v, hints) for v in values]


def _value_node(buffer, nodes: dict, hints: dict):
    """The ATen node whose whole value `buffer` holds (same sizes and dtype), or None."""
    size = _sizes(buffer.size, hints)
    matches = []
    for origin in buffer.origins:
        node = nodes.get(origin)
        if node is None:
            continue
        val = node.meta.get("val")
        candidates = [node] if isinstance(val, torch.Tensor) else \
            [user for user in node.users if isinstance(user.meta.get("val"), torch.Tensor)]
        for candidate in candidates:
            value = candidate.meta["val"]
            if [_concrete(s) for s in value.shape] == size and value.dtype == buffer.dtype:
                matches.append(candidate)
    matches = list(dict.fromkeys(matches))
    return matches[-1] if len(matches) == 1 else None


def _tensor_spec(name: str, buffer, hints: dict) -> dict:
    return {"name": name, "shape": _sizes(buffer.size, hints), "stride": _sizes(buffer.stride, hints),
            "dtype": _dtype(buffer.dtype)}


def _reference(kernel, buffers: dict, aten_gm: torch.fx.GraphModule, hints: dict) -> dict:
    """The ATen slice that computes the kernel's outputs from what it reads (Note [Kernel reproducers])."""
    nodes = {n.name: n for n in aten_gm.graph.nodes}
    with_buffer = {o for b in buffers.values() for o in b.origins}  # ATen nodes some buffer computes
    own = {o for node in kernel.nodes for o in node.origins}
    inputs: dict[torch.fx.Node, list[str]] = {}
    for name in kernel.reads:
        node = _value_node(buffers[name], nodes, hints)
        if node is None:
            return {"error": f"it reads {name}, which holds no whole ATen value (a part-result or an intermediate "
                             f"of {', '.join(buffers[name].origins) or 'nothing'}), so no eager slice can feed it"}
        inputs.setdefault(node, []).append(name)
    outputs, unchecked = [], []
    for name in kernel.stored:
        node = _value_node(buffers[name], nodes, hints)
        if node is None or node in inputs:
            unchecked.append({"buffer": name, "why": "an intermediate value of its lowering, with no ATen node "
                                                     "of its own"})
        else:
            outputs.append((name, node))
    if not outputs:
        return {"error": "none of its outputs is the whole value of an ATen node", "unchecked": unchecked}
    needed: list[torch.fx.Node] = []
    stack = [node for _, node in outputs]
    seen: set = set()
    while stack:
        node = stack.pop()
        if node in seen or node in inputs:
            continue
        seen.add(node)
        if node.op != "call_function" or (node.name in with_buffer and node.name not in own):
            return {"error": f"its ATen slice needs {node.name}, which the kernel does not read"}
        needed.append(node)
        stack.extend(a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)
                     or isinstance(a.meta.get("val"), (tuple, list)))
    order = {n: i for i, n in enumerate(aten_gm.graph.nodes)}
    graph = torch.fx.Graph()
    env: dict = {}
    placeholders = []
    for number, node in enumerate(sorted(inputs, key=order.get)):
        env[node] = graph.placeholder(f"in{number}_{node.name}")
        value = node.meta["val"]
        placeholders.append({"node": node.name, "buffers": inputs[node], "shape": [_concrete(s) for s in value.shape],
                             "dtype": _dtype(value.dtype)})
    for node in sorted(needed, key=order.get):
        env[node] = graph.node_copy(node, lambda a: env[a] if a in env else _concrete(a.meta.get("val")))
    graph.output(tuple(env[node] for _, node in outputs))
    code = graph.python_code("self")
    names = sorted(code.globals)
    return {"code": code.src.strip("\n"), "globals": names, "inputs": placeholders,
            "outputs": [{"buffer": name, "node": node.name} for name, node in outputs], "unchecked": unchecked}


def kernel_repro(kernel, generated, module, buffers: dict, aten_gm, hints: dict, device: str) -> dict:
    """KernelRecord.repro for one scheduled kernel and its generated code (Note [Kernel reproducers])."""
    if kernel.kind not in GENERATED_KINDS or generated is None:
        what = {"template": "a GEMM template launches through its tile runner",
                "extern": "a library call", "fallback": "an eager ATen call"}.get(kernel.kind, kernel.kind)
        return {"unsupported": f"no reproducer for this kernel: {what}, not one plain generated kernel"}
    written = set(kernel.stored)
    args = []
    for name in generated.args:
        spec = _tensor_spec(name, buffers[name], hints)
        spec["read"], spec["written"] = name in kernel.reads, name in written
        spec["zeroed"] = bool(getattr(generated, "accumulates", False) or getattr(kernel, "accumulates", False)) \
            and name in written
        args.append(spec)
    symbols = {str(k): v for k, v in hints.items()}
    data = {"language": module.language, "device": str(device), "args": args,
            "size_args": [{"name": s, "value": int(symbols[s])} for s in generated.size_args],
            "inputs_are_graph_inputs": [n for n in kernel.reads if isinstance(buffers[n], InputBuffer)]}
    if module.language == "triton":
        config = generated.config.kwargs()
        grid = eval(generated.grid_x_text(), {"__builtins__": {}}, dict(symbols))  # noqa: S307 - our own text
        data["launch"] = {"grid": [int(grid), 1, 1], "num_warps": int(config["num_warps"]),
                          "constexprs": {k: int(config[k]) for k in ("XBLOCK", "YBLOCK", "RBLOCK") if k in config},
                          "interpret": bool(module.interpreter)}
    try:
        data["reference"] = _reference(kernel, buffers, aten_gm, hints)
    except Exception as error:  # noqa: BLE001 - a slice we cannot cut is said, never fatal
        data["reference"] = {"error": f"{type(error).__name__}: {error}"}
    return data


def fill_repro(graph_record, compiled, aten_gm, hints: dict) -> None:
    """KernelRecord.repro of every kernel of one compiled graph."""
    generated = {k.name: k for k in compiled.module.kernels}
    by_name = {k.name: k for k in graph_record.kernels}
    for kernel in compiled.schedule.kernels:
        entry = by_name.get(kernel.name)
        if entry is None:
            continue
        try:
            entry.repro = kernel_repro(kernel, generated.get(kernel.name), compiled.module, compiled.lowered.buffers,
                                       aten_gm, hints, compiled.lowered.device)
        except Exception as error:  # noqa: BLE001 - failures as data: the record says why there is no reproducer
            entry.repro = {"unsupported": f"no reproducer: {type(error).__name__}: {error}"}
