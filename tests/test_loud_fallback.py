"""Nothing runs eagerly in silence (Note [A fallback is loud] in engine/fallbacks.py), and our compile makes real
tensors, never fake ones (Note [Compiling outside the fake mode] in engine/pipeline.py)."""
import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import engine
from engine import pipeline
from engine.lowering import registry
from engine.tools import bench
from engine.tools.model_file import load_model_file


def _replace_stage(monkeypatch, name: str, fn) -> None:
    stages = list(pipeline.STAGES)
    where = [s.name for s in stages].index(name)
    stages[where] = dataclasses.replace(stages[where], fn=fn)
    monkeypatch.setattr(pipeline, "STAGES", stages)


def _model(x):
    y = torch.relu(x) * 2  # the user's line a warning must name
    return torch.softmax(y, dim=-1)


def _fallback_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, engine.FallbackWarning)]


@pytest.mark.parametrize("stage", ("decompose",) + pipeline.GRAPH_STAGES)
def test_a_graph_that_falls_back_warns_once_with_stage_reason_and_line(monkeypatch, stage):
    def broken(artifact, options):
        raise RuntimeError("injected failure")

    _replace_stage(monkeypatch, stage, broken)
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = engine.compile(_model)
        torch.testing.assert_close(compiled(x), _model(x))
        torch.testing.assert_close(compiled(x), _model(x))  # the second call warns no more
    (message,) = _fallback_warnings(caught)
    assert f"our {stage} stage failed" in message and "RuntimeError: injected failure" in message
    assert "test_loud_fallback.py:" in message, message


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_a_failed_trace_runs_dynamos_graph_and_the_record_says_so(monkeypatch, train):
    """AOTAutograd's trace with our decompositions is our stage too (Note [Internal failure falls back to
    eager]): when it raises, the graph runs as Dynamo captured it, gradients included, and explore's record
    names the stage, while Dynamo's own signals still reach Dynamo."""
    def broken(artifact, options):
        raise ValueError("injected trace failure")

    _replace_stage(monkeypatch, "decompose", broken)
    x = torch.randn(4, 8, requires_grad=train)
    record = engine.explore(_model, (x,), train=train)
    assert record.verify.ok, record.verify
    assert [g.fallback.stage for g in record.graphs] == ["decompose"]
    assert [(e.kind, e.stage) for e in record.errors] == [("fallback", "decompose")]
    assert "injected trace failure" in record.errors[0].message

    def restarted(artifact, options):
        raise torch._dynamo.exc.RestartAnalysis("Dynamo's own")

    _replace_stage(monkeypatch, "decompose", restarted)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="Dynamo's own|RestartAnalysis"):
        engine.compile(_model)(torch.randn(4, 8))


def test_a_first_run_that_raises_warns_with_the_run_stage(monkeypatch):
    real_build = pipeline.stage_named("build").fn

    def build_a_broken_call(generated, options):
        compiled = real_build(generated, options)

        def call(args):
            args.clear()
            raise ValueError("injected failure at the first run")

        compiled.call = call
        return compiled

    _replace_stage(monkeypatch, "build", build_a_broken_call)
    x = torch.randn(4, 8)
    with pytest.warns(engine.FallbackWarning, match="our run stage failed: ValueError: injected failure"):
        compiled = engine.compile(_model)
        torch.testing.assert_close(compiled(x), _model(x))


def test_ops_without_a_lowering_warn_once_per_reason(monkeypatch):
    monkeypatch.delitem(registry.LOWERINGS, torch.ops.aten.relu.default)
    monkeypatch.delitem(registry.LOWERINGS, torch.ops.aten.sigmoid.default)

    def two_unlowered(x):
        a = torch.relu(x)
        b = torch.sigmoid(x)
        return torch.relu(a + b) + 1

    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = engine.compile(two_unlowered)
        torch.testing.assert_close(compiled(x), two_unlowered(x))
    messages = _fallback_warnings(caught)
    assert len(messages) == 2, messages  # one per reason: relu's two calls share one
    relu = next(m for m in messages if "relu" in m)
    assert "no lowering registered" in relu and "test_loud_fallback.py:" in relu and "rest of the graph" in relu


def test_a_clean_compile_warns_nothing():
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(engine.compile(_model)(x), _model(x))
    assert not _fallback_warnings(caught)


