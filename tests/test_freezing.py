"""Freezing (Note [Freezing]): parameters and buffers become constants, constant subgraphs fold, convolution or
Linear + an eval batch norm become one convolution or Linear with refolded weights; outputs match eager on both
backends, each fold is recorded, and freezing is refused for training."""
import subprocess
import sys

import pytest
import torch
from torch import nn

import engine
from engine.tools.model_file import load_model_file


def _folds(record, name):
    return [r for g in record.graphs for r in g.rewrites if r.rewrite == name and r.applied]


def _with_statistics(model):
    torch.manual_seed(0)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.normal_()
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.normal_()
            module.bias.data.normal_()
    return model.eval()


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_conv_batch_norm_folds_into_one_convolution(backend):
    spec = load_model_file("conv_bn_relu")
    record = engine.explore(_with_statistics(spec.model), spec.example_inputs, backend=backend, freezing=True)
    assert record.verify.ok, record.verify
    assert not record.errors, record.errors
    assert record.options.freezing and "freezing" in record.options.rewrites
    assert _folds(record, "freezing") and len(_folds(record, "conv_bn")) == 1
    # the convolution and one kernel for the ReLU: batch norm's normalization is gone
    assert [(k.kind, k.ops) for k in record.kernels] == [("extern", ["aten::convolution"]),
                                                         ("pointwise", ["aten::relu"])]
    unfrozen = engine.explore(spec.model, spec.example_inputs, backend=backend)
    assert not _folds(unfrozen, "conv_bn") and "freezing" not in unfrozen.options.rewrites
    assert len([op for k in unfrozen.kernels for op in k.ops]) > 2


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_linear_batch_norm_folds_into_one_linear(backend):
    model = _with_statistics(nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU()))
    record = engine.explore(model, (torch.randn(8, 16),), backend=backend, freezing=True)
    assert record.verify.ok, record.verify
    assert len(_folds(record, "conv_bn")) == 1
    assert not any("sub" in op or "sqrt" in op for k in record.kernels for op in k.ops)


def test_resnet_small_freezes_every_batch_norm():
    spec = load_model_file("resnet_small")
    model = _with_statistics(spec.model)
    batch_norms = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    record = engine.explore(model, spec.example_inputs, freezing=True)
    assert record.verify.ok, record.verify
    assert len(_folds(record, "conv_bn")) == batch_norms


class SharedConvOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y  # the convolution's output is read twice


def test_conv_output_read_elsewhere_is_not_folded():
    record = engine.explore(_with_statistics(SharedConvOutput()), (torch.randn(2, 3, 10, 10),), freezing=True)
    assert record.verify.ok, record.verify
    assert not _folds(record, "conv_bn")
    refusals = [r for g in record.graphs for r in g.rewrites if r.rewrite == "conv_bn" and not r.applied]
    assert refusals and "would change what the others read" in refusals[0].reason


@pytest.mark.slow
def test_freezing_is_for_inference():
    with pytest.raises(ValueError, match="inference"):
        engine.explore(nn.Linear(4, 4), (torch.randn(2, 4),), train=True, freezing=True)
    result = subprocess.run([sys.executable, "-m", "engine", "explore", "mlp", "--freeze", "--train"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "inference" in result.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_batch_norms_fold_on_the_gpu():
    """The refolded weights are made on the weights' device: a CUDA model freezes (no loud fallback) and
    matches eager, in half precision too."""
    spec = load_model_file("resnet_small")
    model = _with_statistics(spec.model).cuda()
    inputs = tuple(x.cuda() for x in spec.example_inputs)
    batch_norms = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    for dtype in (torch.float32, torch.float16):
        record = engine.explore(model.to(dtype), tuple(x.to(dtype) for x in inputs), backend="triton",
                                device="cuda", freezing=True)
        assert not record.errors, record.errors
        assert record.verify.ok, record.verify
        assert len(_folds(record, "conv_bn")) == batch_norms
