"""The one vocabulary's renames: each new name works (against an oracle), each old keyword still works
for one release and warns naming the new one, and the choices the vocabulary made (cam reads one module,
call=None is the last call, a gradient kind runs its own backward pass, extract's target by arity)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.errors import OptionError, SelectionError
from tests.report.test_report import by_hand, tiny_cnn
from tests.store.test_extract_grads import KINDS, LOSS, _batches, _by_hand, _net


def conv_net() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3, padding=1), nn.ReLU())
    return nn.Sequential(net, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(5, 3)).double().eval()


def grad_cam_by_hand(model: nn.Module, x: Tensor, upto: int, target: int) -> Tensor:
    """Grad-CAM at ``model[0][upto]``'s output, written out: ReLU(sum_k mean(dY/dA_k) A_k), scaled, (B, H, W)."""
    acts = model[0][: upto + 1](x)
    score = model[1:](model[0][upto + 1 :](acts))[:, target].sum()
    (grads,) = torch.autograd.grad(score, acts)
    raw = (grads.mean(dim=(2, 3), keepdim=True) * acts).sum(1).relu().detach()
    low, high = raw.amin(dim=(1, 2), keepdim=True), raw.amax(dim=(1, 2), keepdim=True)
    return ((raw - low) / (high - low)).float()


# -- select= --------------------------------------------------------------------------------------
def test_select_modules_takes_select_and_the_old_selector_warns() -> None:
    net = conv_net()
    expected = [("0.0", net[0][0]), ("0.2", net[0][2])]
    assert hookscope.select_modules(net, select=nn.Conv2d) == expected
    with pytest.warns(DeprecationWarning, match=r"use select_modules\(select=\.\.\.\)"):
        assert hookscope.select_modules(net, selector=nn.Conv2d) == expected


