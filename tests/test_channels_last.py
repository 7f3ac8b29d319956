"""Channels-last convolutions (Note [Channels-last convolutions]): with the layout forced on (on CUDA the
heuristic turns it on), the library convolutions get NHWC inputs and weights, our kernels store the tensors
between convolutions in N, H, W, C order, the graph's outputs keep eager's strides, and the outputs equal eager;
through the Triton interpreter and the C++ backend. The record says the layout and why."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import engine
from engine.runtime.wrapper import LibraryCall
from engine.lowering import layout
from engine.pipeline import Options, compile_graph

aten = torch.ops.aten


class ConvBlock(nn.Module):
    """A stem conv, a depthwise conv with a residual add, squeeze-excitation and a pointwise conv."""

    def __init__(self, c=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        self.depthwise = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=c), nn.BatchNorm2d(c), nn.SiLU())
        self.squeeze, self.excite = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)
        self.pointwise = nn.Conv2d(c, 24, 1)

    def forward(self, x):
        y = self.stem(x)
        y = y + self.depthwise(y)
        y = y * torch.sigmoid(self.excite(torch.relu(self.squeeze(y.mean((2, 3), keepdim=True)))))
        return torch.relu(self.pointwise(y))


def _model():
    torch.manual_seed(0)
    model = ConvBlock().eval()
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return model, (torch.randn(2, 3, 6, 7),)


def _convnet(x, stem, depthwise, pointwise):
    y = torch.relu(F.conv2d(x, stem, padding=1))
    y = y + torch.sigmoid(F.conv2d(y, depthwise, padding=1, groups=y.shape[1]))
    return F.conv2d(y * 2, pointwise)


def _recording_convs(compiled) -> list:
    """Wraps the wrapper's library convolutions so that each call records (input, weight) channels-last-ness."""
    namespace, seen = compiled.call.__globals__, []
    for name, op in list(namespace.items()):
        if isinstance(op, LibraryCall) and op.target is aten.convolution.default:
            def record(*args, _op=op, **kwargs):
                seen.append(tuple(t.is_contiguous(memory_format=torch.channels_last) for t in args[:2]))
                return _op(*args, **kwargs)
            namespace[name] = record
    return seen


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_library_convolutions_get_nhwc_arguments(backend):
    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 6, 7), torch.randn(16, 3, 3, 3), torch.randn(16, 1, 3, 3), torch.randn(24, 16, 1, 1)]
    gm = make_fx(_convnet, tracing_mode="fake")(*inputs)
    compiled = compile_graph(gm, inputs, Options(backend=backend, layout="channels_last"))
    seen = _recording_convs(compiled)
    (out,) = compiled.call(list(inputs))
    expected = _convnet(*inputs)
    assert len(seen) == 3 and all(weight for _, weight in seen), seen  # weights converted (kept after once)
    assert all(x for x, _ in seen[1:]), seen  # the convolutions after the stem read our kernels' NHWC output
    assert out.stride() == expected.stride()  # the graph's output keeps eager's strides
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_forced_channels_last_matches_eager(backend):
    model, inputs = _model()
    exploration = engine.explore(model, inputs, backend=backend, layout="channels_last")
    assert not exploration.errors, exploration.errors[0].message
    assert exploration.verify.ok, exploration.verify
    memory = exploration.graphs[0].memory.layout
    assert memory["format"] == "channels_last" and "forced" in memory["reason"], memory
    assert memory["buffers"]  # our kernels wrote some tensors channels-last


def test_decision_and_its_reasons():
    model, inputs = _model()
    off = engine.explore(model, inputs, backend="triton")  # auto on the CPU: NCHW, and why
    record = off.graphs[0].memory.layout
    assert record["format"] == "contiguous" and "CPU" in record["reason"] and not record["buffers"]
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    assert "no 2D convolution" in layout.decide_layout(gm, "cuda", "inference").reason


def test_weight_conversion_is_kept_until_the_parameter_changes():
    convert = layout.ChannelsLastWeight()
    weight = torch.randn(8, 4, 3, 3)
    first = convert(weight)
    assert first.is_contiguous(memory_format=torch.channels_last) and torch.equal(first, weight)
    assert convert(weight) is first  # converted once
    with torch.no_grad():
        weight.add_(1)  # an in-place update bumps the version counter
    again = convert(weight)
    assert again is not first and torch.equal(again, weight)


def _grouped(x, weight):
    return F.conv2d(x, weight, padding=1, groups=2)


def test_cuda_heuristic_weighs_the_convolutions_flops():
    """On CUDA, inference graphs go channels-last unless grouped convolutions (more than one input channel per
    group: slower in NHWC) carry the FLOPs; a training forward by the same rule, its backward as the forward
    handed the saved tensors over (Note [Channels-last training graphs])."""
    half = dict(dtype=torch.float16)
    inputs = [torch.randn(2, 3, 6, 7, **half), torch.randn(16, 3, 3, 3, **half), torch.randn(16, 1, 3, 3, **half),
              torch.randn(24, 16, 1, 1, **half)]
    gm = make_fx(_convnet, tracing_mode="fake")(*inputs)
    on = layout.decide_layout(gm, "cuda", "inference")
    assert on.channels_last and "small" in on.reason and on.preferred, on
    forward = layout.decide_layout(gm, "cuda", "forward")
    assert forward.channels_last and "saved for the backward" in forward.reason, forward
    assert not layout.decide_layout(gm, "cuda", "backward").channels_last  # its inputs arrive NCHW
    grouped = make_fx(_grouped, tracing_mode="fake")(torch.randn(2, 16, 8, 8, **half), torch.randn(16, 8, 3, 3, **half))
    off = layout.decide_layout(grouped, "cuda", "inference")
    assert not off.channels_last and "grouped" in off.reason, off


def test_float32_convolutions_stay_nchw_while_cudnn_may_use_tf32(monkeypatch):
    """Note [Channels-last and TF32]: cuDNN's NHWC float32 kernels compute in TF32, eager's NCHW ones did not."""
    inputs = [torch.randn(2, 3, 6, 7), torch.randn(16, 3, 3, 3), torch.randn(16, 1, 3, 3), torch.randn(24, 16, 1, 1)]
    gm = make_fx(_convnet, tracing_mode="fake")(*inputs)
    # the flag is read through the cudnn module's class: patched there, it needs no real cuDNN state, and it
    # works after torch.testing's common_utils (imported by the OpInfo tests) froze the global flags
    cudnn = type(torch.backends.cudnn)
    monkeypatch.setattr(cudnn, "allow_tf32", True)
    kept = layout.decide_layout(gm, "cuda", "inference")
    assert not kept.channels_last and "TF32" in kept.reason, kept
    assert layout.decide_layout(gm, "cuda", "inference", "channels_last").channels_last  # forcing still works
    monkeypatch.setattr(cudnn, "allow_tf32", False)
    assert layout.decide_layout(gm, "cuda", "inference").channels_last
