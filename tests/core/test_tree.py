"""hookscope.tree: structured values to flat, stable keys."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple

import pytest
import torch
from torch import Tensor
from transformers.modeling_outputs import BaseModelOutputWithPooling

from hookscope.core.tree import flatten, flatten_call

A, B, C, D = (torch.full((2,), float(i)) for i in range(4))

Point = namedtuple("Point", ["x", "y"])


@dataclasses.dataclass
class Pair:
    main: Tensor
    aux: Tensor | None
    note: str = "skipped"


def keys(leaves: list[tuple[str, Tensor]]) -> list[str]:
    return [k for k, _ in leaves]


def test_plain_tensor_is_out():
    """A bare tensor is one leaf, keyed by the prefix, and is the same object."""
    (leaf,) = flatten(A)
    assert leaf[0] == "out"
    assert leaf[1] is A
    assert keys(flatten(A, "x")) == ["x"]


def test_tuple_and_list_items():
    """Tuple and list items are keyed by index and returned as the same objects."""
    assert flatten((A, B)) == [("out[0]", A), ("out[1]", B)]
    assert flatten([A, B, C]) == [("out[0]", A), ("out[1]", B), ("out[2]", C)]


def test_nested_tuples():
    """Nested tuples and lists chain their indices."""
    assert keys(flatten((A, (B, [C, (D,)])))) == ["out[0]", "out[1][0]", "out[1][1][0]", "out[1][1][1][0]"]


def test_dict_with_str_keys():
    """Dict items with str keys read like Python subscripts, in insertion order."""
    leaves = flatten({"logits": A, "it's": B})
    assert leaves == [("out['logits']", A), ('out["it\'s"]', B)]


def test_dict_with_non_str_keys():
    """Non-str dict keys use their repr."""
    assert keys(flatten({0: A, (1, 2): B, None: C})) == ["out[0]", "out[(1, 2)]", "out[None]"]


def test_ordered_dict_keeps_insertion_order():
    """An OrderedDict flattens in its order, not sorted."""
    assert keys(flatten(OrderedDict([("z", A), ("a", B)]))) == ["out['z']", "out['a']"]


def test_dataclass_fields_none_and_str_skipped():
    """Dataclass fields become attributes; None and non-tensor fields are skipped."""
    assert flatten(Pair(A, None)) == [("out.main", A)]
    assert keys(flatten(Pair(A, B))) == ["out.main", "out.aux"]


def test_namedtuple_fields():
    """Namedtuple items are keyed by field name, not index."""
    assert flatten(Point(A, B)) == [("out.x", A), ("out.y", B)]


def test_model_output_skips_none_fields():
    """A HuggingFace ModelOutput yields its set fields in field order, None ones skipped."""
    value = BaseModelOutputWithPooling(last_hidden_state=A, pooler_output=None, hidden_states=(B, C), attentions=None)
    assert flatten(value) == [
        ("out.last_hidden_state", A),
        ("out.hidden_states[0]", B),
        ("out.hidden_states[1]", C),
    ]


def test_model_output_first_field_none():
    """A ModelOutput whose first field is None starts at its first set field."""
    value = BaseModelOutputWithPooling(last_hidden_state=None, pooler_output=B)
    assert flatten(value) == [("out.pooler_output", B)]


@pytest.mark.parametrize("leaf", [None, 3, 2.5, True, "text", b"bytes", torch.float32, object()])
def test_non_tensor_leaves_skipped(leaf):
    """Non-tensor leaves yield nothing, alone or next to tensors."""
    assert flatten(leaf) == []
    assert keys(flatten((leaf, A))) == ["out[1]"]


def test_mixed_layout_order():
    """Keys follow the value's layout, depth first, across container kinds."""
    value = {"b": [Point(A, None), Pair(B, C)], "a": (3, {"k": D})}
    assert keys(flatten(value)) == ["out['b'][0].x", "out['b'][1].main", "out['b'][1].aux", "out['a'][1]['k']"]


def test_self_referencing_list_terminates():
    """A cyclic container stops at the depth limit instead of recursing forever."""
    cyclic: list[object] = [A]
    cyclic.append(cyclic)
    leaves = flatten(cyclic)
    assert leaves[:2] == [("out[0]", A), ("out[1][0]", A)]
    assert all(t is A for _, t in leaves)


def test_flatten_call_args_then_kwargs():
    """flatten_call keys positional arguments args[i] and keyword arguments kwargs.name."""
    leaves = flatten_call((A, (B, 3)), {"mask": C, "n": None, "extra": {"k": D}})
    assert leaves == [("args[0]", A), ("args[1][0]", B), ("kwargs.mask", C), ("kwargs.extra['k']", D)]


def test_flatten_call_empty():
    """A call with no tensors has no leaves."""
    assert flatten_call((1, "a"), {"flag": True}) == []
