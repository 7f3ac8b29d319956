import torch
from torch import nn

torch.manual_seed(0)

description = """
**Variable sequence length**: a LayerNorm and a Linear over `(batch, seq, 64)`, called at seq 16, then 24, 40
and 64. On the first new length Dynamo's guard on the input shape fails and it recompiles. After that it marks
the dimension dynamic, so the graph has a size symbol instead of a constant (Dynamo names it: an `s` and a
number it derives from where the size comes from; find it in the input sizes), and later lengths reuse
one compiled graph. Watch the guards, the recompile reasons and the sympy sizes in the loop IR.
"""

model = nn.Sequential(
    nn.LayerNorm(64),
    nn.Linear(64, 32),
).eval()

example_inputs = (torch.randn(2, 16, 64),)
dynamic_inputs = [(torch.randn(2, n, 64),) for n in (24, 40, 64)]
