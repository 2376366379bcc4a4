"""hookscope.compare.divergence against a hand loop of forward hooks, with a planted difference."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

import hookscope


def _net() -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 8, 3), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten()]
    return nn.Sequential(*layers, nn.Linear(8 * 12 * 12, 10)).eval()


def _outputs(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each leaf's output, cloned by a plain forward hook."""
    found: dict[str, torch.Tensor] = {}
    handles = [m.register_forward_hook(lambda m, i, o, n=n: found.__setitem__(n, o.detach().clone()))
               for n, m in model.named_modules() if n]  # fmt: skip
    with torch.no_grad():
        found["(output)"] = model(x)
    for handle in handles:
        handle.remove()
    return found


def test_a_planted_difference_is_named_first_and_every_number_is_the_hand_loops() -> None:
    a = _net()
    b = copy.deepcopy(a)
    with torch.no_grad():
        b[2].weight[3, 1, 0, 2] += 0.5
    x = torch.randn(4, 3, 16, 16)
    div = hookscope.compare.divergence(a, b, x)
    assert [s.name for s in div.sites] == ["0", "1", "2", "3", "4", "5", "(output)"]
    assert div.first(rtol=1e-9).name == "2"
    out_a, out_b = _outputs(a, x), _outputs(b, x)
    for site in div.sites:
        ta, tb = out_a[site.name].double(), out_b[site.name].double()
        d = tb - ta
        assert site.relative == pytest.approx((d.norm() / ta.norm()).item(), rel=1e-12, abs=0)
        assert site.cosine == pytest.approx(((ta * tb).sum() / (ta.norm() * tb.norm())).item(), rel=1e-12)
        assert site.max_abs == d.abs().max().item()
        assert d.abs()[site.where].item() == site.max_abs
        assert site.shape == tuple(ta.shape)
    assert div["0"].relative == 0 and div["1"].relative == 0  # the in-place ReLU did not rewrite conv 0's value
    assert div["2"].where[1] == 3  # the planted channel


def test_models_that_do_not_match_are_an_error_listing_the_differences() -> None:
    a = _net()
    b = nn.Sequential(*list(_net())[:4], nn.Flatten(), nn.Linear(1152, 10), nn.Softmax(dim=1))
    with pytest.raises(hookscope.MismatchError, match=r"only in A none; only in B 1 \('6'\)"):
        hookscope.compare.divergence(a, b, torch.randn(2, 3, 16, 16))
    c = copy.deepcopy(a)
    c[5] = nn.Linear(1152, 7)
    with pytest.raises(hookscope.MismatchError, match=r"'5' call 0 out: \(2, 10\) in A, \(2, 7\) in B"):
        hookscope.compare.divergence(a, c, torch.randn(2, 3, 16, 16))


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).eval()


# torch.ao.quantization and quantized tensors are deprecated (for torchao), and say so
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore:.*deprecated:UserWarning")
def test_a_dynamically_quantized_copy_parts_at_its_first_linear() -> None:
    model = _mlp()
    quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8)
    div = hookscope.compare.divergence(model, quantized, torch.randn(16, 32))
    assert div.first(rtol=1e-4).name == "0"
    assert 1e-4 < div["0"].relative < 0.05 and div["(output)"].cosine > 0.99


def test_bf16_autocast_of_the_same_model() -> None:
    model = _mlp()
    div = hookscope.compare.divergence(model, model, torch.randn(16, 32), autocast=torch.bfloat16)
    assert div.first(rtol=1e-4).name == "0"
    assert 1e-4 < div["0"].relative < 0.02
    assert div.notes == ("B ran under torch.autocast(bfloat16)",)
    with pytest.raises(hookscope.OptionError, match="autocast='bf16' is not a floating dtype"):
        hookscope.compare.divergence(model, model, torch.randn(2, 32), autocast="bf16")  # type: ignore[arg-type]


