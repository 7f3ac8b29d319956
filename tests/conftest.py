import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test starts with a cold Dynamo, so compiled frames from one test never serve another."""
    import torch._dynamo
    torch._dynamo.reset()
    yield
