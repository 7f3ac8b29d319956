"""The Triton GEMM template: a tiled tl.dot kernel whose epilogue is printed from the IR.

The template owns the loop structure (Note [Triton GEMM template]); the epilogue — every fused consumer of
the output tile — is written by the same TritonPrinter the pointwise kernels use, with the accumulator tile
as the value of the matmul's buffer (Note [Template epilogue loads] in schedule/templates.py).

Note [Triton GEMM template]
  programs   one per (BLOCK_M x BLOCK_N output tile, batch), on one grid axis (batch-major); program ids
             walk tiles in groups of GROUP_M rows of tiles, so consecutive programs share B columns and A
             rows in L2
  K loop     A and B tiles loaded at rows `rm % M`, columns `rn % N` (always in bounds, so only K needs a mask,
             and only when BLOCK_K does not divide K: EVEN_K), multiplied with tl.dot into a float32 tile
  epilogue   alpha/beta and the bias of addmm/baddbmm, the rounding to the output dtype that eager's
             library call does, then the fused consumers; stores masked on the ragged edges
  dtypes     float16/bfloat16 on tensor cores; float32 as tf32 only when torch allows it
             (torch.backends.cuda.matmul.allow_tf32), otherwise exact ("ieee", small tiles: Note [Sane
             GEMM tiles] in schedule/gemm_tiles.py)
ACC_FROM_MEMORY runs the epilogue on a tile the library call wrote instead (Note [Template or library at run
time] in gemm_launch.py). Sizes and strides are literals: a template is generated per shape.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch

from engine.ir.artifacts import TemplateKernel
from engine.record import TemplateRecord
from engine.codegen.provenance import LineTag
from engine.codegen.triton.kernel import SIGNATURE_TYPES
from engine.codegen.triton.printer import HALF, INT32_LIMIT, XR, TritonPrinter, TVar, tl_type
from engine.ir.nodes import Template
from engine.ir.ops import ops, use_handler
from engine.schedule import gemm_tiles
from engine.schedule.fusion import Kernel
from engine.schedule.gemm_tiles import GemmConfig
from engine.schedule.templates import (GemmSpec, TemplatePlan, accumulator_read, default_takes_template,
                                      epilogue_plan)

MASKS = {"x": "xmask", "r": "rmask", "xr": "xrmask"}
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K", "ACC_FROM_MEMORY", "PROGRAMS", "PERSISTENT")
# Note [Epilogue-only tiles]
# With ACC_FROM_MEMORY the kernel is an elementwise pass over the library's output: the GEMM's tile (128x128,
# 8 warps: 64 elements a thread) need not be what a memory-bound pass wants. On the H200 (2026-12-02, SwiGLU
# at M=8192) the up projection's "library + epilogue" timed 0.18 ms more than the gate projection's "library"
# alone, the same GEMM: the pass moves 540 MB, so it ran at 3.0 TB/s where a copy runs at 4.3. So
# max-autotune also times the library call with the epilogue on tiles shaped as our pointwise kernels'
# blocks (1024 and 4096 elements, 8 and 16 a thread, rows of 128 for 16-byte accesses along N). Compiled for
# sm_90 offline (triton.compile, SwiGLU's up projection 512x11008x4096 with ACC_FROM_MEMORY): every access is
# 128-bit (LDG.E.128 / STG.E.128: 2 loads and 1 store a thread for 8x128 on 4 warps, 4 and 2 for 32x128 on
# 8, 16 and 8 for the GEMM's 128x128 on 8) and nothing spills. Not yet timed on a GPU; they replace the
# default's pick only when MIN_GAIN faster (gemm_launch.py).
EPILOGUE_ONLY_CONFIGS = [GemmConfig(8, 128, 16, 4, 1), GemmConfig(32, 128, 16, 8, 1)]
INTERPRETER_PROGRAMS = 3  # a persistent config under the interpreter: few programs, several tiles each
DISPLAY_PROGRAMS = 132  # an H200's SMs, for the record when no GPU is there to ask


def gpu_configs(spec: GemmSpec) -> list[GemmConfig]:
    """The tile configs that suit the shape (Note [Sane GEMM tiles]), the heuristic's first."""
    return gemm_tiles.gpu_configs(spec.m, spec.n, spec.k, spec.dtype)