def test_a_compiled_model_says_its_sites_are_eager_and_its_output_is_compiled() -> None:
    """A backend that shifts the output: the (output) row sees it, the eager sites do not."""
    model = _mlp()

    def shifted(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        return lambda *args: [out + 1e-3 for out in gm(*args)]

    compiled = torch.compile(copy.deepcopy(model), backend=shifted)
    x = torch.randn(8, 32)
    with pytest.warns(hookscope.CaptureWarning, match="B compiled; hooks need eager running"):
        div = hookscope.compare.divergence(model, compiled, x)
    assert [s.name for s in div.sites][:2] == ["0", "1"]
    assert all(s.relative == 0 for s in div.sites[:-1])
    expected = (1e-3 * math.sqrt(8 * 4)) / model(x).norm().item()
    assert div["(output)"].relative == pytest.approx(expected, rel=1e-3)


def test_table_plot_and_notebook_view() -> None:
    a = _net()
    b = copy.deepcopy(a)
    with torch.no_grad():
        b[5].bias += 0.1
    div = hookscope.compare.divergence(a, b, torch.randn(2, 3, 16, 16))
    lines = div.table().splitlines()
    assert lines[0].split() == ["site", "shape", "relative", "cosine", "max", "|d|", "at"]
    assert lines[-1].split()[:2] == ["(output)", "2x10"]
    assert div.plot(rtol=1e-3).size[0] > 300
    html = div._repr_html_()
    assert html is not None and "Divergence over 7 sites" in html
    with pytest.raises(hookscope.NotCapturedError, match="'6' is not a site of this divergence"):
        div["6"]


def test_both_results_are_sections_of_a_report() -> None:
    a = _net()
    b = copy.deepcopy(a)
    with torch.no_grad():
        b[2].bias += 0.1
    x = torch.randn(8, 3, 16, 16)
    div = hookscope.compare.divergence(a, b, x)
    sim = hookscope.compare.cka(a, b, [x], select=["0", "2"], measure="rsa")
    report = hookscope.build_report(a, x[:1], select="5", sections=[sim, div])
    assert [s.id for s in report.sections] == ["similarity-rsa", "divergence"]
    page = hookscope.render_html(report)
    for anchor in ("similarity-rsa", "divergence"):
        section = page[page.index(f'<section id="{anchor}">') :].split("</section>")[0]
        assert "data:image/png;base64," in section and "<script" not in section
    assert "Divergence over 7 sites" in page and "Similarity (rsa): 2 x 2 units" in page


@pytest.mark.slow
def test_eager_against_inductor() -> None:
    """The real compiler (inductor, a C++ build on the CPU): sites equal, the output within float32 rounding."""
    model = _mlp()
    compiled = torch.compile(copy.deepcopy(model))
    x = torch.randn(8, 32)
    with pytest.warns(hookscope.CaptureWarning, match="B compiled"):
        div = hookscope.compare.divergence(model, compiled, x)
    assert all(s.relative == 0 for s in div.sites[:-1])
    assert div["(output)"].relative < 1e-5 and div.first(rtol=1e-5) is None


class _TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(y)


def test_a_tuple_x_is_positional_arguments_as_in_module_graph() -> None:
    """x=(x, y) is model(x, y) (module_graph's reading); an (inputs, labels) tuple the model cannot take
    still feeds its first item, with a warning, for one release."""
    model, other = _TwoInputs(), _TwoInputs()
    with torch.no_grad():
        other.b.weight.add_(0.5)
    x, y = torch.rand(4, 3), torch.rand(4, 3)
    div = hookscope.compare.divergence(model, other, (x, y), select="b")
    with torch.no_grad():
        expected = (other.b(y) - model.b(y)).abs().max().item()
    assert div.sites[0].name == "b" and div.sites[0].max_abs == pytest.approx(expected, rel=1e-6)
    one = nn.Linear(3, 2)
    with pytest.warns(DeprecationWarning, match=r"feeding only the first item is deprecated.*model\(\*x\)"):
        old = hookscope.compare.divergence(one, one, (x, torch.tensor([0, 1, 0, 1])))
    assert old.sites[0].shape == (4, 2)
