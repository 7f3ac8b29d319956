"""The C++ GEMM template: a blocked, vectorizable GEMM whose epilogue is printed from the IR by CppPrinter
(the printer of the pointwise kernels), with the tile's accumulator as the value of the matmul's buffer.

Note [C++ GEMM template]
The output is cut into tiles of tile_m x tile_n (runtime arguments, so max-autotune can try several with one
build); OpenMP threads take whole tiles. Each tile is accumulated in float32 in a stack array, by one of two
inner loops chosen from the operands' strides, so that the innermost loop walks contiguous memory and
vectorizes:
  dot   B is contiguous along K (a Linear's weight, x @ w.t()): out[i, j] = dot(A row i, B column j), in
        blocks of 2 rows x 4 columns (eight independent accumulators; each loaded value feeds 2 or 4 of them)
  axpy  otherwise (B contiguous along N: x @ w, bmm, a 1x1 convolution): out[i, :] += A[i, k] * B[k, :]
Then the epilogue loop walks the tile's rows (row-invariant values hoisted) and columns (simd).
acc_from_memory runs only the epilogue, on the tile the library call wrote (Note [Template or library at run
time] in gemm_launch.py). Sizes and strides are literals: the template is generated per shape.
"""
from __future__ import annotations

import torch

from engine.codegen.cpp_printer import STORAGE_TYPES, CppPrinter
from engine.codegen.kernel_core import Source
from engine.codegen.gemm_launch import TemplateKernel
from engine.codegen.provenance import LineTag
from engine.ir.handlers import Var
from engine.ir.nodes import Template
from engine.ir.ops import ops, use_handler
from engine.schedule.fusion import Kernel
from engine.schedule.templates import GemmSpec, TemplatePlan, accumulator_read, epilogue_plan

MAX_TILE = 64  # the stack tile is MAX_TILE x MAX_TILE floats (16 KiB per thread)
PARALLEL_MIN_FLOPS = 1 << 18
LOAD = {torch.float32: "{}", torch.float16: "gb_half_to_float({})", torch.bfloat16: "gb_bf16_to_float({})"}
ROUND = {torch.float32: "{}", torch.float16: "gb_round_half({})", torch.bfloat16: "gb_round_bf16({})"}


def inner_form(spec: GemmSpec) -> str:
    return "dot" if spec.b.strides[1] == 1 and spec.k > 1 and spec.b.strides[2] != 1 else "axpy"


def tile_configs(spec: GemmSpec) -> list[dict]:
    """The heuristic's tile first: dot takes every row of a skinny GEMM (each B column is read once) and 16
    columns; axpy 32 rows of 64 columns (a row of the tile is 4-8 vector registers)."""
    def fit(m, n):
        return {"tile_m": max(1, min(m, spec.m, MAX_TILE)), "tile_n": max(1, min(n, spec.n, MAX_TILE))}

    first = fit(MAX_TILE if spec.m <= MAX_TILE else 32, 16) if inner_form(spec) == "dot" else fit(32, 64)
    configs = [first]
    for m, n in ((8, 64), (32, 16), (64, 32), (16, 64)):
        if fit(m, n) not in configs:
            configs.append(fit(m, n))
    return configs


class CppTemplateKernel(TemplateKernel):
    def record_fields(self) -> dict:
        return {"template": {
            "name": "cpp_gemm", "spec": self.spec.record(), "config": tile_configs(self.spec)[0],
            "inner_loop": inner_form(self.spec), "epilogue": list(self.epilogue), "reason": self.template.reason,
            "candidates": tile_configs(self.spec), "autotune": self.tuning}}


class EpiloguePrinter(CppPrinter):
    def __init__(self, plan: TemplatePlan, buffers: dict, template: Template):
        super().__init__(plan, buffers, plan.r, {plan.x: plan.rows, plan.r: plan.red})
        self.template = template
        self.accumulator = Var("acc_value", template.dtype, True)

    def _load_memory(self, name, index):
        if name == self.template.name:
            accumulator_read(self.plan, self.template, index)
            return self.accumulator
        return super()._load_memory(name, index)