def interpreter_config(spec: GemmSpec) -> GemmConfig:
    return gemm_tiles.interpreter_config(spec.m, spec.n, spec.k)


@dataclass
class TritonTemplateKernel(TemplateKernel):
    interpreter: bool = True  # kernels for the CPU interpreter (its config), else for a GPU
    signature: dict = field(default_factory=dict)  # argument -> triton type, for triton.compile (display)
    arg_dtypes: tuple = ()  # the arguments' dtypes: compiled before the first call (runtime/compile_pool.py)

    def configs(self) -> list[GemmConfig]:
        return [interpreter_config(self.spec)] if self.interpreter else gpu_configs(self.spec)

    def grid(self, config: GemmConfig) -> tuple:
        spec = self.spec
        tiles = -(-spec.m // config.BLOCK_M) * -(-spec.n // config.BLOCK_N) * spec.batch
        return (min(tiles, self.programs()) if config.PERSISTENT else tiles, 1, 1)

    def programs(self) -> int:
        """How many programs a persistent config launches (Note [Persistent GEMM programs]): one per SM."""
        if self.interpreter:
            return INTERPRETER_PROGRAMS
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        return DISPLAY_PROGRAMS

    def record_fields(self) -> dict:
        config = self.configs()[0]
        return {"template": TemplateRecord(
            name="triton_gemm", spec=self.spec.record(), config=config.kwargs(),
            gpu_config=gpu_configs(self.spec)[0].kwargs(), grid=list(self.grid(config)),
            epilogue=list(self.epilogue), reason=self.template.reason,
            candidates=[c.kwargs() for c in gpu_configs(self.spec)], autotune=self.tuning,
            signature=self.signature, display={
                "constants": self.display_constants(gpu_configs(self.spec)[0]),
                "num_warps": gpu_configs(self.spec)[0].num_warps})}

    def display_constants(self, config: GemmConfig) -> dict:
        """The constexprs of a launch with `config` (for engine/tools/assembly.kernel_assembly)."""
        return dict(BLOCK_M=config.BLOCK_M, BLOCK_N=config.BLOCK_N, BLOCK_K=config.BLOCK_K,
                    GROUP_M=config.GROUP_M, EVEN_K=self.spec.k % config.BLOCK_K == 0, ACC_FROM_MEMORY=False,
                    PROGRAMS=self.grid(config)[0], PERSISTENT=config.PERSISTENT)


class EpiloguePrinter(TritonPrinter):
    """TritonPrinter whose loads of the template's own output are the accumulator tile."""

    def __init__(self, plan: TemplatePlan, buffers: dict, template: Template):
        super().__init__(plan, buffers, "r", MASKS)
        self.template = template
        self.accumulator = TVar("acc", template.dtype, True, XR)

    def _load_memory(self, name, index):
        if name == self.template.name:
            accumulator_read(self.plan, self.template, index)
            return self.accumulator
        return super()._load_memory(name, index)


def _needs_int64(spec: GemmSpec) -> bool:
    def extent(operand, sizes):
        return operand.offset + sum((s - 1) * st for s, st in zip(sizes, operand.strides))
    sizes = [extent(spec.a, (spec.batch, spec.m, spec.k)), extent(spec.b, (spec.batch, spec.k, spec.n)),
             spec.rows * spec.n] + ([extent(spec.bias, (spec.batch, spec.m, spec.n))] if spec.bias else [])
    return max(sizes) >= INT32_LIMIT


def _precision(spec: GemmSpec) -> str:
    if spec.dtype != torch.float32:
        return "tf32"  # ignored for half types: tensor cores take them as they are
    return "ieee" if gemm_tiles.ieee_fp32(spec.dtype) else "tf32"


def _gemm_lines(spec: GemmSpec, int64: bool) -> list[str]:
    """The template's own part: tile ids, the K loop, alpha/beta/bias, rounding (Note [Triton GEMM template])."""
    sa, sb = spec.a.strides, spec.b.strides
    index = ".to(tl.int64)" if int64 else ""
    # tl.full, not tl.zeros/tl.cdiv: those are jit functions, which the interpreter cannot call (Note
    # [Reductions without Triton's standard library] in the prelude)
    lines = [
        f"num_pid_m = ({spec.m} + BLOCK_M - 1) // BLOCK_M",
        f"num_pid_n = ({spec.n} + BLOCK_N - 1) // BLOCK_N",
    ]
    if spec.batch == 1:
        lines += ["pid = tile", "pid_b = 0"]
    else:  # one grid axis for tiles and batch: the bound launch has a one-dimensional grid
        lines += ["pid = tile % (num_pid_m * num_pid_n)",
                  f"pid_b = (tile // (num_pid_m * num_pid_n)){index}"]
    lines += [
        "group_width = GROUP_M * num_pid_n",
        "first_m = (pid // group_width) * GROUP_M",
        "group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)",
        "pid_m = first_m + (pid % group_width) % group_rows",
        "pid_n = (pid % group_width) // group_rows",
        f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){index}",
        f"rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){index}",
        f"x0 = pid_b * {spec.m} + rm[:, None]",
        "r0 = rn[None, :]",
        f"xmask = rm[:, None] < {spec.m}",
        f"rmask = r0 < {spec.n}",
        "xrmask = xmask & rmask",
        "if ACC_FROM_MEMORY:",
        f"    acc = tl.load(acc_in + (x0 * {spec.n} + r0), mask=xrmask, other=0.0).to(tl.float32)",
        "else:",
        f"    ram = rm % {spec.m}",
        f"    rbn = rn % {spec.n}",
        "    rk = tl.arange(0, BLOCK_K)",
        f"    a_ptrs = {spec.a.name} + ({spec.a.offset} + pid_b * {sa[0]} + ram[:, None] * {sa[1]} + rk[None, :] * {sa[2]})",
        f"    b_ptrs = {spec.b.name} + ({spec.b.offset} + pid_b * {sb[0]} + rk[:, None] * {sb[1]} + rbn[None, :] * {sb[2]})",
        "    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)",
        f"    for k in range(0, {spec.k}, BLOCK_K):",
        "        if EVEN_K:",
        "            a = tl.load(a_ptrs)",
        "            b = tl.load(b_ptrs)",
        "        else:",
        f"            a = tl.load(a_ptrs, mask=rk[None, :] < {spec.k} - k, other=0.0)",
        f"            b = tl.load(b_ptrs, mask=rk[:, None] < {spec.k} - k, other=0.0)",
    ]
    if spec.dtype == torch.bfloat16:  # the interpreter's tl.dot mis-computes bfloat16 (numpy has no bf16)
        lines += ["        if GB_INTERPRET:", "            a = a.to(tl.float32)", "            b = b.to(tl.float32)"]
    lines += [
        f"        acc += tl.dot(a, b, input_precision=\"{_precision(spec)}\")",
        f"        a_ptrs += BLOCK_K * {sa[2]}",
        f"        b_ptrs += BLOCK_K * {sb[1]}",
    ]
    if spec.alpha != 1.0:
        lines.append(f"    acc = acc * {spec.alpha!r}")
    if spec.bias is not None:
        bias, sc = spec.bias, spec.bias.strides
        load = (f"tl.load({bias.name} + ({bias.offset} + pid_b * {sc[0]} + rm[:, None] * {sc[1]} + "
                f"r0 * {sc[2]}), mask=xrmask, other=0.0).to(tl.float32)")
        lines.append(f"    acc = acc + {load}" + (f" * {spec.beta!r}" if spec.beta != 1.0 else ""))
    if spec.dtype in HALF:  # eager's library call rounds its result to the output dtype
        lines.append(f"acc = acc.to({tl_type(spec.dtype)}).to(tl.float32)")
    return lines


