"""The app's mode choice (issue 11): the sidebar offers torch.compile's modes the device supports, and the
choice reaches the worker's command line and the result cache's key."""
from app import state, worker


def test_modes_follow_the_device_and_reach_the_worker():
    assert "reduce-overhead" not in state.modes_for("cpu") and "reduce-overhead" in state.modes_for("cuda")
    request = state.Request("x = 1", "sample", "triton", "cuda", mode="reduce-overhead")
    assert request.options.cli_args()[-2:] == ["--mode", "reduce-overhead"]
    assert "--mode" not in worker.Options().cli_args()  # default mode: the CLI's default
    assert request.key() != state.Request("x = 1", "sample", "triton", "cuda").key()
