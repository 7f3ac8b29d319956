"""The wrapper's handling of library outputs' layouts (Note [Library output layout])."""
import torch

from engine.codegen.wrapper import with_layout


def test_strides_of_size_one_dims_do_not_make_a_copy():
    nchw = torch.randn(4, 8, 1, 1)  # the strides a library may report for an SE block's convolution output
    promised = (8, 1, 8, 8)  # channels-last, as the fake tensor said
    assert nchw.stride() != promised
    assert with_layout(nchw, (4, 8, 1, 1), promised) is nchw


def test_a_layout_that_moves_addresses_is_copied_into_the_promised_one():
    nchw = torch.randn(2, 3, 4, 5)
    channels_last = (60, 1, 15, 3)
    out = with_layout(nchw, (2, 3, 4, 5), channels_last)
    assert out.stride() == channels_last
    torch.testing.assert_close(out, nchw)