def _at(operand, b: str, i: str, j: str) -> str:
    s = operand.strides
    return f"{operand.name}[{operand.offset} + {b} * {s[0]} + ({i}) * {s[1]} + ({j}) * {s[2]}]"


def _load(dtype, text: str) -> str:
    return LOAD[dtype].format(text)


def _dot_block(spec: GemmSpec, out: Source, rows: int, cols: int):
    """rows x cols dot products at once: rows*cols independent accumulators, each A and B element loaded once
    per block (the register blocking that keeps the vector units busy instead of waiting on one add chain)."""
    a, b, dt = spec.a, spec.b, spec.dtype
    names = [f"s{r}_{c}" for r in range(rows) for c in range(cols)]
    out.add(f"float {', '.join(f'{n} = 0.0f' for n in names)};")
    with out.block(f"for (int64_t k = 0; k < {spec.k}; ++k)", f"#pragma omp simd reduction(+:{','.join(names)})"):
        for r in range(rows):
            out.add(f"const float a{r} = {_load(dt, _at(a, 'b', f'm0 + i + {r}', 'k'))};")
        for c in range(cols):
            out.add(f"const float b{c} = {_load(dt, _at(b, 'b', 'k', f'n0 + j + {c}'))};")
        for r in range(rows):
            out.add(" ".join(f"s{r}_{c} += a{r} * b{c};" for c in range(cols)))
    for r in range(rows):
        out.add(" ".join(f"acc[i + {r}][j + {c}] = s{r}_{c};" for c in range(cols)))


def _dot_loop(spec: GemmSpec, out: Source):
    """Note [C++ GEMM template]'s dot form: 2x4 blocks of the tile, then the ragged rows and columns."""
    out.add("int64_t i = 0;")
    for rows, condition in ((2, "i + 2 <= mb"), (1, "i < mb")):
        with out.block(f"for (; {condition}; i += {rows})"):
            out.add("int64_t j = 0;")
            for cols, column_condition in ((4, "j + 4 <= nb"), (1, "j < nb")):
                with out.block(f"for (; {column_condition}; j += {cols})"):
                    _dot_block(spec, out, rows, cols)


def _axpy_loop(spec: GemmSpec, out: Source):
    a, b, dt = spec.a, spec.b, spec.dtype
    out.add("for (int64_t i = 0; i < mb; ++i) for (int64_t j = 0; j < nb; ++j) acc[i][j] = 0.0f;")
    with out.block(f"for (int64_t k = 0; k < {spec.k}; ++k)"):
        with out.block("for (int64_t i = 0; i < mb; ++i)"):
            out.add(f"const float av = {_load(dt, _at(a, 'b', 'm0 + i', 'k'))};")
            with out.block("for (int64_t j = 0; j < nb; ++j)", "#pragma omp simd"):
                out.add(f"acc[i][j] += av * {_load(dt, _at(b, 'b', 'k', 'n0 + j'))};")


