"""max-autotune's choice for GEMM templates (Note [Autotune against the default's pick]): the candidates include
the plan default mode would run — the heuristic's tile config, the library call + the epilogue, or the library
call alone when nothing fused — and a challenger replaces that pick only when it is clearly faster. Timings
are made up here (measure is replaced) so that every branch of the choice runs on the CPU, and whichever
candidate wins, the output matches eager."""
import pytest
import torch

import engine
from engine.runtime import gemm_launch


def _templates(exploration):
    return [k for k in exploration.kernels if k.kind == "template"]


def _timed(times: dict):
    """A stand-in for gemm_launch.measure: runs each candidate once (so a broken one still fails) and gives it
    the time `times` names by candidate kind ('template' for the first config, 'other' for the rest, 'library')."""
    def measure(candidates, tensors, device):
        results = []
        for position, (name, run, config) in enumerate(candidates):
            run(tensors)
            kind = "library" if config is None else ("template" if position == 0 else "other")
            results.append({"candidate": name, "config": config, "ms": times[kind]})
        return results
    return measure


def _tuning(fn, inputs, monkeypatch, tmp_path, times, **options):
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gemm_launch, "measure", _timed(times))
    exploration = engine.explore(fn, inputs, backend="cpp", mode="max-autotune", **options)
    assert exploration.verify.ok, exploration.verify
    (kernel,) = _templates(exploration)
    return kernel.template.autotune


def test_gemm_without_epilogue_has_the_library_call_alone_as_a_candidate(monkeypatch, tmp_path):
    """Default mode gives a template with no epilogue back to the library call: max-autotune times that plan
    (the library writing the output through mm.out), not the library + a copy of its result."""
    torch.manual_seed(0)
    inputs = (torch.randn(4, 63), torch.randn(63, 20))
    tuning = _tuning(lambda a, b: a @ b, inputs, monkeypatch, tmp_path,
                     {"template": 1.0, "other": 1.0, "library": 0.5})
    names = [c.candidate for c in tuning.candidates]
    assert "library" in names and "library + epilogue" not in names, names
    assert tuning.default_pick == "library" and tuning.winner == "library", tuning


@pytest.mark.parametrize("op", ["addmm", "bmm", "strided_mm", "conv1x1"])
def test_library_alone_writes_the_output_of_every_gemm_op(op, monkeypatch, tmp_path):
    """(baddbmm is decomposed to bmm and an epilogue before it reaches the template.)"""
    torch.manual_seed(0)
    fn, inputs = {
        "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
                  (torch.randn(20), torch.randn(5, 33), torch.randn(33, 20))),
        "bmm": (lambda a, b: torch.bmm(a, b.transpose(1, 2)), (torch.randn(3, 5, 17), torch.randn(3, 9, 17))),
        "strided_mm": (lambda a, b: a[:, 1::2] @ b, (torch.randn(6, 62), torch.randn(31, 24))),
        "conv1x1": (lambda x, w, b: torch.nn.functional.conv2d(x, w, b),
                    (torch.randn(2, 24, 5, 7), torch.randn(40, 24, 1, 1), torch.randn(40))),
    }[op]
    tuning = _tuning(fn, inputs, monkeypatch, tmp_path, {"template": 1.0, "other": 1.0, "library": 0.5},
                     templates="on")
    assert tuning.winner == "library", tuning


@pytest.mark.slow
def test_default_pick_is_kept_unless_a_challenger_is_clearly_faster(monkeypatch, tmp_path):
    """4 rows on the CPU: default mode runs the template with its first tile config; a library path 1% faster is
    timing noise, one 10% faster wins."""
    torch.manual_seed(0)
    fn = lambda x, w: torch.relu(x @ w)  # noqa: E731
    inputs = (torch.randn(4, 63), torch.randn(63, 40))
    close = _tuning(fn, inputs, monkeypatch, tmp_path / "close", {"template": 1.0, "other": 1.2, "library": 0.99})
    assert close.default_pick.startswith("template") and close.winner == close.default_pick, close
    assert "noise" in close.why
    clear = _tuning(fn, inputs, monkeypatch, tmp_path / "clear", {"template": 1.0, "other": 1.2, "library": 0.9})
    assert clear.winner == "library + epilogue" and "faster than the default's pick" in clear.why, clear
    other = _tuning(fn, inputs, monkeypatch, tmp_path / "other", {"template": 1.0, "other": 0.5, "library": 2.0})
    assert other.winner.startswith("template") and other.winner != other.default_pick, other


def test_wide_gemm_default_pick_is_the_library_call_with_the_epilogue(monkeypatch, tmp_path):
    """127 rows: default mode keeps the CPU BLAS (and a separate epilogue), so that is the incumbent."""
    torch.manual_seed(0)
    tuning = _tuning(lambda x, w: torch.relu(x @ w), (torch.randn(127, 63), torch.randn(63, 40)), monkeypatch,
                     tmp_path, {"template": 0.995, "other": 1.2, "library": 1.0})
    assert tuning.default_pick == "library + epilogue" and tuning.winner == "library + epilogue", tuning


def test_pick_winner_without_timings_falls_back_to_the_default():
    results = [{"candidate": "template a", "ms": None, "error": "out of resources"},
               {"candidate": "library", "ms": None}]
    assert gemm_launch.pick_winner(results, "library")[0] == "library"
    results[1]["ms"] = 0.3
    assert gemm_launch.pick_winner(results, "template a") == ("library", "the fastest")


def test_same_gemm_in_two_layers_is_timed_once(monkeypatch, tmp_path):
    """The on-disk key leaves the kernel's name out: layer 2's identical GEMM finds layer 1's timings."""
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    calls = []
    real = gemm_launch.measure

    def counting(candidates, tensors, device):
        calls.append(len(candidates))
        return real(candidates, tensors, device)
    monkeypatch.setattr(gemm_launch, "measure", counting)
    torch.manual_seed(0)
    w1, w2 = torch.randn(63, 63), torch.randn(63, 63)
    exploration = engine.explore(lambda x: torch.relu(torch.relu(x @ w1) @ w2), (torch.randn(4, 63),),
                                 backend="cpp", mode="max-autotune")
    assert exploration.verify.ok and len(_templates(exploration)) == 2
    assert len(calls) == 1, calls
