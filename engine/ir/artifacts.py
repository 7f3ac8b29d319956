"""What codegen hands the runtime: the data a printed kernel carries so that loading, launching and tuning it
asks no compiler layer a question (docs/design.md, "The runtime"). Codegen fills these; engine/runtime/ reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.ir.nodes import Template
from engine.record import TemplateTuning, TritonTuning


# --- what the wrapper's namespace holds for the runtime to bind at load time ----------------------------------


@dataclass(frozen=True)
class LibraryOp:
    """A library call of the wrapper (an aten op run by torch's kernels). The runtime binds it as a LibraryCall
    (engine/runtime/wrapper.py): through torch's binding where that reaches the same overload for a call with
    `positional` arguments and these `keywords`, with a contiguous retry where a library refuses a layout."""
    target: Any
    positional: int
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Allocator:
    """The wrapper's `allocate(size, stride, dtype)` on `device`, bound by the runtime to torch's fastest
    allocation path there (Note [Lean wrapper] in engine/codegen/wrapper.py)."""
    device: str


@dataclass
class TunePlan:
    """What autotuning a generated kernel needs, decided by codegen: its source (with the candidates, the cache
    key), the candidate configs with their grids (the heuristic's first), and the record's entry to fill."""
    source: str
    candidates: list[tuple[dict, tuple]]  # (block sizes and num_warps, grid)
    tuning: TritonTuning


@dataclass
class KernelLaunch:
    """How to launch one generated Triton kernel, decided by codegen (engine/codegen/triton/module.py)."""
    name: str
    config: dict  # block sizes (XBLOCK, YBLOCK, RBLOCK) and num_warps
    checked: tuple[int, ...]  # arguments whose specialization may vary (Note [Bound Triton launches])
    tune: TunePlan | None = None  # mode="max-autotune" on a GPU: tuned at the first launch
    # every argument's dtype, when the launch has no size arguments: enough to compile it before its first
    # launch (Note [Compiling a graph's kernels before its first call] in runtime/compile_pool.py); None where a
    # size is known only at the call
    arg_dtypes: tuple | None = None


@dataclass
class TemplateKernel:
    """What both backends' template kernels share: the source, the signature's buffers, the Template node
    and its epilogue, and the autotuning results (filled at the first launch in max-autotune)."""
    name: str
    source: str
    args: list[str]  # buffer names in signature order (the wrapper passes these tensors)
    size_args: list[str]  # always empty: a template is generated per shape (sizes are literals)
    template: Template
    epilogue: list[str]  # the IR nodes fused after the GEMM
    line_tags: list = field(default_factory=list)
    tuning: TemplateTuning = field(default_factory=TemplateTuning)
    # a stored output the library call may write (Note [Library plan in place], gemm_launch.py)
    library_host: str | None = None
    # what codegen decided for the run time, as data (the runtime asks no compiler layer at launch time):
    # default mode runs the template, not the library call (Note [Autotune against the default's pick])
    default_template: bool = False
    tile_configs: list[dict] = field(default_factory=list)  # the configs to time, the heuristic's first
    epilogue_configs: list[dict] = field(default_factory=list)  # Triton: more tiles for the epilogue-only mode
    launch_args: dict = field(default_factory=dict)  # Triton: config items -> (constexprs, options, grid x)

    @property
    def spec(self):
        return self.template.spec

    def launch_text(self) -> str:
        return f"{self.name}({', '.join(self.args)})"
