import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A one-level U-Net block**: convolve, downsample with max-pooling, convolve at half resolution, upsample back
with `F.interpolate` (bilinear), concatenate with the skip connection (`torch.cat` along channels) and fuse
with a final conv, on 2x8x32x32. Max-pool is a small window reduction. Bilinear upsampling is a pointwise
kernel that gathers four neighbours with computed indexes. A compiler can also avoid the `cat` copy by having
each producer write straight into its slice of the output buffer.
"""


def conv_relu(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU())


class UNetBlock(nn.Module):
    def __init__(self, cin: int = 8, width: int = 16):
        super().__init__()
        self.down_conv = conv_relu(cin, width)
        self.bottom_conv = conv_relu(width, 2 * width)
        self.up_conv = conv_relu(2 * width + width, width)  # upsampled features + skip
        self.out = nn.Conv2d(width, cin, 1)

    def forward(self, x):
        skip = self.down_conv(x)
        y = self.bottom_conv(F.max_pool2d(skip, 2))
        y = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        y = self.up_conv(torch.cat((y, skip), dim=1))
        return self.out(y)


model = UNetBlock().eval()
example_inputs = (torch.randn(2, 8, 32, 32),)
