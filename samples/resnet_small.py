import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A small ResNet**: a conv stem, three basic blocks (16 -> 32 -> 64 channels), adaptive average pooling and
a linear classifier, on 2x3x32x32 in eval mode. The blocks that change width or stride use a 1x1 conv on the
shortcut. Per block expect two or three conv calls plus fused BN/ReLU/add kernels. The global average pool is
a reduction, and it can fuse with the final ReLU before it.
"""


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:  # the shortcut must match the new shape
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 32, stride=2), BasicBlock(32, 64, stride=2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


model = SmallResNet()
with torch.no_grad():  # non-trivial running statistics, so eval-mode BN is more than an identity
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features) + 0.5)
model.eval()
example_inputs = (torch.randn(2, 3, 32, 32),)
