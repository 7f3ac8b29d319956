"""Note [Parallel compiles]: max-autotune's candidate configs, and a new graph's statically sized kernels (Note
[Compiling a graph's kernels before its first call]), compile in worker processes before they run, and a
worker that fails only loses the head start. The CPU tests check the pool's contract (arguments as dtypes,
failures counted and swallowed, the user's script not run again in the workers, which graphs go to the
pool); the GPU tests check the point of it: each kernel compiles once, in a worker, and its launches find it in
Triton's cache."""
import subprocess
import sys
import textwrap
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
    monkeypatch.setattr(compile_pool, "workers", lambda: 2)
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


def test_the_workers_do_not_run_the_users_script(tmp_path):
    """A script without a __main__ guard that starts the pool: its top-level code runs once, in the parent;
    the workers still do their task (here a stand-in kernel whose warmup leaves a file)."""
    kernels = tmp_path / "stand_in.py"
    kernels.write_text(textwrap.dedent('''
        import os

        class _Kernel:
            def warmup(self, tag, grid):
                open(os.path.join(os.path.dirname(__file__), f"warmed-{tag}"), "w").close()

        first = second = _Kernel()
    '''))
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(f'''
        from engine.runtime import compile_pool
        with open({str(tmp_path / "runs")!r}, "a") as runs:
            runs.write("ran\\n")
        compile_pool.workers = lambda: 2
        specs = [({str(kernels)!r}, "stand_in", name, [name], {{}}) for name in ("first", "second")]
        print(compile_pool.precompile(specs))
    '''))
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "'compiled': 2" in done.stdout, done.stdout + done.stderr
    assert (tmp_path / "runs").read_text() == "ran\n"
    assert (tmp_path / "warmed-first").exists() and (tmp_path / "warmed-second").exists()


@pytest.fixture
def handed(tmp_path, monkeypatch):
    """The specs each native load hands the pool (captured, not compiled) and the modules loaded: the graph
    is loaded as on a GPU (imported natively, launches bound; decorating needs no GPU), its launches fail here."""
    from engine.runtime import load

    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    specs, modules = [], []
    monkeypatch.setattr(compile_pool, "workers", lambda: 2)
    monkeypatch.setattr(compile_pool, "GRAPH_MIN_KERNELS", 2)
    monkeypatch.setattr(compile_pool, "precompile", lambda batch: specs.append(batch) or
                        {"compiled": len(batch), "failed": 0, "left": 0})
    original = load._load_triton

    def load_natively(module, namespace, device):
        modules.append(module)
        for kernel in module.kernels:  # a template's launches follow its module's flavour, as on a GPU
            if hasattr(kernel, "template"):
                kernel.interpreter = False
        return original(module, namespace, "cuda")

    monkeypatch.setattr(load, "_load_triton", load_natively)
    return specs, modules


def _explore(model, *inputs, **options):
    import engine

    try:
        engine.explore(model, inputs, backend="triton", **options)
    except Exception:  # noqa: BLE001 - the native launches cannot run here; the load is what is checked
        pass


def test_a_new_graphs_static_kernels_go_to_the_workers_as_their_dtypes(handed):
    """Loading a native module new to the cache hands every statically sized kernel to the pool, each as its
    arguments' dtypes with its block sizes; the same module again, already cached, does not."""
    from engine.codegen.triton.kernel import SIGNATURE_TYPES

    handed, modules = handed

    def model(x, y):
        for _ in range(3):  # reductions between pointwise work: one kernel each
            x = torch.softmax(x * y, dim=-1) + x.sum(dim=0, keepdim=True).to(torch.float16).float()
        return x

    x, y = torch.randn(8, 33), torch.randn(8, 33)
    _explore(model, x, y)
    (module,) = modules
    (specs,) = handed
    launches = module.launches
    assert len(specs) == len(launches) >= 2
    for (path, _, name, args, kwargs), kernel in zip(specs, module.kernels):
        assert name == kernel.name and Path(path).read_text() == module.source
        assert [SIGNATURE_TYPES[dtype] for dtype in args] == [kernel.signature[a] for a in kernel.args]
        assert kwargs == kernel.config.kwargs()

    handed.clear()  # the same graph again: its module is in the cache, so are its kernels
    _explore(model, x, y)
    assert handed == []


def test_a_gemm_templates_default_launch_goes_to_the_workers(handed):
    """A GEMM template in default mode runs its first config computing its tile: that launch is handed over,
    with the extra tile argument the launcher passes (the first tensor standing in for it)."""
    handed, modules = handed
    a, b, c = torch.randn(64, 32), torch.randn(32, 48), torch.randn(64, 48)
    _explore(lambda a, b, c: torch.relu(a @ b) + c * 2, a, b, c, templates="on")
    (module,) = modules
    (template,) = [k for k in module.kernels if hasattr(k, "template")]
    (specs,) = handed
    (spec,) = [s for s in specs if s[2] == template.name]
    assert spec[3] == [torch.float32] * (len(template.args) + 1)
    assert spec[4]["ACC_FROM_MEMORY"] is False and spec[4]["num_warps"] == template.configs()[0].num_warps


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_graphs_kernels_compile_once_in_the_workers_before_its_first_call(tmp_path, monkeypatch, fresh_pool):
    """Default mode on a GPU: the graph's kernels are compiled by the workers while it loads, and its first
    call's launches find every one in Triton's cache (one cache entry per kernel name: a launch that compiled
    again, under another key, would add a second)."""
    import engine

    triton_dir = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_dir))
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path / "glassbox"))
    monkeypatch.setattr(compile_pool, "GRAPH_MIN_KERNELS", 2)

    def model(x, y):
        for _ in range(3):
            x = torch.softmax(x * y, dim=-1) + x.sum(dim=0, keepdim=True).to(torch.float16).float()
        return x

    x, y = torch.randn(64, 1000, device="cuda"), torch.randn(64, 1000, device="cuda")
    exploration = engine.explore(model, (x, y), backend="triton", device="cuda")
    assert exploration.verify.ok, exploration.verify
    (span,) = [s for s in exploration.trace if s.name == "precompile Triton kernels"]
    names = [k.name for k in exploration.kernels if k.kind in ("pointwise", "reduction")]
    assert span.args["compiled"] == span.args["kernels"] == len(names) >= 2, span.args
    assert span.args["failed"] == 0 and span.args["left"] == 0, span.args
    for name in names:
        entries = [d for d in triton_dir.iterdir() if any(f.name.startswith(f"{name}.") for f in d.iterdir())]
        assert len(entries) == 1, (name, len(entries))
