"""The copies ``clear()`` drops take the next batch's copies, only when nothing outside holds them.

Every test runs two batches through one open capture with ``clear()`` between them and checks two
things: a copy the user still holds (the tensor, a view, its storage, a ``Call``, autograd's saved
tensor, a NumPy array) keeps the values it had, and its memory is not among the second batch's;
what nobody holds is reused, and what the second batch keeps equals the model's own outputs.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.core.pool import MIN_BYTES


def net() -> nn.Module:
    torch.manual_seed(0)  # outputs of 8 x 16 x 32 x 32 float32: 512 KiB each, above MIN_BYTES
    layers = [nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.Identity()]
    return nn.Sequential(*layers).eval()


def batch(seed: int, rows: int = 8) -> Tensor:
    return torch.randn(rows, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def expected(model: nn.Module, x: Tensor) -> dict[str, Tensor]:
    with torch.no_grad():
        conv = model[0](x)
        bn = model[1](conv)
        return {"0": conv, "1": bn, "2": bn.relu(), "3": bn.relu()}


def pointers(cap: hookscope.Capture) -> set[int]:
    return {cap[name].output.data_ptr() for name in cap}


def run(cap: hookscope.Capture, model: nn.Module, x: Tensor) -> None:
    with torch.no_grad():
        model(x)


def check_values(cap: hookscope.Capture, model: nn.Module, x: Tensor) -> None:
    for name, want in expected(net(), x).items():  # the same weights, without the capture's hooks
        assert torch.equal(cap[name].output, want), name


def test_nothing_held_is_reused_and_right() -> None:
    model = net()
    with hookscope.capture(model) as cap:
        run(cap, model, batch(1))
        first = pointers(cap)
        cap.clear()
        run(cap, model, batch(2))
        assert pointers(cap) <= first  # every copy landed in memory the first batch used
        check_values(cap, model, batch(2))  # the in-place ReLU did not rewrite bn's copy; aliases stored once
        assert cap["2"].output is cap["3"].output
        assert len(cap._keeper._pool) == 0  # all taken
        cap.clear()
        assert 0 < len(cap._keeper._pool) <= 3  # at most what the last batch kept (3 distinct copies)
    assert len(cap._keeper._pool) == 0  # released at the block's exit


def _keep_tensor(cap: hookscope.Capture) -> Any:
    return cap["1"].output


def _keep_view(cap: hookscope.Capture) -> Any:
    return cap["1"].output[0]


def _keep_storage(cap: hookscope.Capture) -> Any:
    return cap["1"].output.untyped_storage()


def _keep_call(cap: hookscope.Capture) -> Any:
    return cap["1"].calls[0]


def _keep_data(cap: hookscope.Capture) -> Any:
    return cap["1"].output.data


def _keep_numpy(cap: hookscope.Capture) -> Any:
    return cap["1"].output.numpy()


def _keep_weakref(cap: hookscope.Capture) -> Any:
    return weakref.ref(cap["1"].output)


def _keep_parameter(cap: hookscope.Capture) -> Any:
    return nn.Parameter(cap["1"].output)


HOLDERS: dict[str, Callable[[hookscope.Capture], Any]] = {
    "tensor": _keep_tensor,
    "view": _keep_view,
    "storage": _keep_storage,
    "call": _keep_call,
    "data": _keep_data,
    "numpy": _keep_numpy,
    "weakref": _keep_weakref,
    "parameter": _keep_parameter,
}


def _values(held: Any) -> Tensor | None:
    if isinstance(held, weakref.ref):
        held = held()
    if held is None:
        return None
    if isinstance(held, hookscope.Call):
        return held.output.clone()
    if isinstance(held, torch.UntypedStorage):
        return torch.frombuffer(bytearray(bytes(held)), dtype=torch.uint8)
    return torch.as_tensor(held).detach().clone()


@pytest.mark.parametrize("how", list(HOLDERS))
def test_what_the_user_holds_is_never_reused(how: str) -> None:
    model = net()
    with hookscope.capture(model) as cap:
        run(cap, model, batch(1))
        held = HOLDERS[how](cap)
        before, pointer = _values(held), cap["1"].output.data_ptr()
        cap.clear()
        gc.collect()
        run(cap, model, batch(2))
        check_values(cap, model, batch(2))
        after = _values(held)
        if how == "weakref":  # not a holder: the copy was let go (and so not reused under it)
            assert after is None or torch.equal(after, before)
            return
        assert before is not None and after is not None and torch.equal(after, before)
        assert pointer not in pointers(cap)


def test_autograds_saved_tensor_is_never_reused() -> None:
    model = net()
    weight = torch.randn(16, 1, 1, requires_grad=True)
    with hookscope.capture(model) as cap:
        run(cap, model, batch(1))
        kept = cap["1"].output
        saved = kept.clone()
        loss = (kept * weight).sum()  # autograd saves `kept` (a C++ reference, no Python one)
        del kept
        cap.clear()
        run(cap, model, batch(2))
        loss.backward()
    assert torch.allclose(weight.grad, saved.sum(dim=(0, 2, 3)).view(16, 1, 1))


def test_a_new_shape_is_a_new_copy() -> None:
    model = net()
    with hookscope.capture(model) as cap:
        run(cap, model, batch(1))
        cap.clear()
        run(cap, model, batch(2, rows=4))
        check_values(cap, model, batch(2, rows=4))


def test_small_copies_and_other_policies_are_not_pooled() -> None:
    model = net()
    small = batch(1, rows=1)[:, :, :8, :8]  # 16 x 8 x 8 float32 per output: below MIN_BYTES
    assert MIN_BYTES > 16 * 8 * 8 * 4
    with hookscope.capture(model) as cap:
        run(cap, model, small)
        cap.clear()
        assert len(cap._keeper._pool) == 0
    for options in ({"clone": False}, {"detach": False}, {"dtype": torch.float16}, {"device": "cpu"}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hookscope.CaptureWarning)  # clone=False: bn's output changed in place
            with hookscope.capture(model, **options) as cap:  # type: ignore[arg-type]
                run(cap, model, batch(1))
                assert cap._keeper._pool is None


def test_inference_mode_copies_stay_inference_tensors() -> None:
    model = net()
    with hookscope.capture(model) as cap:
        run(cap, model, batch(1))
        cap.clear()
        with torch.inference_mode():
            model(batch(2))
        assert cap["1"].output.is_inference()
        check_values(cap, model, batch(2))
