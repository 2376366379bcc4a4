"""Capture on modules returning structured values, and on a real HuggingFace BertModel."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch
from torch import Tensor, nn
from transformers import BertConfig, BertModel

import hookscope

DT = torch.float64
SCALE = (1.0, -2.0, 0.5)


def make_x() -> Tensor:
    return torch.linspace(-1.0, 1.0, 6, dtype=DT).reshape(2, 3)


class Scaled(nn.Module):
    """A parameter the outputs depend on, so they require grad without x doing so."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(SCALE, dtype=DT))


class TupleNet(Scaled):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = x * self.scale
        return h, h.sum(-1)


class DictNet(Scaled):
    def forward(self, x: Tensor) -> dict[str, Any]:
        h = x * self.scale
        return {"h": h, "steps": 3, "total": h.sum(-1)}


@dataclasses.dataclass
class Out:
    logits: Tensor
    hidden: Tensor | None
    aux: Tensor
    name: str


class DataclassNet(Scaled):
    def forward(self, x: Tensor) -> Out:
        h = x * self.scale
        return Out(logits=h.tanh(), hidden=None, aux=h * h, name="ok")


MaxOut = namedtuple("MaxOut", ["values", "indices", "scaled"])


class NamedTupleNet(Scaled):
    def forward(self, x: Tensor) -> MaxOut:
        h = x * self.scale
        values, indices = h.max(-1)
        return MaxOut(values, indices, h * 2)


class NestedNet(Scaled):
    def forward(self, x: Tensor) -> list[tuple[Tensor, ...]]:
        h = x * self.scale
        return [(h, h.sum(-1)), (h.exp(),)]


class KwargNet(Scaled):
    def forward(self, x: Tensor, *, mask: Tensor | None = None) -> Tensor:
        return x * self.scale * mask


S = torch.tensor(SCALE, dtype=DT)
H = make_x() * S


class Case(NamedTuple):
    net: type[nn.Module]
    leaves: dict[str, Callable[[Any], Tensor]]  # key -> how to reach that leaf in the output
    hand: dict[str, Tensor]  # key -> value computed by hand


CASES = {
    "tuple": Case(
        TupleNet,
        {"out[0]": lambda o: o[0], "out[1]": lambda o: o[1]},
        {"out[0]": H, "out[1]": H.sum(-1)},
    ),
    "dict": Case(
        DictNet,
        {"out['h']": lambda o: o["h"], "out['total']": lambda o: o["total"]},
        {"out['h']": H, "out['total']": H.sum(-1)},
    ),
    "dataclass": Case(
        DataclassNet,
        {"out.logits": lambda o: o.logits, "out.aux": lambda o: o.aux},
        {"out.logits": H.tanh(), "out.aux": H * H},
    ),
    "namedtuple": Case(
        NamedTupleNet,
        {"out.values": lambda o: o.values, "out.indices": lambda o: o.indices, "out.scaled": lambda o: o.scaled},
        {"out.values": H.max(-1).values, "out.indices": H.max(-1).indices, "out.scaled": H * 2},
    ),
    "nested": Case(
        NestedNet,
        {"out[0][0]": lambda o: o[0][0], "out[0][1]": lambda o: o[0][1], "out[1][0]": lambda o: o[1][0]},
        {"out[0][0]": H, "out[0][1]": H.sum(-1), "out[1][0]": H.exp()},
    ),
}


def weighted_loss(tensors: list[Tensor]) -> Tensor:
    """Every floating tensor enters the loss with its own weight and random per-element factors."""
    gen = torch.Generator().manual_seed(0)
    total = torch.zeros((), dtype=DT)
    for i, t in enumerate(tensors):
        if t.is_floating_point():
            total = total + (i + 1) * (t * torch.randn(t.shape, generator=gen, dtype=DT)).sum()
    return total


def oracle_grads(case: Case) -> dict[str, Tensor]:
    """d loss / d each output leaf, from a plain run without hookscope."""
    out = case.net()(make_x())
    leaves = {key: reach(out) for key, reach in case.leaves.items()}
    loss = weighted_loss(list(leaves.values()))
    diff = {k: t for k, t in leaves.items() if t.requires_grad}
    return dict(zip(diff, torch.autograd.grad(loss, list(diff.values())), strict=True))


