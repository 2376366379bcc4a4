"""Every trainable parameter is watched exactly once, at the module that holds it: a container's own
parameters (nn.MultiheadAttention's in_proj_*, a ViT's cls_token and pos_embed, a Parameter set on the
model) included; a PEFT LoRA's adapters watched, its base reported frozen, no alert; nan_guard blames
the module that holds a parameter.

The oracle of "exactly once": the squared weight norms of the sites add up to the squared norm of all
the model's parameters (a parameter missed makes the sum smaller, one counted twice larger); the
gradient norms are hand computations from ``param.grad`` of a twin model run without any hook.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope


def _step(model: nn.Module, x: torch.Tensor, loss: Callable[[torch.Tensor], torch.Tensor], **options: object):
    """One SGD step under watch(every=1); the watch, and the gradients of a twin's same step, by name."""
    twin = copy.deepcopy(model)
    loss(twin(x)).backward()
    grads = {n: p.grad.detach().double() for n, p in twin.named_parameters() if p.grad is not None}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    with hookscope.watch(model, opt, every=1, **options) as w:  # type: ignore[arg-type]
        opt.zero_grad()
        loss(model(x)).backward()
        opt.step()
    return w, grads


def _norm(grads: dict[str, torch.Tensor], *names: str) -> float:
    return math.sqrt(sum(grads[n].square().sum().item() for n in names))


def _weights_once(w: hookscope.Watch, model: nn.Module) -> None:
    """The sites' squared weight norms add up to the model's: each parameter counted exactly once."""
    sites = sum(h["weight_norm"][-1] ** 2 for h in w.histories().values() if not math.isnan(h["weight_norm"][-1]))
    every = sum(p.detach().double().square().sum().item() for p in model.parameters())
    assert sites == pytest.approx(every, rel=1e-6)


def test_a_transformer_layer_s_in_projection_is_watched_at_its_attention() -> None:
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    w, grads = _step(model, torch.randn(2, 5, 8), lambda y: y.square().mean())
    attention = w.history("self_attn")
    assert attention["grad_norm"][0] == pytest.approx(_norm(grads, "self_attn.in_proj_weight",
                                                            "self_attn.in_proj_bias"), rel=1e-6)  # fmt: skip
    assert w.history("self_attn.out_proj")["grad_norm"][0] == pytest.approx(
        _norm(grads, "self_attn.out_proj.weight", "self_attn.out_proj.bias"), rel=1e-6
    )
    _weights_once(w, model)
    assert w.alerts == []


def test_a_vit_s_class_token_and_position_embedding_are_the_model_s_own() -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=1,
                              num_classes=3)  # fmt: skip
    w, grads = _step(model, torch.randn(2, 3, 32, 32), lambda y: F.cross_entropy(y, torch.tensor([0, 2])))
    assert next(iter(w.histories())) == "" and w.table().splitlines()[1].startswith("(model) ")
    assert w.history("")["grad_norm"][0] == pytest.approx(_norm(grads, "cls_token", "pos_embed"), rel=1e-6)
    assert w.history("(model)")["grad_norm"] == w.history("")["grad_norm"]  # the name the table shows
    _weights_once(w, model)


