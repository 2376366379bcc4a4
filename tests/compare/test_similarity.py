"""hookscope.compare.cka against a float64 numpy reference on features cloned by plain hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

import hookscope
from hookscope.compare import hsic


def _features(model: nn.Module, names: list[str], batches: list[torch.Tensor], *, clone: bool = True) -> dict:
    """name -> one float64 numpy (n, d) array per batch, from forward hooks that clone (or keep references)."""
    found: dict[str, list] = {name: [] for name in names}
    modules = dict(model.named_modules())
    handles = [
        modules[name].register_forward_hook(
            lambda m, i, o, name=name: found[name].append(o.detach().clone() if clone else o.detach())
        )
        for name in names
    ]
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for handle in handles:
            handle.remove()
    return {n: [t.reshape(len(t), -1).double().numpy() for t in ts] for n, ts in found.items()}


def _hsic1(k: np.ndarray, l_: np.ndarray) -> float:
    """Song et al. 2012's unbiased HSIC, written out as in the paper (no centring)."""
    n = len(k)
    k, l_ = k.copy(), l_.copy()
    np.fill_diagonal(k, 0)
    np.fill_diagonal(l_, 0)
    one = np.ones(n)
    value = (
        np.trace(k @ l_) + (one @ k @ one) * (one @ l_ @ one) / ((n - 1) * (n - 2)) - 2 / (n - 2) * one @ k @ l_ @ one
    )
    return float(value / (n * (n - 3)))


def _reference_cka(xs: list[np.ndarray], ys: list[np.ndarray]) -> float:
    """Minibatch CKA (Nguyen et al. 2021): sums of HSIC1 over batches."""
    grams = [(x @ x.T, y @ y.T) for x, y in zip(xs, ys, strict=True)]
    xy = sum(_hsic1(k, l_) for k, l_ in grams)
    xx = sum(_hsic1(k, k) for k, _ in grams)
    yy = sum(_hsic1(l_, l_) for _, l_ in grams)
    return xy / np.sqrt(xx * yy)


def _reference_rsa(xs: list[np.ndarray], ys: list[np.ndarray]) -> float:
    """Mean over batches of the Spearman correlation of the 1 - Pearson RDMs' upper triangles (scipy)."""
    values = []
    for x, y in zip(xs, ys, strict=True):
        upper = np.triu_indices(len(x), k=1)
        values.append(stats.spearmanr((1 - np.corrcoef(x))[upper], (1 - np.corrcoef(y))[upper]).statistic)
    return float(np.mean(values))


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(8 * 12 * 12, 10),
    ).eval()  # fmt: skip


NAMES = ["0", "1", "2", "3", "6"]


@pytest.mark.parametrize("measure", ["cka", "rsa"])
def test_two_models_match_the_numpy_reference(measure: str) -> None:
    a, b = _net(0), _net(1)
    torch.manual_seed(2)
    batches = [torch.randn(16, 3, 16, 16) for _ in range(3)] + [torch.randn(9, 3, 16, 16)]
    sim = hookscope.compare.cka(a, b, batches, select=NAMES, measure=measure)
    fa, fb = _features(a, NAMES, batches), _features(b, NAMES, batches)
    reference = _reference_cka if measure == "cka" else _reference_rsa
    expected = np.array([[reference(fa[i], fb[j]) for j in NAMES] for i in NAMES])
    assert sim.rows == sim.columns == tuple(NAMES)
    assert (sim.batches, sim.samples) == (4, 57)
    np.testing.assert_allclose(sim.values.numpy(), expected, atol=1e-6, rtol=0)
    assert sim["1", "2"] == pytest.approx(expected[1, 2], abs=1e-6)


def test_one_model_layers_by_layers_and_select_b() -> None:
    net = _net(0)
    batches = [torch.randn(12, 3, 16, 16) for _ in range(2)]
    sim = hookscope.compare.cka(net, None, batches, select=["1", "2"], select_b=["3", "6"])
    f = _features(net, NAMES, batches)
    expected = [[_reference_cka(f[i], f[j]) for j in ("3", "6")] for i in ("1", "2")]
    np.testing.assert_allclose(sim.values.numpy(), expected, atol=1e-6, rtol=0)
    assert sim.diagonal() == {}  # no unit in both


