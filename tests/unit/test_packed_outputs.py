"""The graph tier's outputs packed in one buffer: views with each output's shape and values, in
the buffer's memory, so that one copy of the buffer downloads them all."""

from __future__ import annotations

import torch

from controller.inference.output_download import PackedOutputs, packed_outputs


def test_packed_outputs_are_views_of_one_buffer_with_each_outputs_values() -> None:
    outputs = (torch.randn(1, 3, 21), torch.randn(1, 3, 21), torch.randn(1, 4))
    packed = torch.cat([o.reshape(-1) for o in outputs])
    views = packed_outputs(packed, outputs)
    assert isinstance(views, PackedOutputs) and views.packed is packed
    for view, out in zip(views, outputs, strict=True):
        assert view.shape == out.shape
        torch.testing.assert_close(view, out)
        assert view.untyped_storage().data_ptr() == packed.untyped_storage().data_ptr()
    packed.fill_(2.0)  # what a replay does: the views see the new values
    assert all(bool((view == 2.0).all()) for view in views)
