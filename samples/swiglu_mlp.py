import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A SwiGLU MLP** (Llama's feed-forward block): `down(silu(gate(x)) * up(x))` on a batch of 16 tokens. Three
matmuls; between them only elementwise work. With GEMM *templates* the compiler generates the matmul itself
(a tiled `tl.dot` kernel on Triton, a blocked loop nest in C++) and computes `silu(gate) * up` in the gate
GEMM's **epilogue**, while its output tile is still in registers: the gate activations are never written to
memory and read back. The fusion view says which consumer joined which template and why; the code view shows
the template with its tile sizes. `templates="off"` (or `engine compare swiglu_mlp --a templates=off --b
templates=on`) shows the same model with library calls and a separate elementwise kernel.
"""


class SwiGLU(nn.Module):
    def __init__(self, dim=64, hidden=176):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


model = SwiGLU().eval()
example_inputs = (torch.randn(16, 64),)
