"""1x1 convolutions as GEMM templates in channels-last graphs (Note [1x1 convolutions as GEMMs]): the pixel frame
reads NHWC as the (N*H*W, Cin) matrix it is, so a conv -> batch norm -> ReLU -> conv + residual block keeps
its epilogues fused when the graph is channels-last, through the C++ backend and the Triton interpreter, and
matches eager; so does the library + epilogue mode of the same kernels."""
import pytest
import torch

import engine
from engine.runtime import gemm_launch

TOLERANCE = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=1e-1, rtol=5e-2)}


class Bottleneck(torch.nn.Module):
    def __init__(self, c=24, hidden=40):
        super().__init__()
        self.reduce = torch.nn.Conv2d(c, hidden, 1)
        self.bn = torch.nn.BatchNorm2d(hidden)
        self.expand = torch.nn.Conv2d(hidden, c, 1, bias=False)

    def forward(self, x):
        y = torch.relu(self.bn(self.reduce(x)))
        return torch.relu(self.expand(y) + x)


class SqueezeExcite(torch.nn.Module):
    """The pooled (N, C, 1, 1) tensor's 1x1 convolutions: H*W is 1, so the pixels are the images."""

    def __init__(self, c=32, squeezed=16):
        super().__init__()
        self.squeeze, self.excite = torch.nn.Conv2d(c, squeezed, 1), torch.nn.Conv2d(squeezed, c, 1)

    def forward(self, x):
        scale = torch.sigmoid(self.excite(torch.relu(self.squeeze(x.mean((2, 3), keepdim=True)))))
        return x * scale


def _templates(exploration):
    return [k.template for k in exploration.kernels if k.kind == "template"]


def _explore(model, inputs, backend, dtype, **options):
    torch.manual_seed(0)
    model = model.to(dtype).eval()
    inputs = tuple(x.to(dtype) for x in inputs)
    exploration = engine.explore(model, inputs, backend=backend, templates="on", tolerance=TOLERANCE[dtype],
                                 **options)
    assert exploration.verify.ok, exploration.verify
    return exploration


@pytest.mark.parametrize("backend,dtype", [("cpp", torch.float32), ("triton", torch.float32),
                                           ("triton", torch.bfloat16)], ids=["cpp", "triton", "triton-bf16"])
def test_channels_last_bottleneck_fuses_both_convolutions(backend, dtype):
    torch.manual_seed(0)
    exploration = _explore(Bottleneck(), (torch.randn(2, 24, 5, 7),), backend, dtype, layout="channels_last")
    assert exploration.graphs[0].memory.layout["format"] == "channels_last"
    reduce, expand = sorted(_templates(exploration), key=lambda t: t.spec.N, reverse=True)
    # the graph's input is NCHW: one GEMM per image, pixels as rows; its NHWC output feeds one GEMM of all pixels
    assert (reduce.spec.batch, reduce.spec.M, reduce.spec.N) == (2, 35, 40)
    assert (expand.spec.batch, expand.spec.M, expand.spec.N) == (1, 70, 24)
    for template in (reduce, expand):
        assert any("relu" in op for fused in template.fused_ops for op in fused.ops), template.fused_ops
    assert exploration.graphs[0].fusion.templates[0].template


def test_nchw_graph_keeps_the_image_frame():
    torch.manual_seed(0)
    exploration = _explore(Bottleneck(), (torch.randn(2, 24, 5, 7),), "cpp", torch.float32, layout="contiguous")
    shapes = sorted((t.spec.batch, t.spec.M, t.spec.N) for t in _templates(exploration))
    assert shapes == [(2, 24, 35), (2, 40, 35)]  # W[Cout, Cin] @ X[Cin, H*W] per image


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_pooled_1x1_convolutions_are_one_gemm_over_the_images(layout):
    torch.manual_seed(0)
    exploration = _explore(SqueezeExcite(), (torch.randn(3, 32, 4, 6),), "cpp", torch.float32, layout=layout)
    specs = [t.spec for t in _templates(exploration)]
    assert sorted((s.batch, s.M, s.N, s.K) for s in specs) == [(1, 3, 16, 32), (1, 3, 32, 16)]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_channels_last_library_then_epilogue_matches_eager(backend, monkeypatch):
    """The library convolution's NHWC result is what the epilogue-only kernel reads (in the output's order)."""
    monkeypatch.setattr(gemm_launch.TemplateLaunch, "_template_run", lambda self, config: self._library_run(config))
    torch.manual_seed(0)
    exploration = _explore(Bottleneck(), (torch.randn(2, 24, 5, 7),), backend, torch.float32,
                           layout="channels_last")
    assert len(_templates(exploration)) == 2


def test_channels_last_max_autotune_times_the_pixel_frame(monkeypatch, tmp_path):
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    exploration = _explore(Bottleneck(), (torch.randn(2, 24, 5, 7),), "cpp", torch.float32,
                           layout="channels_last", mode="max-autotune")
    for template in _templates(exploration):
        tuning = template.autotune
        assert tuning.winner and any(c.candidate == "library + epilogue" for c in tuning.candidates)