def generate_template(kernel: Kernel, buffers: dict) -> CppTemplateKernel:
    template, epilogue = kernel.nodes[0], kernel.nodes[1:]
    spec = template.spec
    plan = epilogue_plan(template, epilogue)
    printer = EpiloguePrinter(plan, buffers, template)
    with use_handler(printer):
        for node in [n for n in kernel.nodes if n.name in kernel.stored]:
            printer.tag = LineTag(node.name)
            index = plan.index(node)
            ops.store(node.name, index, printer.accumulator if node is template else node.inner_fn(index))
    stores, store_tags = [line for line, _ in printer.stores], [tag for _, tag in printer.stores]
    hoisted, hoisted_tags = printer.take_hoisted()
    operands = [spec.a.name, spec.b.name] + ([spec.bias.name] if spec.bias else [])
    body_text = "\n".join(printer.lines + hoisted)
    loaded = [r for r in kernel.reads if f"{r}[" in body_text]
    inputs = list(dict.fromkeys(operands + loaded))
    inputs = [n for n in inputs if n not in kernel.stored]
    args = inputs + list(kernel.stored)
    params = [f"const {STORAGE_TYPES[buffers[n].dtype]}* __restrict__ {n}" for n in inputs]
    params += [f"{STORAGE_TYPES[buffers[n].dtype]}* __restrict__ {n}" for n in kernel.stored]
    params += [f"const {STORAGE_TYPES[spec.dtype]}* __restrict__ acc_in", "const int64_t acc_from_memory",
               "const int64_t tile_m", "const int64_t tile_n"]
    tag = LineTag(template.name)
    out = Source()
    out.add(f'extern "C" void {kernel.name}({", ".join(params)})', tag)
    with out.block():
        out.add(f"// GEMM template: {spec.op} {spec.shape_text()}, {inner_form(spec)} inner loop, epilogue: "
                f"{', '.join(n.name for n in epilogue) or 'none'}", tag)
        out.add(f"const int64_t tiles_m = ({spec.m} + tile_m - 1) / tile_m;")
        out.add(f"const int64_t tiles_n = ({spec.n} + tile_n - 1) / tile_n;")
        parallel = "#pragma omp parallel for" if spec.rows * spec.n * spec.k >= PARALLEL_MIN_FLOPS else ""
        with out.block(f"for (int64_t tile = 0; tile < {spec.batch} * tiles_m * tiles_n; ++tile)", parallel):
            out.add("const int64_t b = tile / (tiles_m * tiles_n);")
            out.add("const int64_t m0 = tile / tiles_n % tiles_m * tile_m;")
            out.add("const int64_t n0 = tile % tiles_n * tile_n;")
            out.add(f"const int64_t mb = std::min<int64_t>(tile_m, {spec.m} - m0);")
            out.add(f"const int64_t nb = std::min<int64_t>(tile_n, {spec.n} - n0);")
            out.add(f"alignas(64) float acc[{MAX_TILE}][{MAX_TILE}];")
            with out.block("if (acc_from_memory)"):
                out.add("for (int64_t i = 0; i < mb; ++i) for (int64_t j = 0; j < nb; ++j) "
                        f"acc[i][j] = {_load(spec.dtype, f'acc_in[(b * {spec.m} + m0 + i) * {spec.n} + n0 + j]')};")
            with out.block("else"):
                (_dot_loop if inner_form(spec) == "dot" else _axpy_loop)(spec, out)
                _scale_and_bias(spec, out)
            with out.block("for (int64_t i = 0; i < mb; ++i)"):
                out.add(f"const int64_t x0 = b * {spec.m} + m0 + i;")
                out.extend(hoisted, hoisted_tags)
                with out.block("for (int64_t j = 0; j < nb; ++j)", "#pragma omp simd"):
                    out.add("const int64_t r0 = n0 + j;")
                    out.add(f"const float acc_value = {ROUND[spec.dtype].format('acc[i][j]')};", tag)
                    out.extend(printer.lines, printer.line_tags)
                    out.extend(stores, store_tags)
    return CppTemplateKernel(kernel.name, "\n".join(out.lines), args, [], template, [n.name for n in epilogue],
                             out.tags)


def _scale_and_bias(spec: GemmSpec, out: Source):
    if spec.alpha == 1.0 and spec.bias is None:
        return
    value = "acc[i][j]" if spec.alpha == 1.0 else f"{spec.alpha!r}f * acc[i][j]"
    if spec.bias is not None:
        bias = _load(spec.dtype, _at(spec.bias, "b", "m0 + i", "n0 + j"))
        value += f" + {bias}" if spec.beta == 1.0 else f" + {spec.beta!r}f * {bias}"
    out.add(f"for (int64_t i = 0; i < mb; ++i) for (int64_t j = 0; j < nb; ++j) acc[i][j] = {value};")


class CppTemplateRunner:
    """gemm_launch's backend for one C++ template kernel (a ctypes function)."""
    name = "cpp"

    def __init__(self, kernel: CppTemplateKernel, function):
        from engine.build import compiler

        self.kernel, self.function, self.version = kernel, function, compiler()

    def configs(self) -> list[dict]:
        return tile_configs(self.kernel.spec)

    def run(self, tensors, config: dict, acc) -> None:
        pointers = [t.data_ptr() for t in tensors]
        acc_pointer = acc.data_ptr() if acc is not None else pointers[0]
        self.function(*pointers, acc_pointer, int(acc is not None), config["tile_m"], config["tile_n"])
