"""Persistent GEMM programs (Note [Persistent GEMM programs] in engine/schedule/gemm_tiles.py): a PERSISTENT
tile config launches fewer programs than tiles, each walking several tiles (ragged edges and batches
included), and computes what eager does; a plain config still launches one program per tile."""
import pytest
import torch

from engine.codegen.triton import gemm as triton_gemm
from engine.schedule import gemm_tiles
from tests.test_templates import MODELS, _assert_fused, _explore, _templates

pytest.importorskip("triton")
SMALL_PERSISTENT = gemm_tiles.GemmConfig(16, 16, 16, 4, 1, GROUP_M=2, PERSISTENT=True)


@pytest.mark.parametrize("name", [m for m in MODELS if m != "conv1x1"])
def test_persistent_programs_walk_several_tiles_and_match_eager(name, monkeypatch):
    monkeypatch.setattr(triton_gemm, "interpreter_config", lambda spec: SMALL_PERSISTENT)
    exploration = _explore(name, torch.float32, "triton", templates="on")
    _assert_fused(exploration, name)
    for kernel in _templates(exploration):
        template = kernel.template
        spec = template.spec
        tiles = -(-spec.M // 16) * -(-spec.N // 16) * spec.batch
        assert tiles > triton_gemm.INTERPRETER_PROGRAMS and template.grid[0] == triton_gemm.INTERPRETER_PROGRAMS
        assert template.config["PERSISTENT"] is True


def test_plain_config_launches_one_program_per_tile():
    exploration = _explore("bmm", torch.float32, "triton", templates="on")
    (kernel,) = _templates(exploration)
    template, spec = kernel.template, kernel.template.spec
    config = template.config
    tiles = -(-spec.M // config["BLOCK_M"]) * -(-spec.N // config["BLOCK_N"]) * spec.batch
    assert config["PERSISTENT"] is False and template.grid[0] == tiles


def test_max_autotune_times_persistent_forms_of_the_leading_tile():
    configs = gemm_tiles.gpu_configs(8192, 4096, 1024, torch.bfloat16)
    assert not configs[0].PERSISTENT, "the default's tile stays the plain one"
    persistent = [c for c in configs if c.PERSISTENT]
    assert persistent and all((c.BLOCK_M, c.BLOCK_N) == (configs[0].BLOCK_M, configs[0].BLOCK_N) for c in persistent)


@pytest.mark.slow
def test_register_capped_config_runs_and_matches_eager(monkeypatch):
    """Note [Two programs per SM]: the cap is a compile option (the interpreter ignores it); the candidate
    launches like any other and computes the same."""
    capped = gemm_tiles.GemmConfig(16, 16, 16, 4, 1, GROUP_M=2, maxnreg=128)
    monkeypatch.setattr(triton_gemm, "interpreter_config", lambda spec: capped)
    exploration = _explore("linear_relu", torch.float32, "triton", templates="on")
    _assert_fused(exploration, "linear_relu")
    assert _templates(exploration)[0].template.config["maxnreg"] == 128
    assert any(c.maxnreg == 128 for c in gemm_tiles.gpu_configs(8192, 4096, 1024, torch.bfloat16))
