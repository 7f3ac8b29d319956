"""Test-only hook: a kernel planted wrong (Note [Numerics bisect] in engine/divergence.py), for the tests that check
the bisect names it. tests/test_divergence.py plants it in its own process; the browser test pastes this file's
text above a model's code, since the app's worker compiles in the process that runs the model file."""
import functools
import sys

from engine import pipeline


def plant_wrong_kernel(name: str, patch=setattr) -> None:
    """After the build stage, generated kernel `name` of each graph adds 1 to everything it stores. `patch` sets
    the build stage in (pytest's monkeypatch.setattr undoes it after the test)."""
    real_lookup = pipeline.stage_named

    def build(generated, options):
        compiled = real_lookup("build").fn(generated, options)
        namespace = getattr(compiled.call, "call", compiled.call).__globals__
        kernel = next((k for k in compiled.schedule.kernels if k.name == name), None)
        if kernel is not None and name in namespace:
            launch = [namespace[name]]
            if getattr(launch[0], "install", None) is not None:  # a Triton launch: once bound, it stays planted
                launch[0].install = functools.partial(launch.__setitem__, 0)

            def wrong(*args):
                launch[0](*args)
                frame = sys._getframe(1)
                while kernel.stored[0] not in frame.f_locals:  # up to the wrapper: its buffers by name
                    frame = frame.f_back
                for buffer in kernel.stored:
                    frame.f_locals[buffer].add_(1.0)
            namespace[name] = wrong
        return compiled

    patch(pipeline, "stage_named",
          lambda stage: pipeline.Stage("build", build) if stage == "build" else real_lookup(stage))
