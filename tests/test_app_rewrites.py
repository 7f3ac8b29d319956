"""The explorer's rewrites stage without a browser (AppTest): the hand-written attention sample shows its match
with the matched nodes marked, and the sidebar's "Freeze weights" toggle explores with --freeze, whose folds the
stage lists."""
from __future__ import annotations

import pytest

from test_app import dots, markdown_text, started

pytestmark = pytest.mark.slow  # the app's script with a sandboxed worker (Note [Two lanes], tests/conftest.py)


def test_rewrites_stage_shows_attention_and_the_freeze_toggle_folds_batch_norm():
    at = started()
    at.selectbox(key="sample").set_value("handwritten_attention").run()
    at.button_group(key="stage_left").set_value("rewrites").run()
    assert not at.exception, at.exception
    text = markdown_text(at)
    assert "compute attention" in text and "Before" in text
    marked = [dot for dot in dots(at) if "gb-selected" in dot]
    assert len(marked) == 2 and "scaled_dot_product_attention" in marked[1]  # before and after, both marked
    at.selectbox(key="sample").set_value("conv_bn_relu").run()
    at.toggle(key="freeze").set_value(True).run()
    assert not at.exception, at.exception
    at.button_group(key="stage_left").set_value("rewrites").run()
    text = markdown_text(at)
    assert "passes that ran: freezing, conv_bn" in text, text[-2000:]
    assert any("conv_bn" in str(frame.value) for frame in at.dataframe), [str(f.value) for f in at.dataframe]