def test_minibatch_cka_does_not_depend_on_the_batch_size() -> None:
    """HSIC1 is unbiased: batches of 8 and of 128 give the same CKA within noise, where the biased
    (centred-Gram) estimator moves by far more, so the check has teeth."""
    torch.manual_seed(0)
    x = torch.randn(512, 64).double()
    y = torch.relu(x @ torch.randn(64, 256).double()) + 2 * torch.randn(512, 256).double()
    values = {}
    for size in (8, 128):
        batches = [(xs, ys) for xs, ys in zip(x.split(size), y.split(size), strict=True)]
        terms = [hsic.hsic_terms(hsic.gram(a)[None], hsic.gram(b)[None]) for a, b in batches]
        sums = [sum(t[i] for t in terms) for i in range(3)]
        values[size] = float(hsic.cka_of(*sums))
        biased = [_biased(hsic.gram(a), hsic.gram(b)) for a, b in batches]
        values[f"biased {size}"] = sum(b[0] for b in biased) / np.sqrt(
            sum(b[1] for b in biased) * sum(b[2] for b in biased)
        )
    assert abs(values[8] - values[128]) < 0.03
    assert abs(values["biased 8"] - values["biased 128"]) > 0.1


def _biased(k: torch.Tensor, l_: torch.Tensor) -> tuple[float, float, float]:
    return float((k * l_).sum()), float((k * k).sum()), float((l_ * l_).sum())  # centred Grams: tr(KHLH)


def test_resnet18_bn1_is_not_its_inplace_relu() -> None:
    """torchvision's in-place ReLU rewrites bn1's output: kept by reference, bn1 reads as relu."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    a, b = torchvision.models.resnet18().eval(), torchvision.models.resnet18().eval()
    batches = list(torch.randn(64, 3, 32, 32).split(32))  # 64 inputs, small images
    names = ["bn1", "relu", "layer1"]
    sim = hookscope.compare.cka(a, b, batches, select=names)
    cloned_a, cloned_b = (_features(m, names, batches) for m in (a, b))
    cloned = {n: _reference_cka(cloned_a[n], cloned_b[n]) for n in names}
    shared_a, shared_b = (_features(m, names, batches, clone=False) for m in (a, b))
    trap = {n: _reference_cka(shared_a[n], shared_b[n]) for n in names}
    assert sim["bn1", "bn1"] == pytest.approx(cloned["bn1"], abs=1e-6)
    assert sim["relu", "relu"] == pytest.approx(cloned["relu"], abs=1e-6)
    assert abs(sim["bn1", "bn1"] - sim["relu", "relu"]) > 0.02
    assert trap["bn1"] == pytest.approx(trap["relu"], abs=1e-9)  # the trap: references read the ReLU's values


def test_two_stores_equal_the_in_memory_run(tmp_path: Path) -> None:
    a, b = _net(0), _net(1)
    batches = [torch.randn(8, 3, 16, 16) for _ in range(3)]
    runs = [hookscope.extract(m, batches, select=NAMES, out=tmp_path / f"{i}.hookscope", progress=False)
            for i, m in enumerate((a, b))]  # fmt: skip
    for measure in ("cka", "rsa"):
        from_stores = hookscope.compare.cka(runs[0].path, runs[1], select=["1", "2", "6"], measure=measure)
        in_memory = hookscope.compare.cka(a, b, batches, select=["1", "2", "6"], measure=measure)
        assert from_stores.rows == in_memory.rows
        torch.testing.assert_close(from_stores.values, in_memory.values, atol=1e-12, rtol=0)


class Twice(nn.Module):
    """One Linear called twice, and a module returning a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(6, 6)
        self.split = Split()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second = self.split(torch.tanh(self.cell(torch.tanh(self.cell(x)))))
        return first + second