def test_a_lora_s_adapters_are_watched_its_base_frozen_and_a_clean_run_has_no_alert(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["0", "2"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    g = torch.Generator().manual_seed(1)
    with hookscope.watch(model, opt, every=1, out=tmp_path / "lora.hookscope") as w:
        for _ in range(3):
            loss = F.cross_entropy(model(torch.randn(4, 8, generator=g)), torch.randint(0, 3, (4,), generator=g))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert w.alerts == []
    adapters = [n for n in w.histories() if ".lora_" in n]
    assert adapters == [f"base_model.model.{i}.lora_{ab}.default" for i in (0, 2) for ab in "AB"]
    assert all(all(map(math.isfinite, w.history(n)["grad_norm"])) for n in adapters)
    assert w.history("base_model.model.0.lora_B.default").undefined == {"update_ratio": [0]}  # lora_B starts at 0
    assert w.frozen == ["base_model.model.0.base_layer", "base_model.model.2.base_layer"]
    assert w.table().splitlines()[1].split()[4:6] == ["frozen", "frozen"]
    _weights_once(w, model)
    page = hookscope.build_training_report(hookscope.load(tmp_path / "lora.hookscope"))
    assert page.first_non_finite is None and page.alerts == ()
    rows = {line.split()[0]: line.split()[3:5] for line in page.table().splitlines()[1:]}
    assert rows["base_model.model.2.base_layer"] == ["frozen", "frozen"]
    assert rows["base_model.model.2.lora_B.default"][1] not in ("frozen", "undefined", "–")


class _Gated(nn.Module):
    """A container holding a raw Parameter beside its child layer."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gain = nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.gain


class _Net(nn.Module):
    """Raw Parameters on a container and on the model itself."""

    def __init__(self) -> None:
        super().__init__()
        self.block, self.head = _Gated(), nn.Linear(4, 2)
        self.bias = nn.Parameter(torch.full((2,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.block(x))) + self.bias


def test_raw_parameters_are_watched_at_the_module_holding_them() -> None:
    torch.manual_seed(0)
    model, x = _Net(), torch.randn(3, 4)
    w, grads = _step(model, x, lambda y: y.square().sum())
    assert list(w.histories()) == ["", "block", "block.lin", "head"]
    assert w.history("")["grad_norm"][0] == pytest.approx(_norm(grads, "bias"), rel=1e-6)
    assert w.history("block")["grad_norm"][0] == pytest.approx(_norm(grads, "block.gain"), rel=1e-6)
    assert w.history("block.lin")["grad_norm"][0] == pytest.approx(_norm(grads, "block.lin.weight",
                                                                             "block.lin.bias"), rel=1e-6)  # fmt: skip
    _weights_once(w, model)
    # a selected container counts only what no selected module inside it holds
    picked, grads = _step(_Net(), x, lambda y: y.square().sum(), select=["block", "block.lin"])
    assert picked.history("block")["grad_norm"][0] == pytest.approx(_norm(grads, "block.gain"), rel=1e-6)


def test_nan_guard_blames_a_container_s_raw_parameter_on_the_container() -> None:
    model = _Net()
    with torch.no_grad():
        model.block.gain[1] = math.nan
    with (
        pytest.raises(hookscope.NonFiniteError, match=r"output of 'block' \(call 0\) is nan") as err,
        hookscope.nan_guard(model),
    ):
        model(torch.randn(3, 4)).sum().backward()
    assert (err.value.module, err.value.phase) == ("block", "forward") and "(gain)" in str(err.value)
    # the optimizer phase: an update that overflows the container's own Parameter
    model = _Net()
    opt = torch.optim.SGD([model.block.gain], lr=3e38)  # |lr * grad| beyond float32
    with hookscope.nan_guard(model, opt):
        model(torch.full((3, 4), 100.0)).sum().backward()
        with pytest.raises(hookscope.NonFiniteError, match=r"parameter 'block\.gain' became") as err:
            opt.step()
    assert (err.value.module, err.value.key, err.value.phase) == ("block", "gain", "optimizer")


def test_a_tied_weight_is_watched_once_at_its_first_module() -> None:
    """An embedding and an output head sharing one weight (GPT-2's lm_head): counted at the embedding only."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    w, grads = _step(model, torch.tensor([[1, 2, 3]]), lambda y: y.square().mean())
    assert w.history("0")["grad_norm"][0] == pytest.approx(_norm(grads, "0.weight"), rel=1e-6)
    assert math.isnan(w.history("1")["grad_norm"][0]) and math.isnan(w.history("1")["weight_norm"][0])
    _weights_once(w, model)
