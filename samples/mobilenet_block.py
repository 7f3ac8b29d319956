import torch
from torch import nn

torch.manual_seed(0)

description = """
**A MobileNet depthwise-separable block**: a 3x3 depthwise conv (`groups=channels`: each channel is filtered
on its own) -> BN -> ReLU6, then a 1x1 pointwise conv that mixes channels -> BN -> ReLU6, on 2x32x16x16 in eval
mode. ReLU6 is `clamp(x, 0, 6)`, one pointwise op. The depthwise conv does little arithmetic per byte, so it is
memory-bound, and fusing BN + ReLU6 into one pass matters. The 1x1 conv is really a matmul over channels.
"""

CHANNELS, OUT_CHANNELS = 32, 64

model = nn.Sequential(
    nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1, groups=CHANNELS, bias=False),  # depthwise
    nn.BatchNorm2d(CHANNELS),
    nn.ReLU6(),
    nn.Conv2d(CHANNELS, OUT_CHANNELS, 1, bias=False),  # pointwise
    nn.BatchNorm2d(OUT_CHANNELS),
    nn.ReLU6(),
)
with torch.no_grad():  # non-trivial running statistics, so eval-mode BN is more than an identity
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features) + 0.5)
model.eval()
example_inputs = (torch.randn(2, CHANNELS, 16, 16),)
