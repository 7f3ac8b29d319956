import torch
from torch import nn

torch.manual_seed(0)

description = """
**A model that returns a dict**: `{"embedding", "logits", "probs"}`, as many library models do. A compiled graph
returns a flat list of tensors. Dynamo records how to rebuild the dict around the graph's outputs, so the
caller still gets a dict. The graph itself has three outputs. The softmax that makes `probs` can fuse with the
bias add that makes `logits`, but `logits` must still be written out, because it is returned.
"""


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.GELU())
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        embedding = self.encoder(x)
        logits = self.head(embedding)
        return {"embedding": embedding, "logits": logits, "probs": logits.softmax(-1)}


model = Classifier().eval()
example_inputs = (torch.randn(16, 64),)