def captured(case: Case) -> hookscope.Call:
    with hookscope.capture(case.net(), "", kinds=("output", "grad_output")) as cap:
        out = cap.model(make_x())
        weighted_loss([reach(out) for reach in case.leaves.values()]).backward()
    (call,) = cap[""].calls
    return call


@pytest.mark.parametrize("name", CASES)
def test_every_leaf_reachable_by_key(name):
    """The output keys are exactly the tensor leaves, in layout order, and match a hand computation."""
    case = CASES[name]
    call = captured(case)
    assert call.keys("output") == list(case.leaves)
    for key, expected in case.hand.items():
        torch.testing.assert_close(call.get("output", key), expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", CASES)
def test_grad_output_per_leaf_matches_autograd(name):
    """grad_output at each leaf equals torch.autograd.grad of the loss with respect to that leaf."""
    case = CASES[name]
    call = captured(case)
    expected = oracle_grads(case)
    assert call.keys("grad_output") == list(expected)
    for key, grad in expected.items():
        torch.testing.assert_close(call.get("grad_output", key), grad)


def test_output_shortcut_on_structured_is_the_first_tensor_by_get():
    """get(kind) without a key is the first tensor in layout order, skipping non-tensor leaves."""
    assert torch.equal(captured(CASES["dict"]).get("output"), H)
    assert torch.equal(captured(CASES["dataclass"]).get("output"), H.tanh())


def test_integer_leaf_has_output_but_no_grad():
    """An integer output leaf is captured as output but gets no grad_output hook."""
    call = captured(CASES["namedtuple"])
    assert "out.indices" in call.keys("output")
    assert "out.indices" not in call.keys("grad_output")
    assert call.get("output", "out.indices").dtype == torch.long


def test_kwarg_input_and_grad_input():
    """A keyword-only argument is captured as kwargs.mask, with its value and its gradient."""
    x = make_x().requires_grad_()
    mask = torch.tensor([[1.0, 0.0, 2.0], [0.5, 1.0, -1.0]], dtype=DT, requires_grad=True)
    net = KwargNet()
    with hookscope.capture(net, "", kinds=("input", "output", "grad_input")) as cap:
        weighted_loss([net(x, mask=mask)]).backward()
    call = cap[""].calls[0]
    assert call.keys("input") == ["args[0]", "kwargs.mask"]
    assert call.keys("grad_input") == ["args[0]", "kwargs.mask"]
    assert torch.equal(call.get("input", "kwargs.mask"), mask.detach())
    assert torch.equal(call.output, make_x() * S * mask.detach())

    x2, mask2 = x.detach().requires_grad_(), mask.detach().requires_grad_()
    gx, gmask = torch.autograd.grad(weighted_loss([KwargNet()(x2, mask=mask2)]), [x2, mask2])
    torch.testing.assert_close(call.get("grad_input", "args[0]"), gx)
    torch.testing.assert_close(call.get("grad_input", "kwargs.mask"), gmask)


# -- a real HuggingFace model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert() -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100
    )
    return BertModel(config).to(DT).eval()


