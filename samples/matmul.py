import torch

torch.manual_seed(0)

description = """
**A plain matrix multiply**, 128x128 @ 128x128, written as a function, not a module. There is nothing to fuse.
A compiler hands it to a library call (an *extern* kernel), or, with templates, generates a tiled matmul kernel
itself. Use it to see what an extern node looks like in the IR, and how the wrapper calls it.
"""


def model(a, b):
    return a @ b


example_inputs = (torch.randn(128, 128), torch.randn(128, 128))
