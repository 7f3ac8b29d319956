"""Turn one graph's compiler artifacts into its typed GraphRecord (FX, ATen, IR, fusion, memory, kernels, code).

Every value is converted to record data here, where its meaning is known (Note [Strict record] in record.py)."""
from __future__ import annotations

import dataclasses
import linecache
import re

import sympy
import torch

from engine.capture import fx_origin_names, user_source_line
from engine.ir.handlers import IRPrinter
from engine.ir.indexing import loop_var
from engine.ir.nodes import Fallback, MultiOutput, Pointwise, Reduction, Scan, Scatter
from engine.ir.ops import ops, use_handler
from engine.record import (AtenNode, CodeRecord, FusedOp, FusionDecision, FusionRecord, FxNode, GraphRecord, IRNode,
                           IRRecord, KernelRecord, MemoryBuffer, MemoryRecord, ProvenanceLine, RewriteRecord,
                           SourceLine, TemplateChoice)


def _meta(node: torch.fx.Node) -> dict:
    val = node.meta.get("val", node.meta.get("example_value"))
    if isinstance(val, torch.Tensor):
        return {"shape": [str(s) for s in val.shape], "dtype": _dtype(val.dtype)}
    if isinstance(val, (tuple, list)):
        return {"shape": [[str(s) for s in v.shape] if isinstance(v, torch.Tensor) else str(v) for v in val],
                "dtype": "tuple"}
    return {"shape": [], "dtype": type(val).__name__ if val is not None else ""}


def _source(node: torch.fx.Node) -> SourceLine | None:
    where = user_source_line(node.meta.get("stack_trace"))
    if where is None:
        return None
    filename, lineno = where
    return SourceLine(filename, lineno, linecache.getline(filename, lineno).strip())


