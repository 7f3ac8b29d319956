"""Generated source is safe by construction (issue 6): names from user code (parameters, buffers, submodules,
the model's name) never reach C++ or the Python wrapper as text; hostile names still compile and match eager."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import engine

FRAGMENTS = ['"', "'", "\n", "\\", '"); system("touch /tmp/glassbox-pwned', "*/ /*", "#include <cstdlib>",
             "__import__('os').system('x')", "}; int main() {", "ü∂≈ç", "\x00", "int", "return", "class",
             "x" * 300, "${HOME}", "{}", "%s%n"]
DANGEROUS = set('"\'\n\\;{}()%$') | {"\x00"}

names = st.lists(st.sampled_from(FRAGMENTS) | st.text(min_size=1, max_size=12), min_size=1, max_size=3).map(
    "".join).filter(lambda s: "." not in s and not hasattr(torch.nn.Module(), s))


class Hostile(torch.nn.Module):
    def __init__(self, parameter: str, buffer: str, child: str):
        super().__init__()
        self.names = (parameter, buffer, child)
        self.register_parameter(parameter, torch.nn.Parameter(torch.randn(4)))
        if buffer != parameter:
            self.register_buffer(buffer, torch.full((4,), 0.5))
        if child not in (parameter, buffer):
            self.add_module(child, torch.nn.Linear(4, 4))

    def forward(self, x):
        parameter, buffer, child = self.names
        y = x * getattr(self, parameter) + getattr(self, buffer)
        if child not in (parameter, buffer):
            y = getattr(self, child)(y)
        return torch.relu(y).sum(-1)


def _verbatim_risk(name: str) -> bool:
    """Names worth searching for in generated text: short ones (`int`, `"`) appear there anyway."""
    return len(name) >= 4 and (bool(set(name) & DANGEROUS) or len(name) >= 40 or not name.isascii())


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(parameter=names, buffer=names, child=names)
def test_hostile_names_compile_match_eager_and_stay_out_of_generated_code(parameter, buffer, child):
    torch._dynamo.reset()
    model = Hostile(parameter, buffer, child).eval()
    inputs = (torch.randn(3, 4),)
    exploration = engine.explore(model, inputs, name=parameter)
    assert exploration.verify.ok, exploration.verify
    record = exploration.to_json()
    texts = [text for graph in record["graphs"] for text in ((graph.get("code") or {}).get("source") or "",
                                                           (graph.get("code") or {}).get("wrapper") or "")]
    assert any(texts), "no generated code"
    for name in (parameter, buffer, child):
        if _verbatim_risk(name):
            for text in texts:
                assert name not in text, f"{name!r} reached generated code"
