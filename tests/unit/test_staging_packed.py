"""The codec's inputs packed in one buffer (one host-to-device copy per step): aligned views of
the right shapes and dtypes, and one copy of the buffer carries every input."""

from __future__ import annotations

import torch

from controller.inference.staging import packed


def test_packed_views_are_aligned_typed_and_travel_in_one_copy() -> None:
    shapes = [((1, 67), torch.float32), ((1, 3, 21), torch.float32), ((1, 1), torch.int64),
              ((1, 5), torch.uint8), ((1, 0), torch.float32)]  # fmt: skip
    source, views = packed(shapes, torch.device("cpu"))
    base = source.data_ptr()
    for view, (shape, dtype) in zip(views, shapes, strict=True):
        assert view.shape == shape and view.dtype == dtype and view.is_contiguous()
        assert (view.data_ptr() - base) % 64 == 0
        assert view.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
    values = [torch.randn(1, 67), torch.randn(1, 3, 21), torch.tensor([[7]]), torch.arange(5)]
    for view, value in zip(views, values, strict=False):
        view.copy_(value.reshape(view.shape))
    target, received = packed(shapes, torch.device("cpu"))
    target.copy_(source)  # what the upload does, host to device
    for view, value in zip(received, values, strict=False):
        torch.testing.assert_close(view, value.reshape(view.shape).to(view.dtype))
