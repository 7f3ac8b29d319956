import torch

torch.manual_seed(0)

description = """
**A graph break.** The branch on `flag.sum() > 0` depends on tensor *data*, which Dynamo cannot know while
tracing, and `print()` is a side effect it will not put into a graph. Dynamo splits the function: one graph up
to the break, Python runs the branch and the print, and further graphs for what follows. Each graph is compiled
on its own, so fusion cannot cross a break. Look for the break reasons and the source lines they point to.
"""


def model(x, flag):
    y = x * 2.0
    if flag.sum() > 0:  # data-dependent control flow: a graph break
        z = torch.relu(y)
    else:
        z = torch.sigmoid(y)
    print("graph_break sample: branch taken")  # a side effect: another graph break
    return z + 1.0


example_inputs = (torch.randn(64, 256), torch.ones(8))