class Split(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[:, :3] * 2, x[:, 3:].exp()


def test_units_per_call_and_key() -> None:
    torch.manual_seed(0)
    net = Twice().eval()
    batches = [torch.randn(10, 6) for _ in range(2)]
    sim = hookscope.compare.cka(net, None, batches, select=["cell", "split"])
    assert sim.rows == ("cell call 0", "cell call 1", "split out[0]", "split out[1]")
    first = [net.cell(x).detach().double().numpy() for x in batches]
    halves = [torch.tanh(net.cell(torch.tanh(net.cell(x)))).detach() for x in batches]
    key1 = [h[:, 3:].exp().double().numpy() for h in halves]
    assert sim["cell call 0", "split out[1]"] == pytest.approx(_reference_cka(first, key1), abs=1e-6)
    picked = hookscope.compare.cka(net, None, batches, select="split", key="out[1]")
    assert picked.rows == ("split out[1]",)
    assert hookscope.compare.cka(net, None, batches, select="cell", call=-1).rows == ("cell call 1",)


def test_small_batches_are_left_out_with_a_warning() -> None:
    net = _net(0)
    batches = [torch.randn(8, 3, 16, 16), torch.randn(3, 3, 16, 16)]
    with pytest.warns(hookscope.CaptureWarning, match="batch 1 has 3 inputs; cka needs at least 4"):
        sim = hookscope.compare.cka(net, None, batches, select=["1", "6"])
    assert (sim.batches, sim.samples) == (1, 8)


def test_mistakes_are_clear_errors(tmp_path: Path) -> None:
    net = _net(0)
    batches = [torch.randn(8, 3, 16, 16)]
    with pytest.raises(hookscope.OptionError, match="measure='cca' is not a similarity measure; pass 'cka' or 'rsa'"):
        hookscope.compare.cka(net, None, batches, measure="cca")
    with pytest.raises(hookscope.InputError, match="comparing models needs two models"):
        hookscope.compare.cka(net, None)
    run = hookscope.extract(net, batches, select=["1"], out=tmp_path / "a.hookscope", progress=False)
    with pytest.raises(hookscope.InputError, match="comparing stores needs two stores"):
        hookscope.compare.cka(run, None, batches)
    with pytest.raises(hookscope.SelectionError, match="':blocks' finds a model's blocks and needs the model"):
        hookscope.compare.cka(run, None, select=":blocks")
    with pytest.raises(hookscope.NotCapturedError, match="'9' is not a unit of A"):
        hookscope.compare.cka(net, None, batches, select="1")["9", "1"]


def test_table_plot_and_notebook_view() -> None:
    net = _net(0)
    sim = hookscope.compare.cka(net, None, [torch.randn(8, 3, 16, 16)], select=["1", "3"])
    lines = sim.table().splitlines()
    assert lines[0].split() == ["A", "\\", "B", "(cka)", "1", "3"]  # B's columns named, as A's rows are
    assert lines[1].split()[:2] == ["1", "1.000"]
    assert lines[-1] == "cka over 8 inputs in 1 batches" and not any(line.startswith("B:") for line in lines)
    picture = sim.plot()
    assert picture.size[0] > picture.size[1] > 100
    html = sim._repr_html_()
    assert html is not None and "Similarity (cka): 2 x 2 units" in html and "data:image/png" in html


def test_an_error_half_way_leaves_no_hook_and_progress_hears_each_batch() -> None:
    net = _net(0)
    heard: list[tuple[str, int, int]] = []
    hookscope.compare.cka(net, None, [torch.randn(8, 3, 16, 16)] * 2, select="1", progress=lambda *a: heard.append(a))
    assert heard == [("cka", 1, 0), ("cka", 2, 0)]
    with pytest.raises(hookscope.OptionError, match="cannot feed a batch of type str"):
        hookscope.compare.cka(net, None, [torch.randn(8, 3, 16, 16), "nope"], select="1")
    assert hookscope.find_hooks(net) == []
    assert net.training is False


def test_the_package_is_a_module_and_no_name_shadows_one_of_its_modules() -> None:
    import importlib
    import types

    assert isinstance(hookscope.compare, types.ModuleType)
    for name in ("hsic", "rdm", "sources", "similarity", "numerics", "views"):
        module = importlib.import_module(f"hookscope.compare.{name}")
        assert name not in hookscope.compare.__all__ and isinstance(module, types.ModuleType)


def test_the_pictures_name_the_units_in_type_of_nine_points_or_more(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookscope.compare import views

    drawn: list[Any] = []
    monkeypatch.setattr(views, "figure_image", lambda fig: drawn.append(fig) or fig)
    net = _net(0)
    hookscope.compare.cka(net, None, [torch.randn(8, 3, 16, 16)], select=["1", "3"]).plot()
    heat = drawn[0].axes[0]
    assert [t.get_text() for t in heat.get_xticklabels()] == ["1", "3"]
    texts = [t for ax in drawn[0].axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels(), ax.title, ax.xaxis.label,
                                                  ax.yaxis.label) if t.get_text()]  # fmt: skip
    assert texts and min(t.get_fontsize() for t in texts) >= 9