def generate_template(kernel: Kernel, buffers: dict, interpreter: bool) -> TritonTemplateKernel:
    template, epilogue = kernel.nodes[0], kernel.nodes[1:]
    spec = template.spec
    plan = epilogue_plan(template, epilogue)
    printer = EpiloguePrinter(plan, buffers, template)
    printer.store_dims, printer.store_shape = XR, "[BLOCK_M, BLOCK_N]"
    with use_handler(printer):
        for node in [n for n in kernel.nodes if n.name in kernel.stored]:
            printer.tag = LineTag(node.name)
            index = plan.index(node)
            ops.store(node.name, index, printer.accumulator if node is template else node.inner_fn(index))
    epilogue_lines, epilogue_tags = printer.take()
    stores, printer.stores = printer.stores, []
    operands = [spec.a.name, spec.b.name] + ([spec.bias.name] if spec.bias else [])
    args = list(dict.fromkeys(operands + sorted(printer.loaded, key=kernel.reads.index) + list(kernel.stored)))
    params = args + ["acc_in"] + [f"{c}: tl.constexpr" for c in CONSTEXPRS]
    tag = LineTag(template.name)
    body = [(line, tag) for line in _gemm_lines(spec, _needs_int64(spec))]
    body += list(zip(epilogue_lines, epilogue_tags)) + stores
    # Note [Persistent GEMM programs]: the tiles this program computes (a plain config: one)
    tiles = [f"tiles = ({spec.m} + BLOCK_M - 1) // BLOCK_M * (({spec.n} + BLOCK_N - 1) // BLOCK_N) * {spec.batch}",
             "for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=PERSISTENT):"]
    header = ["@triton.jit", f"def {kernel.name}({', '.join(params)}):",
              f"    # GEMM template: {spec.op} {spec.shape_text()}, epilogue: "
              f"{', '.join(n.name for n in epilogue) or 'none'}"]
    lines = header + ["    " + line for line in tiles] + ["        " + line for line, _ in body]
    tags = [None, None, tag, tag, tag] + [t for _, t in body]
    signature = {name: SIGNATURE_TYPES[buffers[name].dtype] for name in args}
    signature["acc_in"] = SIGNATURE_TYPES[template.dtype]
    signature.update({c: "constexpr" for c in CONSTEXPRS})
    generated = TritonTemplateKernel(kernel.name, "\n".join(lines), args, [], template, [n.name for n in epilogue],
                                     tags, library_host=library_host(kernel, plan, template),
                                     interpreter=interpreter, signature=signature,
                                     arg_dtypes=tuple(buffers[name].dtype for name in args))
    return with_launch_data(generated, "triton")