@pytest.fixture(scope="module")
def bert_inputs() -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 100, (2, 7), generator=gen)
    attention_mask = torch.ones(2, 7, dtype=torch.long)
    attention_mask[1, 5:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def bert_loss(out: Any) -> Tensor:
    return out.last_hidden_state.sum() + out.pooler_output.sum()


@pytest.fixture(scope="module")
def bert_capture(bert, bert_inputs):
    sites = ["", "encoder.layer.0", "embeddings"]
    with hookscope.capture(bert, sites, kinds=("input", "output", "grad_output")) as cap:
        bert_loss(bert(**bert_inputs)).backward()
    bert.zero_grad()
    return cap


@pytest.fixture(scope="module")
def bert_oracle(bert, bert_inputs):
    """Outputs and autograd.grad of the loss, from a run with a plain forward hook only."""
    seen = {}
    handle = bert.encoder.layer[0].register_forward_hook(lambda m, a, out: seen.setdefault("layer0", out))
    try:
        out = bert(**bert_inputs)
    finally:
        handle.remove()
    tensors = {"last": out.last_hidden_state, "pooled": out.pooler_output, "layer0": seen["layer0"]}
    grads = torch.autograd.grad(bert_loss(out), list(tensors.values()))
    return {k: t.detach() for k, t in tensors.items()}, dict(zip(tensors, grads, strict=True))


def test_bert_root_keys_are_model_output_fields(bert_capture):
    """The root's output keys are the set fields of its ModelOutput; None fields are absent."""
    call = bert_capture[""].calls[0]
    assert call.keys("output") == ["out.last_hidden_state", "out.pooler_output"]
    assert call.keys("grad_output") == ["out.last_hidden_state", "out.pooler_output"]


def test_bert_root_values_and_shortcut(bert_capture, bert_oracle):
    """.output is the ModelOutput itself; both captured fields equal a plain run."""
    values, _ = bert_oracle
    root = bert_capture[""]
    assert type(root.output).__name__ == "BaseModelOutputWithPoolingAndCrossAttentions"
    torch.testing.assert_close(root.output.last_hidden_state, values["last"])
    torch.testing.assert_close(root.output["pooler_output"], values["pooled"])
    torch.testing.assert_close(root.calls[0].get("output", "out.pooler_output"), values["pooled"])
    assert root.output.hidden_states is None


def test_bert_root_grads_match_autograd(bert_capture, bert_oracle):
    """grad_output of both ModelOutput fields equals torch.autograd.grad of the loss."""
    _, grads = bert_oracle
    call = bert_capture[""].calls[0]
    torch.testing.assert_close(call.get("grad_output", "out.last_hidden_state"), grads["last"])
    torch.testing.assert_close(call.get("grad_output", "out.pooler_output"), grads["pooled"])
    assert not torch.equal(grads["last"], torch.ones_like(grads["last"]))  # the pooler path contributes


def test_bert_layer0_output_and_grad(bert_capture, bert_oracle):
    """encoder.layer.0 returns one tensor (key out); its value and grad equal the oracle."""
    values, grads = bert_oracle
    call = bert_capture["encoder.layer.0"].calls[0]
    assert call.keys("output") == ["out"]
    torch.testing.assert_close(call.output, values["layer0"])
    torch.testing.assert_close(call.grad_output, grads["layer0"])


def test_bert_embeddings_called_with_kwargs(bert_capture, bert_inputs):
    """BertModel calls embeddings by keyword; only the tensor kwarg input_ids is held (the rest are None/int)."""
    call = bert_capture["embeddings"].calls[0]
    assert call.keys("input") == ["kwargs.input_ids"]
    args, kwargs = call.input  # called by keyword only: Arguments((), {...}), None and ints as passed
    assert args == ()
    assert torch.equal(kwargs["input_ids"], bert_inputs["input_ids"])
    assert kwargs["token_type_ids"] is None


def test_bert_root_inputs_as_passed(bert_capture, bert_inputs):
    """The root holds exactly the keyword tensors the caller passed."""
    call = bert_capture[""].calls[0]
    assert call.keys("input") == ["kwargs.input_ids", "kwargs.attention_mask"]
    assert torch.equal(call.get("input", "kwargs.attention_mask"), bert_inputs["attention_mask"])


def test_bert_layer0_input_is_embeddings_output(bert_capture):
    """encoder.layer.0 gets hidden states and a mask positionally; args[0] is the embeddings' output."""
    call = bert_capture["encoder.layer.0"].calls[0]
    assert call.keys("input") == ["args[0]", "args[1]"]
    torch.testing.assert_close(call.input.args[0], bert_capture["embeddings"].output)
    torch.testing.assert_close(call.get("input"), bert_capture["embeddings"].output)
    assert call.get("input", "args[1]").dtype == torch.bool
