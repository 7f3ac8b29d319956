"""Note [Parallel compiles]: max-autotune's candidate configs compile in worker processes before they are timed,
and a worker that fails only loses the head start. The CPU tests check the pool's contract (arguments as
dtypes, failures counted and swallowed); the GPU test checks the point of it: each template config compiles
once, in a worker, and the timing loop finds it in Triton's cache."""
from pathlib import Path

import pytest
import torch

from engine.runtime import compile_pool, triton_build

SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def scale(x, y, n, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(y + offsets, tl.load(x + offsets, mask=offsets < n) * 2, mask=offsets < n)
'''


@pytest.fixture
def fresh_pool(monkeypatch):
    """Two workers whatever the machine (CI has two cores: the pool would stay off), shut down after."""
    monkeypatch.setattr(compile_pool, "_workers", lambda: 2)
    monkeypatch.setattr(compile_pool, "_pool", None)
    yield
    if compile_pool._pool is not None:
        compile_pool._pool.shutdown(wait=True, cancel_futures=True)


def test_warm_spec_names_the_module_file_and_passes_tensors_as_dtypes(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    module, _ = triton_build.load_source(SOURCE, interpret=False)
    x = torch.ones(8, dtype=torch.bfloat16)
    path, name, function, args, kwargs = compile_pool.warm_spec(module.scale, [x, torch.float32, 8],
                                                                {"XBLOCK": 64, "num_warps": 4})
    assert Path(path).read_text() == SOURCE and name == module.__name__ and function == "scale"
    assert args == [torch.bfloat16, torch.float32, 8] and kwargs == {"XBLOCK": 64, "num_warps": 4}


@pytest.mark.slow
def test_failed_workers_are_counted_not_raised(tmp_path, monkeypatch, fresh_pool):
    """Without a GPU a worker's warmup fails: the counts say so and nothing is raised (the configs compile where
    they are timed, as before)."""
    if torch.cuda.is_available():
        pytest.skip("the workers would compile on this machine's GPU")
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    module, _ = triton_build.load_source(SOURCE, interpret=False)
    x = torch.ones(8)
    specs = [compile_pool.warm_spec(module.scale, [x, x, 8], {"XBLOCK": b, "num_warps": 4}) for b in (64, 128)]
    result = compile_pool.precompile(specs)
    assert result["compiled"] == 0 and result["failed"] == 2 and result["left"] == 0 and result["error"]


def test_one_spec_or_none_starts_no_pool(fresh_pool):
    assert compile_pool.precompile([None, None]) == {"compiled": 0, "failed": 0, "left": 0}
    assert compile_pool._pool is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_template_configs_compile_once_in_the_workers(tmp_path, monkeypatch, fresh_pool):
    """max-autotune of one GEMM + SiLU: every (config, mode) the candidates launch is compiled by a worker, and
    the timing loop's launches find each in Triton's on-disk cache (no config compiled a second time here,
    which would add a second cache entry for the kernel's name)."""
    import engine

    triton_dir = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_dir))
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path / "glassbox"))
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.SiLU()).cuda().to(torch.bfloat16)
    x = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    exploration = engine.explore(model, (x,), backend="triton", device="cuda", templates="on", mode="max-autotune")
    assert exploration.verify.ok, exploration.verify
    (kernel,) = [k for k in exploration.kernels if k.kind == "template"]
    tuning = kernel.template.autotune
    counts = tuning.precompile
    assert counts.failed == 0 and counts.left == 0 and counts.compiled >= 2, counts
    name = kernel.name
    entries = [d for d in triton_dir.iterdir() if any(f.name.startswith(f"{name}.") for f in d.iterdir())]
    assert len(entries) == counts.compiled, (len(entries), counts)
