"""The Triton GEMM template's tile configs on Hopper (Note [Hopper GEMM tiles]), checked without a GPU: the
template compiled for sm_90 with a wide config runs its K loop as a software pipeline (asynchronous copies
into num_stages shared-memory buffers, wgmma on them), within the shared-memory budget."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from engine.runtime import triton_build
from engine.codegen.triton.gemm import TritonTemplateKernel
from engine.codegen.triton.module import generate_module
from engine.lowering.graph import lower
from engine.schedule import gemm_tiles
from engine.schedule.fusion import schedule
from engine.schedule.policy import FusionKnobs
from engine.schedule.templates import TemplateOptions

triton = pytest.importorskip("triton")


def _linear_silu_template(m, n, k):
    def linear_silu(x, w):
        return F.silu(torch.mm(x, w.t()))

    gm = make_fx(linear_silu, tracing_mode="fake")(torch.empty(m, k, dtype=torch.bfloat16),
                                                   torch.empty(n, k, dtype=torch.bfloat16))
    graph = lower(gm, "cuda")
    scheduled = schedule(graph, FusionKnobs(True, None), TemplateOptions("auto", "triton", "max-autotune", "cuda"))
    module = generate_module(scheduled.kernels, graph.buffers, [], mode="max-autotune")
    (kernel,) = [k for k in module.kernels if isinstance(k, TritonTemplateKernel)]
    assert kernel.epilogue, "the SiLU is the template's epilogue"
    loaded, _ = triton_build.load_source(module.source, interpret=False)
    return kernel, getattr(loaded, kernel.name)


def test_wide_hopper_config_is_pipelined_within_the_budget():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    m, n, k = 512, 1024, 512
    kernel, function = _linear_silu_template(m, n, k)
    config = gemm_tiles.GemmConfig(128, 256, 64, 8, 3)
    assert config in gemm_tiles.gpu_configs(m, n, k, torch.bfloat16)
    constants = kernel.display_constants(config)
    signature = {name: kind for name, kind in kernel.signature.items() if kind != "constexpr"}
    signature.update({name: "constexpr" for name in constants})
    aligned = {(i,): [["tt.divisibility", 16]] for i, kind in enumerate(signature.values()) if kind.startswith("*")}
    try:
        compiled = triton.compile(ASTSource(function, signature, constexprs=constants, attrs=aligned),
                                  target=GPUTarget("cuda", 90, 64),
                                  options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    except Exception as error:  # noqa: BLE001 - no ptxas for sm_90 in this environment
        pytest.skip(f"cannot compile for sm_90 here: {type(error).__name__}: {str(error)[:200]}")
    ttgir = compiled.asm["ttgir"]
    assert "async_copy_global_to_local" in ttgir and "warp_group_dot" in ttgir
    assert compiled.metadata.shared == config.num_stages * config.stage_bytes(2) <= gemm_tiles.SHARED_MEMORY_BUDGET
