"""Channels-last training graphs (Note [Channels-last training graphs] in engine/lowering/layout.py, Note [Saved
values in the forward's strides] in engine/partition.py): with the layout forced on, both halves of a training
step store the tensors around their convolutions channels-last, the forward hands its saved tensors to the backward
in that layout with no copy on either side, and the loss, the gradients and the gradients' strides are eager's."""
import copy

import pytest
import torch
from torch import nn

import engine
from engine.lowering import layout
from engine.partition import restride_saved_inputs
from engine.runtime.wrapper import FirstRunGuard


class ResidualNet(nn.Module):
    """conv-bn-relu, conv-bn with a residual add, relu, global pooling and a linear head."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.head = nn.Linear(c, 4)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(y + self.bn2(self.conv2(y)))
        return self.head(y.mean((2, 3)))


def _halves(exploration):
    forward = next(g for g in exploration.graphs if g.phase == "forward")
    backward = next(g for g in exploration.graphs if g.phase == "backward")
    return forward.memory.layout, backward.memory.layout


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_forced_channels_last_training_step_hands_saved_tensors_over_without_a_copy(backend):
    torch.manual_seed(0)
    exploration = engine.explore(ResidualNet().train(), (torch.randn(2, 3, 6, 7),), backend=backend, train=True,
                                 layout="channels_last")
    assert not exploration.errors, exploration.errors[0].message
    assert exploration.verify.ok, [(e.name, e.max_abs_err) for e in exploration.verify.gradients if not e.ok]
    forward, backward = _halves(exploration)
    for half in (forward, backward):
        assert half["format"] == "channels_last" and "forced" in half["reason"], half
    assert "saved for the backward" in forward["reason"] and "handed them over" in backward["reason"]
    # the convolutions' outputs are saved channels-last as they were stored, and arrive so in the backward
    assert forward["handed_over"] and set(forward["handed_over"]) <= set(backward["received"]), (forward, backward)
    # no kernel of either half copies a saved tensor into another layout
    assert not set(backward["converted"].values()) & set(backward["received"]), backward["converted"]
    assert not set(forward["converted"].values()) & set(forward["handed_over"]), forward["converted"]


def test_forced_channels_last_gradients_keep_eager_values_and_strides():
    torch.manual_seed(0)
    model = ResidualNet().train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 7)
    compiled = engine.compile(model, backend="cpp", layout="channels_last")
    loss, expected = compiled(x).sum(), reference(x).sum()
    loss.backward()
    expected.backward()
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
    for (name, ours), theirs in zip(model.named_parameters(), reference.parameters()):
        assert ours.grad.stride() == theirs.grad.stride() == ours.stride(), name  # a conv weight's .grad too
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-4, rtol=1e-4, msg=name)
    for ours, theirs in zip(model.buffers(), reference.buffers()):  # running stats written as eager writes them
        torch.testing.assert_close(ours, theirs)
    torch._dynamo.reset()


def test_auto_on_the_cpu_keeps_both_halves_nchw():
    torch.manual_seed(0)
    exploration = engine.explore(ResidualNet().train(), (torch.randn(2, 3, 6, 7),), backend="cpp", train=True)
    forward, backward = _halves(exploration)
    assert forward["format"] == backward["format"] == "contiguous", (forward, backward)
    assert "CPU" in forward["reason"] and "CPU" in backward["reason"]
    assert not forward["handed_over"] and not backward["received"]


def test_a_backward_follows_what_its_saved_tensors_arrive_in():
    """On CUDA a backward graph goes channels-last exactly when saved tensors arrive channels-last."""
    half = dict(dtype=torch.float16)

    def backward(grad, saved, weight):
        return torch.ops.aten.convolution_backward(grad, saved, weight, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   [True, True, False])

    args = [torch.randn(2, 8, 6, 7, **half), torch.randn(2, 8, 6, 7, **half), torch.randn(8, 8, 3, 3, **half)]
    gm = torch.fx.experimental.proxy_tensor.make_fx(backward, tracing_mode="fake")(*args)
    kept = layout.decide_layout(gm, "cuda", "backward")
    assert not kept.channels_last and "eager's strides" in kept.reason, kept
    # AOTAutograd's example inputs, the saved one restrided to what the forward reported
    restride_saved_inputs(gm, [args[0], args[1].to(memory_format=torch.channels_last), args[2]])
    followed = layout.decide_layout(gm, "cuda", "backward")
    assert followed.channels_last and "as the forward" in followed.reason, followed
    assert followed.preferred, followed  # the convolution gradient and what feeds it


class ResNetStyle(nn.Module):
    """A stem, two residual blocks (one strided with a 1x1 shortcut) and a head, at ResNet's channel counts."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.block1 = self._block(64, 64, 1)
        self.block2, self.shortcut = self._block(64, 128, 2), nn.Sequential(nn.Conv2d(64, 128, 1, 2, bias=False),
                                                                            nn.BatchNorm2d(128))
        self.head = nn.Linear(128, 10)

    @staticmethod
    def _block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.stem(x)
        y = torch.relu(y + self.block1(y))
        y = torch.relu(self.shortcut(y) + self.block2(y))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_resnet_style_training_step_on_cuda_goes_channels_last_by_itself():
    torch.manual_seed(0)
    model = ResNetStyle().cuda().to(torch.bfloat16).train()
    x = torch.randn(8, 3, 64, 64, device="cuda", dtype=torch.bfloat16)
    exploration = engine.explore(model, (x,), backend="triton", device="cuda", train=True)
    assert not exploration.errors, exploration.errors[0].message
    assert exploration.verify.ok, [(e.name, e.max_abs_err) for e in exploration.verify.gradients if not e.ok]
    forward, backward = _halves(exploration)
    assert forward["format"] == backward["format"] == "channels_last", (forward, backward)
    assert "by FLOPs" in forward["reason"] and "as the forward" in backward["reason"]
    assert forward["handed_over"] and set(forward["handed_over"]) <= set(backward["received"])
    torch._dynamo.reset()


def test_an_eager_fallback_returns_what_the_backward_was_told():
    """Note [Saved values in the forward's strides]: a forward that falls back to eager on its first run still
    hands its saved tensors over in the strides it reported."""
    gm = torch.fx.experimental.proxy_tensor.make_fx(lambda x: (x.sum(), torch.relu(x)))(torch.randn(2, 3, 4, 5))
    reported = [None, (60, 1, 15, 3)]
    call = FirstRunGuard(lambda args: 1 / 0, gm, lambda error: None, reported)
    x = torch.randn(2, 3, 4, 5)
    total, saved = call([x])
    assert saved.stride() == reported[1] and torch.equal(saved, torch.relu(x)) and torch.equal(total, x.sum())
