"""A record's calls: filed flat by a capture's hooks in one table (``CallTable``), made ``Call`` objects when
read, in call order, the same objects on every read; written only through ``add_call`` and ``set_calls``;
forgotten at once by ``clear()``. And what the hooks keep: a ``clone=False`` reference to a tensor without
a graph is the tensor itself, a copy is the one ``detach().clone()`` makes, an alias of a view seen
before at the same address is stored once (two views at one address each keep theirs)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.core.call import Call
from hookscope.core.records import CallTable, Record


def _record(name: str) -> Record:
    return Record(name, "Linear", ("output",))


def test_rows_become_calls_in_filing_order_when_a_record_is_read() -> None:
    table = CallTable()
    a, b = table.join(_record("a")), table.join(_record("b"))
    t0, t1, t2 = torch.arange(3.0), torch.arange(3.0) + 1, torch.arange(3.0) + 2
    file = table.filer()
    file((a, 0, "output", t0))
    file((b, 1, "output", t1))
    file((a, 2, "output", None))  # a reducer that kept nothing
    assert [id(t) for t in table.kept()] == [id(t0), id(t1)] and len(table.rows) == 3  # kept() made no call
    calls = a.calls
    assert table.rows == []  # reading one record made every row a Call
    assert [(c.site, c.index, c.order) for c in calls] == [("a", 0, 0), ("a", 1, 2)]
    assert calls[0].output is t0 and calls[1].tensors == {"output": {}}
    assert b.calls[0].get("output") is t1 and b.called() == 1
    file((a, 3, "output", t2))
    a.add_call(Call("a", a.called(), order=4))  # a call made the long way goes after the rows filed before it
    assert a.calls is calls and [(c.index, c.order) for c in calls] == [(0, 0), (1, 2), (2, 3), (3, 4)]
    assert calls[2].output is t2
    assert table.clear() == {a, b}
    assert a.calls is calls and calls == [] and b.calls == [] and table.kept() == []


def test_a_record_outside_a_capture_is_written_through_its_methods() -> None:
    record = _record("solo")
    first, second = Call("solo", 0, tensors={"output": {"out": torch.ones(2)}}), Call("solo", 1)
    record.add_call(first)
    record.add_call(second)
    calls = record.calls
    assert calls == [first, second] and record.called() == 2 and torch.equal(record.kept()[0], torch.ones(2))
    replaced = [second]
    record.set_calls(replaced)
    assert record.calls is replaced and record.called() == 1


def test_a_capture_makes_each_call_once_and_clear_forgets_them_all() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2)), torch.randn(2, 3)
    with hookscope.capture(model) as cap, torch.no_grad():
        model(x)
        calls = cap["0"].calls
        first = calls[0]
        model(x)
        assert cap["0"].calls is calls and calls[0] is first and [c.index for c in calls] == [0, 1]
        assert [c.order for r in cap.values() for c in r.calls] == [0, 3, 1, 4, 2, 5]
        cap.clear()
        assert calls == [] and all(not r.calls for r in cap.values())
        model(x)
    assert [c.index for c in cap["0"].calls] == [0] and torch.equal(cap["2"].output, model(x))


def test_clone_false_keeps_a_tensor_without_a_graph_as_itself_and_detaches_one_with_a_graph() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), torch.randn(2, 4)
    seen: list[Tensor] = []
    model[0].register_forward_hook(lambda module, args, out: seen.append(out))
    with hookscope.capture(model, clone=False) as cap, torch.no_grad():
        model(x)
    assert cap["0"].output is seen[0]  # no graph to drop: the reference is the tensor
    with hookscope.capture(model, clone=False) as cap:
        model(x)
    kept = cap["0"].output
    assert kept is not seen[1] and seen[1].requires_grad and not kept.requires_grad and kept.grad_fn is None
    assert kept.data_ptr() == seen[1].data_ptr() and torch.equal(kept, seen[1])


@pytest.mark.parametrize("grad", [False, True])
def test_a_copy_is_what_detach_clone_makes(grad: bool) -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.Tanh()), torch.randn(2, 4)
    seen: list[Tensor] = []
    model[1].register_forward_hook(lambda module, args, out: seen.append(out.detach().clone()))
    with hookscope.capture(model) as cap, torch.set_grad_enabled(grad):
        model(x)
    kept = cap["1"].output
    assert torch.equal(kept, seen[0]) and kept.stride() == seen[0].stride() and kept.dtype == seen[0].dtype
    assert not kept.requires_grad and kept.grad_fn is None and kept.data_ptr() != seen[0].data_ptr()


class _Views(nn.Module):
    """Two views at one address (the whole tensor and its first row), each passed through twice."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = nn.Identity(), nn.Identity(), nn.Identity(), nn.Identity()

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        y = x * 2
        return self.a(y), self.b(y[:1]), self.c(y), self.d(y[:1])


def test_views_at_one_address_keep_one_copy_each() -> None:
    model, x = _Views(), torch.arange(6.0).reshape(3, 2)
    with hookscope.capture(model, ["a", "b", "c", "d"]) as cap, torch.no_grad():
        model(x)
    a, b, c, d = (cap[name].output for name in "abcd")
    assert c is a and d is b and a is not b  # an alias shares its view's copy, another view has its own
    assert torch.equal(a, x * 2) and torch.equal(b, (x * 2)[:1])