class _IndexedByAConstant(torch.nn.Module):
    """A tensor built in forward from a Python list: Dynamo captures it as a constant of the graph, which the
    kernels read (torchvision Swin-T's relative-position tables, DeBERTa's relative positions)."""

    def forward(self, x):
        index = torch.tensor([[0, 2], [3, 1]])
        return x[index] * 2 + 1


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_our_compile_runs_outside_the_fake_mode(monkeypatch, backend):
    # AOTAutograd calls our compiler with its FakeTensorMode active; a tensor made under it (the constant moved
    # to the kernels' device) was fake, and the first GPU call died on its data pointer. CPU stand-in: every
    # graph stage sees no fake mode, and every tensor the wrapper holds is real.
    seen_modes, wrapper_tensors = [], []
    for name in pipeline.GRAPH_STAGES:
        real = pipeline.stage_named(name).fn

        def spy(artifact, options, real=real):
            seen_modes.extend(m for m in _get_current_dispatch_mode_stack() if isinstance(m, FakeTensorMode))
            result = real(artifact, options)
            if isinstance(result, pipeline.CompiledGraph):
                wrapper_tensors.extend(v for v in result.wrapper.constants.values() if isinstance(v, torch.Tensor))
            return result

        _replace_stage(monkeypatch, name, spy)
    model, x = _IndexedByAConstant(), torch.randn(5, 3)
    exploration = engine.explore(model, (x,), backend=backend)
    assert exploration.verify.ok and not exploration.errors, exploration.errors
    assert not seen_modes
    assert wrapper_tensors and not any(isinstance(t, FakeTensor) for t in wrapper_tensors)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cpu_constant_read_by_gpu_kernels_compiles():
    x = torch.randn(5, 3, device="cuda")
    exploration = engine.explore(_IndexedByAConstant(), (x,), backend="triton", device="cuda")
    assert exploration.verify.ok and not exploration.errors, exploration.errors
    assert all(g.fallback is None for g in exploration.graphs)


@pytest.mark.slow
def test_bench_marks_a_row_that_fell_back(monkeypatch, tmp_path):
    def broken(artifact, options):
        raise RuntimeError("injected failure")

    model_file = tmp_path / "fell_back.py"
    model_file.write_text("import torch\n\ndef model(x):\n    return torch.softmax(x * 2, -1)\n\n"
                          "example_inputs = (torch.randn(4, 8),)\n")
    spec = load_model_file(str(model_file))
    _replace_stage(monkeypatch, "codegen", broken)  # in this process; the fresh-process compile is clean
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the row carries it
        report = bench.bench(spec, with_inductor=False, min_run_time=0.01)
    (fallback,) = report["fallbacks"]
    assert fallback.startswith("fell back: codegen stage, RuntimeError: injected failure"), fallback
    assert report["speedup_vs_eager"] is None  # an eager run is not timed as ours


def test_the_warning_rebuilds_from_its_text():
    # pytest-xdist sends a worker's warnings to the controller as class and text and rebuilds them there
    rebuilt = engine.FallbackWarning("Glassbox: the whole graph ran eagerly")
    assert str(rebuilt) == "Glassbox: the whole graph ran eagerly" and rebuilt.eager_run is None


@pytest.mark.slow
def test_collected_keeps_fallbacks_and_shows_every_other_warning_once(tmp_path):
    """fallbacks.collected() once showed other warnings from inside its own recording, where showing one
    appends it to the list being walked: a model that warned (transformers' Wav2Vec2 under Dynamo) grew that
    list until the sweep's child was killed. In a child process with capped memory and time."""
    script = tmp_path / "collect.py"
    script.write_text(
        "import resource, warnings\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "from engine import fallbacks\n"
        "run = fallbacks.EagerRun('graph', 'run', 'a reason', 'model.py:3')\n"
        "with warnings.catch_warnings(record=True) as outer:\n"
        "    warnings.simplefilter('always')\n"
        "    with fallbacks.collected() as found:\n"
        "        warnings.warn('plain', UserWarning)\n"
        "        fallbacks.warn(run)\n"
        "print(len(found), found[0].reason, [str(w.message) for w in outer])\n")
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, str(script)], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "1 a reason ['plain']"
