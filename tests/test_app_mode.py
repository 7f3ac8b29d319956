"""The app's mode choice (issue 11): the sidebar offers torch.compile's modes the device supports, and the
choice reaches the worker's command line and the result cache's key."""
from app import state
from engine import options
from engine.options import Options


def test_modes_follow_the_device_and_reach_the_worker():
    assert "reduce-overhead" not in state.modes_for("cpu") and "reduce-overhead" in state.modes_for("cuda")
    request = state.Request("x = 1", "sample", Options(backend="triton", device="cuda", mode="reduce-overhead"))
    assert options.cli_args(request.options)[-2:] == ["--mode", "reduce-overhead"]
    assert "--mode" not in options.cli_args(Options())  # default mode: the CLI's default
    assert request.key() != state.Request("x = 1", "sample", Options(backend="triton", device="cuda")).key()