def test_cam_select_reads_the_one_module_it_names_and_layer_warns() -> None:
    net, x = conv_net(), torch.rand(2, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = grad_cam_by_hand(net, x, upto=1, target=2)  # the ReLU after the first conv
    torch.testing.assert_close(hookscope.cam(net, x, "gradcam", 2, select="0.1"), expected)
    torch.testing.assert_close(hookscope.cam(net, x, "gradcam", 2, select=net[0][1]), expected)  # a module object
    with pytest.warns(DeprecationWarning, match=r"use cam\(select=\.\.\.\)"):
        torch.testing.assert_close(hookscope.cam(net, x, "gradcam", 2, layer="0.1"), expected)
    with pytest.raises(OptionError, match=r"got both layer= and select="):
        hookscope.cam(net, x, "gradcam", 2, layer="0.1", select="0.1")


def test_cam_select_matching_several_modules_is_a_selection_error() -> None:
    net, x = conv_net(), torch.rand(1, 3, 8, 8, dtype=torch.float64)
    with pytest.raises(SelectionError, match=r"matched 2 \(0\.0, 0\.2\); pick one, e\.g\. select='0\.2'"):
        hookscope.cam(net, x, select=nn.Conv2d)
    with pytest.raises(SelectionError, match=r"matched no module"):
        hookscope.cam(net, x, select="conv9")


class Twice(nn.Module):
    """One conv called twice (a shared module): call 0 on x, call 1 on relu(call 0), then a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.head = nn.Linear(3, 4)

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv(torch.relu(self.conv(x)))
        return self.head(torch.relu(h).mean(dim=(2, 3)))


def test_cam_call_none_is_the_last_call() -> None:
    net = Twice().double().eval()
    x = torch.rand(2, 3, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    last = hookscope.cam(net, x, "gradcam", 1, select="conv")
    torch.testing.assert_close(last, hookscope.cam(net, x, "gradcam", 1, select="conv", call=-1))
    torch.testing.assert_close(last, hookscope.cam(net, x, "gradcam", 1, select="conv", call=1))
    acts = net.conv(torch.relu(net.conv(x)))  # the oracle: Grad-CAM at call 1, written out
    (grads,) = torch.autograd.grad(net.head(torch.relu(acts).mean(dim=(2, 3)))[:, 1].sum(), acts)
    raw = (grads.mean(dim=(2, 3), keepdim=True) * acts).sum(1).relu().detach()
    assert (raw.flatten(1).amax(1) > raw.flatten(1).amin(1)).all()  # not flat: the scaling below is defined
    low, high = raw.amin(dim=(1, 2), keepdim=True), raw.amax(dim=(1, 2), keepdim=True)
    torch.testing.assert_close(last, ((raw - low) / (high - low)).float())
    assert not torch.allclose(last, hookscope.cam(net, x, "gradcam", 1, select="conv", call=0))


# -- target= and method names -------------------------------------------------------------------
def test_attribute_ig_is_integrated_gradients_and_warns() -> None:
    net, x = conv_net(), torch.rand(2, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    expected = hookscope.attribute(net, x, "integrated_gradients", 1, steps=8)
    with pytest.warns(DeprecationWarning, match=r'use attribute\(method="integrated_gradients"\)'):
        old = hookscope.attribute(net, x, "ig", 1, steps=8)  # type: ignore[arg-type]
    torch.testing.assert_close(old, expected)
    attr, delta = expected, hookscope.attribute(net, x, "integrated_gradients", 1, steps=8, return_delta=True)[1]
    scores = net(x)[:, 1] - net(torch.zeros_like(x))[:, 1]  # completeness: the oracle for the sum
    torch.testing.assert_close(attr.flatten(1).sum(1), scores.detach() + delta)


def test_extract_target_equals_the_old_loss_and_both_arities_work(tmp_path: Path) -> None:
    net, batches = _net(), _batches()
    new = hookscope.extract(net, batches, out=tmp_path / "new", kinds=KINDS, **LOSS)
    old_spelling = {"loss" if k == "target" else k: v for k, v in LOSS.items()}
    with pytest.warns(DeprecationWarning, match=r"use extract\(target=\.\.\.\)"):
        old = hookscope.extract(net, batches, out=tmp_path / "old", kinds=KINDS, **old_spelling)
    per_row = hookscope.extract(net, batches, out=tmp_path / "rows", kinds=KINDS, progress=False,
                                target=lambda out: out.logsumexp(1))  # (output) -> one value per row  # fmt: skip
    for index, (x, y) in enumerate(batches):
        expected = _by_hand(net, x, y)
        for site, (_, grad) in expected.items():
            torch.testing.assert_close(new.batch(index)[site].calls[0].get("grad_output"), grad)
            torch.testing.assert_close(old.batch(index)[site].calls[0].get("grad_output"), grad)
        out = expected["2"][0].detach().requires_grad_(True)
        (by_autograd,) = torch.autograd.grad(out.logsumexp(1).sum(), out)
        torch.testing.assert_close(per_row.batch(index)["2"].calls[0].get("grad_output"), by_autograd)


def test_extract_target_must_be_a_callable(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"target must be a callable on the model's output.*got int"):
        hookscope.extract(_net(), _batches(), out=tmp_path / "x", kinds=KINDS, target=3, progress=False)  # type: ignore[arg-type]


# -- out= -----------------------------------------------------------------------------------------
def test_save_writes_to_out_and_the_old_path_warns(tmp_path: Path) -> None:
    net, x = conv_net(), torch.rand(1, 3, 4, 4, dtype=torch.float64)
    with hookscope.capture(net, "0.0") as cap:
        net(x)
    run = hookscope.save(cap, out=tmp_path / "new")
    with pytest.warns(DeprecationWarning, match=r"use save\(out=\.\.\.\)"):
        old = hookscope.save(cap, path=tmp_path / "old")
    assert run.path == tmp_path / "new" and old.path == tmp_path / "old"
    expected = net[0][0](x).detach()
    torch.testing.assert_close(run["0.0"].calls[0].get("output"), expected)
    torch.testing.assert_close(old["0.0"].calls[0].get("output"), expected)


# -- kinds= -------------------------------------------------------------------------------------
def test_build_report_a_gradient_kind_runs_the_backward_pass_itself() -> None:
    batch = torch.rand(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    report = hookscope.build_report(tiny_cnn(), batch, kinds=("grad_output",), cam_methods=())
    _, grads = by_hand(tiny_cnn(), batch)
    assert report.kinds == ("grad_output",) and report.flow is not None
    for layer, grad in zip(report.layers, grads, strict=True):
        assert layer.output is None and layer.grad is not None
        assert layer.grad.stats["mean_abs"] == pytest.approx(grad.abs().mean().item(), rel=1e-6)
    single = hookscope.build_report(tiny_cnn(), batch, kinds="grad_output", cam_methods=())  # one kind, no tuple
    assert [layer.grad for layer in single.layers] == [layer.grad for layer in report.layers]


def test_show_takes_one_kind_or_several() -> None:
    net, x = conv_net(), torch.rand(1, 3, 4, 4, dtype=torch.float64)
    with hookscope.capture(net, "0.0", kinds=("input", "output")) as cap:
        net(x)
    assert hookscope.show(cap, kinds="input").html == hookscope.show(cap, kinds=["input"]).html
    assert hookscope.show(cap, kinds="input").html != hookscope.show(cap, kinds=("input", "output")).html


def test_each_old_spelling_is_reported_at_the_callers_line() -> None:
    """The DeprecationWarning names the line that used the old spelling, so a user can find it."""
    net = conv_net()
    x = torch.rand(1, 3, 8, 8, dtype=torch.float64)
    calls = [
        lambda: hookscope.select_modules(net, selector="0.0"),
        lambda: hookscope.cam(net, x, "gradcam", 1, layer="0.1"),
        lambda: hookscope.attribute(net, x, "ig", 1, steps=4),  # type: ignore[arg-type]
    ]
    for call in calls:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call()
        deprecations = [w for w in seen if w.category is DeprecationWarning]
        assert len(deprecations) == 1 and deprecations[0].filename == __file__
        assert deprecations[0].lineno == call.__code__.co_firstlineno


# -- one name, one meaning: a second meaning's old spelling works for one release -------------------------
def test_the_graphs_column_was_measure() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    graph = hookscope.module_graph(net, torch.rand(2, 3))
    new = graph.colored({"0": 1.0, "2": 3.0}, column="|grad|")
    with pytest.warns(DeprecationWarning, match=r"colored\(measure=\.\.\.\) is deprecated.*colored\(column=\.\.\.\)"):
        old = graph.colored({"0": 1.0, "2": 3.0}, measure="|grad|")
    assert old == new and new.column == "|grad|"
    with pytest.warns(DeprecationWarning, match=r"Graph\.measure is deprecated.*Graph\.column"):
        assert new.measure == "|grad|"
    from hookscope.graph.overlay import overlay_of

    summaries = {"a": hookscope.summarize(torch.tensor([1.0, -3.0]))}
    with pytest.warns(DeprecationWarning, match=r"overlay_of\(measure=\.\.\.\)"):
        assert overlay_of(summaries, measure="max") == overlay_of(summaries, column="max") == ({"a": 1.0}, "max")


def test_top_k_of_the_reducers_was_k() -> None:
    x = torch.tensor([[[1.0], [5.0], [3.0]]])  # (B=1, C=3, 1): channel 1 then 2 are the most active
    top = hookscope.reducers.top_channels(top_k=2).reduction(x)
    assert top.tolist() == [[[5.0, 3.0], [1.0, 2.0]]]  # values, then indices (torch.topk's)
    with pytest.warns(DeprecationWarning, match=r"top_channels\(k=\.\.\.\) is deprecated.*top_k="):
        assert torch.equal(hookscope.reducers.top_channels(k=2).reduction(x), top)
    with pytest.warns(DeprecationWarning, match=r"top_examples\(k=\.\.\.\)"):
        assert hookscope.reducers.top_examples(k=3).name == hookscope.reducers.top_examples(top_k=3).name
    with pytest.raises(TypeError, match="unexpected keyword argument 'n'"):
        hookscope.reducers.top_examples(n=3)


def test_a_streams_minibatch_was_batch_size(tmp_path: Path) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(4, 6)
    hookscope.extract(layer, [torch.rand(2, 3, 4) for _ in range(2)], out=tmp_path / "s", progress=False)
    new = list(hookscope.StoreStream(tmp_path / "s", by="tokens", minibatch=4, seed=1))
    with pytest.warns(DeprecationWarning, match=r"__init__\(batch_size=\.\.\.\).*minibatch="):
        old = list(hookscope.StoreStream(tmp_path / "s", by="tokens", batch_size=4, seed=1))
    assert [len(b) for b in new] == [4, 4, 4] and all(torch.equal(a, b) for a, b in zip(old, new, strict=True))
