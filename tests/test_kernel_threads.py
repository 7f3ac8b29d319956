"""C++ kernels run on the thread count torch is set to (Note [Kernel threads] in engine/codegen/cpp/prelude.h),
whichever Python thread calls them: never more threads than asked. Each case runs in a fresh process started
with more OpenMP threads in its environment than torch is set to, and counts the process's threads while a
compiled kernel runs (OpenMP's workers are threads of the process, created at the first parallel region that
wants them)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, threading
import torch
import engine

asked, foreign = int(sys.argv[1]), sys.argv[2] == "foreign"
if foreign:
    # torch on another OpenMP runtime (Intel's, say): its count is its own, our runtime's ICV is the
    # environment's. Stood in for by a torch.get_num_threads that answers `asked` while the ICV says more.
    torch.get_num_threads = lambda: asked
else:
    torch.set_num_threads(asked)
x = torch.randn(2048, 1024)
compiled = engine.compile(lambda t: (t * 2).sum(0) + t.sum(1).mean())
expected = (x * 2).sum(0) + x.sum(1).mean()

def tasks():
    return len(os.listdir("/proc/self/task"))

result = {}
def run():
    before = tasks()
    for _ in range(3):
        out = compiled(x)
    result.update(ok=bool(torch.allclose(out, expected, rtol=1e-4, atol=1e-3)), extra=tasks() - before)

compiled(x)  # compile in the main thread
worker = threading.Thread(target=run)  # a thread that never called torch.set_num_threads
worker.start()
worker.join()
print(json.dumps(result))
"""


def _run(asked: int, environment_threads: int, foreign: bool = False) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(environment_threads), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(asked), "foreign" if foreign else "shared"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_kernels_take_torchs_thread_count_not_the_environments():
    result = _run(asked=1, environment_threads=4)
    assert result["ok"], result
    assert result["extra"] == 0, f"a kernel started {result['extra']} OpenMP threads with torch set to 1"


@pytest.mark.slow
def test_kernels_take_torchs_count_beside_another_openmp_runtime():
    """Where torch's count and our OpenMP runtime's ICV differ, the kernels follow torch's (the wrapper hands
    it over each call); OpenMP's default would have started 3 more threads here."""
    result = _run(asked=1, environment_threads=4, foreign=True)
    assert result["ok"], result
    assert result["extra"] == 0, f"a kernel started {result['extra']} OpenMP threads with torch at 1"


@pytest.mark.slow
def test_kernels_use_the_threads_torch_is_set_to():
    """The count the test reads does see OpenMP's workers: set to 3, the kernels' parallel regions add 2."""
    result = _run(asked=3, environment_threads=1)
    assert result["ok"], result
    assert result["extra"] == 2, result