def _target(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    return getattr(target, "__qualname__", None) or str(target)


def _node_fields(node: torch.fx.Node) -> dict:
    return {
        "name": node.name, "op": node.op, "target": _target(node) if node.op != "placeholder" else str(node.target),
        "args": [a.name for a in node.all_input_nodes], **_meta(node), "source": _source(node),
        "module_path": _module_path(node),
    }


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    sources = [str(value[0]) for value in stack.values()]
    root = _ROOT.match(sources[0].strip())
    path = ""
    for source in sources:  # the deepest module under the model's root, then anything nested from elsewhere
        text = module_path_text(source)
        if root is None or source.strip().startswith(root.group(0).rstrip(".")):
            path = text
        elif text:  # a module held outside the model (a library's wrapped function): named inside its caller
            path = f"{path}.{text.split('.')[-1]}" if path else text
    return path


_ROOT = re.compile(r"^[LG]\[['\"][^'\"]+['\"]\]\.?")  # Dynamo's source of the root module: L['self'], G['net']
_GETATTR = re.compile(r"getattr\(([^()]*?), ['\"]([^'\"]+)['\"]\)")
_ITEM = re.compile(r"(?:(?:^|\.)_modules)?\[['\"]?([^'\"\]]+)['\"]?\]")


def module_path_text(source: str) -> str:
    """Dynamo's source of a module -> its path inside the model, as named_modules() spells it:
    "G['net'].model.layers[3].mlp" and "L['self']._modules['layers']._modules['3'].mlp" -> "layers.3.mlp" under
    the root module. A model wrapped in a function (its module a global) or a container reads like the module it
    wraps: every path of one graph has the same root, which would make the first level of the graph's folding
    a single box."""
    path = source.strip()
    while _GETATTR.search(path):
        path = _GETATTR.sub(r"\1.\2", path)
    path = _ITEM.sub(r".\1", _ROOT.sub("", path))
    return ".".join(part for part in path.split(".") if part)


def fx_nodes(gm: torch.fx.GraphModule) -> list[FxNode]:
    return [FxNode(**_node_fields(n)) for n in gm.graph.nodes]


def aten_nodes(aten_gm: torch.fx.GraphModule, fx_gm: torch.fx.GraphModule) -> list[AtenNode]:
    fx_names = {n.name for n in fx_gm.graph.nodes}
    return [AtenNode(**_node_fields(node), fx_origins=fx_origin_names(node, fx_names)) for node in aten_gm.graph.nodes]


def add_rewrites(record: GraphRecord, aten, fx_gm) -> None:
    """The rewrite stage's matches and refusals (pipeline.AtenGraph.rewrites) and, when one applied, the graph
    before them (Note [Rewrite stage])."""
    where = "forward" if aten.before_joint else aten.phase
    for outcome in aten.rewrites:
        record.rewrites.append(RewriteRecord(
            rewrite=outcome.rewrite, applied=outcome.applied, nodes=list(outcome.nodes), reason=outcome.reason,
            replacement=list(outcome.replacement), replacement_text=outcome.replacement_text,
            fx_origins=list(outcome.fx_origins), where=where,
            source=[SourceLine(filename, lineno, linecache.getline(filename, lineno).strip())
                    for filename, lineno in outcome.sources]))
    if aten.before is not None:
        record.aten_before = aten_nodes(aten.before, fx_gm)


def ir_text(node, buffers) -> list[str]:
    """The loop body of an IR node as lines of readable text."""
    printer = IRPrinter(buffers)
    index = [loop_var("i", d) for d in range(len(node.size))]
    with use_handler(printer):
        if isinstance(node, Reduction):
            rindex = [loop_var("r", d) for d in range(len(node.reduction_size))]
            value = node.inner_fn(index, rindex)
            header = (f"{node.name} = reduce_{node.reduction_type} over r{tuple(rindex)} in "
                      f"{_sizes(node.reduction_size)}, for i{tuple(index)} in {_sizes(node.size)}:")
        elif isinstance(node, Pointwise):
            value = node.inner_fn(index)
            header = f"{node.name}[{', '.join(map(str, index))}] for i in {_sizes(node.size)}:"
        elif isinstance(node, Scan):  # Note [Scans]: along the last dim
            value = node.inner_fn(index)
            header = (f"{node.name} = scan_{node.scan_type} along i{len(index) - 1} of the values below, "
                      f"for i in {_sizes(node.size)}:")
        elif isinstance(node, Scatter):  # Note [Accumulating stores]: a loop over the source, adding
            index = [loop_var("i", d) for d in range(len(node.ranges))]
            target, value, keep = node.inner_fn(index)
            ops.store_add(node.name, target, value, keep)
            header = f"{node.name} = zeros{_sizes(node.size)}; for i in {_sizes(node.ranges)}:"
            return [header] + ["    " + line for line in printer.lines]
        else:
            return [_library_text(node)]
    return [header] + ["    " + line for line in printer.lines] + [f"    return {value}"]


def _library_text(node) -> str:
    if isinstance(node, MultiOutput):
        return f"{node.name} = {node.parent}[{node.index}]"
    args = ", ".join(_arg_text(a) for a in node.args)
    label = "fallback (eager)" if isinstance(node, Fallback) else "extern"
    return f"{node.name} = {label} {node.target}({args})"


def _arg_text(arg) -> str:
    name = getattr(arg, "name", None)
    if name is not None and hasattr(arg, "stride"):
        return name
    if isinstance(arg, (list, tuple)):
        return "[" + ", ".join(_arg_text(a) for a in arg) + "]"
    return str(arg)


def _sizes(sizes) -> str:
    return "[" + ", ".join(str(s) for s in sizes) + "]"


def _bytes(node, hints) -> int:
    numel = sympy.sympify(node.numel).subs(hints)
    return int(numel) * node.dtype.itemsize if numel.is_Integer else 0


def _fused_op(node, aten_by_name: dict) -> FusedOp:
    aten = [a for a in node.origins if a in aten_by_name]
    return FusedOp(ir_node=node.name, aten_origins=aten, ops=[aten_by_name[a].target for a in aten],
                   fx_origins=list(dict.fromkeys(f for a in aten for f in aten_by_name[a].fx_origins)))


def _kernel_lines(line_kernel: list) -> dict[str, list[int]]:
    """Each kernel's [first, last] line in the generated module (from the module's per-line kernel names)."""
    lines: dict[str, list[int]] = {}
    for number, item in enumerate(line_kernel, start=1):
        if item is not None:
            lines.setdefault(item[0], [number, number])[1] = number
    return lines


def fill_graph_record(record: GraphRecord, fx_gm, aten_gm, compiled, hints: dict) -> None:
    lowered, scheduled, memory, module = compiled.lowered, compiled.schedule, compiled.memory, compiled.module
    record.cache_hit = compiled.cache_hit
    record.aten = aten_nodes(aten_gm, fx_gm)
    aten_by_name = {n.name: n for n in record.aten}
    fx_by_name = {n.name: n for n in record.fx}

    def fx_of(aten_names) -> list[str]:
        return list(dict.fromkeys(f for a in aten_names if a in aten_by_name for f in aten_by_name[a].fx_origins))

    buffers = lowered.buffers
    ir_nodes = []
    for node in lowered.nodes:
        entry = IRNode(name=node.name, kind=node.kind, size=[str(s) for s in node.size], dtype=_dtype(node.dtype),
                       aten_origins=list(node.origins), text=ir_text(node, buffers))
        if isinstance(node, Reduction):
            entry.reduction_size = [str(s) for s in node.reduction_size]
            entry.reduction_type = node.reduction_type
        if isinstance(node, Fallback):
            entry.reason = node.reason
        ir_nodes.append(entry)
    record.ir = IRRecord(nodes=ir_nodes, text="\n\n".join("\n".join(n.text) for n in ir_nodes),
                         inputs=[b.name for b in lowered.inputs if b is not None])
    record.fusion = FusionRecord(decisions=[FusionDecision(**vars(d)) for d in scheduled.decisions],
                                 unused=list(scheduled.unused),  # Note [Unused nodes]: computed by no kernel
                                 # per matmul: template or library, and why
                                 templates=[TemplateChoice.from_json(choice) for choice in scheduled.templates])
    record.memory = MemoryRecord(peak_bytes=int(memory.peak_bytes), unfused_peak_bytes=int(memory.unfused_peak_bytes),
                                 buffers=[MemoryBuffer(**vars(life)) for life in memory.lives],
                                 layout=dict(lowered.layout))
    generated = {k.name: k for k in module.kernels}
    line_ranges = _kernel_lines(module.line_kernel)
    for kernel in scheduled.kernels:
        aten_names = list(dict.fromkeys(o for n in kernel.nodes for o in n.origins))
        source = generated.get(kernel.name)
        entry = KernelRecord(
            name=kernel.name, kind=kernel.kind, ir_nodes=[n.name for n in kernel.nodes], aten_origins=aten_names,
            fx_origins=fx_of(aten_names), ops=[aten_by_name[a].target for a in aten_names if a in aten_by_name],
            reads=list(kernel.reads), writes=list(kernel.stored),
            bytes=sum(_bytes(buffers[n], hints) for n in kernel.reads + kernel.stored if n in buffers),
            source=source.source if source else "\n".join(ir_text(kernel.nodes[0], buffers)),
            lines=line_ranges.get(kernel.name, []))
        if source is not None and hasattr(source, "record_fields"):
            for key, value in source.record_fields().items():  # backend extras, e.g. Triton's launch config
                if key not in {f.name for f in dataclasses.fields(entry)}:
                    raise TypeError(f"a backend's record_fields() gave {key!r}, which KernelRecord does not have: "
                                    "add it to engine/record.py (and regenerate engine/record_schema.json)")
                setattr(entry, key, value)
        if entry.template is not None:  # the GEMM template's fused epilogue, op by op (Note [GEMM templates])
            entry.template.fused_ops = [_fused_op(buffers[n], aten_by_name) for n in entry.template.epilogue]
        if kernel.kind == "fallback":
            entry.reason = "; ".join(getattr(n, "reason", "") for n in kernel.nodes if getattr(n, "reason", ""))
        record.kernels.append(entry)
    provenance = []
    for number, item in enumerate(module.line_kernel, start=1):
        if item is None or item[1] is None:
            continue
        kernel_name, tag = item
        node = buffers.get(tag.ir_node)
        aten_names = list(node.origins) if node is not None else []
        fx_names = fx_of(aten_names)
        sources = [aten_by_name[a].source for a in aten_names if a in aten_by_name] + \
            [fx_by_name[f].source for f in fx_names if f in fx_by_name]
        user_lines = list(dict.fromkeys(src.lineno for src in sources if src))
        provenance.append(ProvenanceLine(line=number, kernel=kernel_name, ir_node=tag.ir_node, aten_nodes=aten_names,
                                         fx_nodes=fx_names, user_lines=user_lines))
    first_kernel_line = min((first for first, _ in line_ranges.values()), default=len(module.line_kernel) + 1)
    record.code = CodeRecord(language=module.language, source=module.source, wrapper=compiled.wrapper.source,
                             provenance=provenance, prelude_lines=max(first_kernel_line - 1, 0))


def _dtype(dtype) -> str:
    return str(dtype).replace("torch.", "")
