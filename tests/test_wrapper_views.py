"""Note [Buffers as the wrapper holds them]: in a channels-last graph the wrapper holds the tensors our kernels
store NHWC in the NCHW shape the convolutions take, and hands whole buffers (1x1 weights included, whose
size-1 dims' strides differ from a view's) over by name: a chain of convolutions makes no view per call, and
its outputs equal eager. Through the Triton interpreter and the C++ backend."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from engine.pipeline import Options, compile_graph


def _chain(x, stem, reduce, expand):
    y = torch.relu(F.conv2d(x, stem, padding=1))
    z = torch.relu(F.conv2d(y, reduce))
    return F.conv2d(z, expand) + y


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_convolution_chain_makes_no_views(backend):
    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 6, 7), torch.randn(8, 3, 3, 3), torch.randn(4, 8, 1, 1), torch.randn(8, 4, 1, 1)]
    gm = make_fx(_chain, tracing_mode="fake")(*inputs)
    compiled = compile_graph(gm, inputs, Options(backend=backend, layout="channels_last", templates="off"))
    namespace, views = compiled.call.__globals__, []
    strided_view = namespace["strided_view"]

    def counting(*args):
        views.append(tuple(args[0].shape))
        return strided_view(*args)
    namespace["strided_view"] = counting
    (out,) = compiled.call(list(inputs))
    torch.testing.assert_close(out, _chain(*inputs), atol=1e-4, rtol=1e-4)
    assert out.stride() == _chain(*inputs).stride()
    assert not views, views