def with_launch_data(kernel: TritonTemplateKernel, backend: str) -> TritonTemplateKernel:
    """What the runtime needs to launch and tune the template, decided here: default mode's pick, the tile
    configs (the heuristic's first) and each config's constexprs, options and grid (runtime/gemm_launch.py)."""
    template = kernel.template
    kernel.default_template = default_takes_template(template.spec, bool(kernel.epilogue), backend,
                                                     str(template.device), output_stored=template.name in kernel.args)
    configs = kernel.configs()
    kernel.tile_configs = [c.kwargs() for c in configs]
    kernel.epilogue_configs = [] if kernel.interpreter else [c.kwargs() for c in EPILOGUE_ONLY_CONFIGS]
    for tiles in configs + EPILOGUE_ONLY_CONFIGS:  # the epilogue-only tiles even where they are not timed
        options = {"num_warps": tiles.num_warps, "num_stages": tiles.num_stages}
        if tiles.maxnreg is not None:  # Note [Two programs per SM]
            options["maxnreg"] = tiles.maxnreg
        kernel.launch_args[tuple(tiles.kwargs().items())] = (kernel.display_constants(tiles), options,
                                                               kernel.grid(tiles)[0])
    return kernel


def library_host(kernel: Kernel, plan: TemplatePlan, template: Template) -> str | None:
    """A stored output the library call can write for the epilogue to overwrite in place (Note [Library plan
    in place] in gemm_launch.py): the GEMM's dtype, and each lane's element stored at the lane's own offset
    (x*N + r, the element ACC_FROM_MEMORY reads); the template's own output first."""
    stored = sorted((n for n in kernel.nodes if n.name in kernel.stored), key=lambda n: n is not template)
    single = {var: 0 for var, extent in plan.ranges.items() if extent == 1}
    for node in stored:
        if node.dtype != template.dtype:
            continue
        offset = plan.simplify(sympy.expand(node.storage_offset(plan.index(node))))
        if sympy.expand((offset - plan.output_offset()).subs(single)) == 0:
            return node.name
    return None
