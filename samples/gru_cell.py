import torch
from torch import nn

torch.manual_seed(0)

description = """
**A GRU cell unrolled over 4 time steps**: each step is two small matmuls (input and hidden projections) and a
gate computation of sigmoids, a tanh and blends. Dynamo unrolls the Python `for` loop, so the graph holds four
copies of the cell. Per step, the gate math is one pointwise kernel after the matmuls. Recurrent models like
this are launch-bound at small sizes, which is where fusion and a cheap wrapper pay off most.
"""

STEPS, BATCH, INPUT, HIDDEN = 4, 8, 32, 64


class UnrolledGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(INPUT, HIDDEN)

    def forward(self, xs, h):
        for t in range(xs.shape[0]):  # a Python loop over a static length: unrolled at capture
            h = self.cell(xs[t], h)
        return h


model = UnrolledGRU().eval()
example_inputs = (torch.randn(STEPS, BATCH, INPUT), torch.randn(BATCH, HIDDEN))
