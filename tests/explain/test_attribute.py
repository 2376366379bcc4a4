"""attribute(): hand-computed cases, Captum on a real resnet18, targets, and what it must not touch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.attr import GuidedBackprop, InputXGradient, IntegratedGradients, NoiseTunnel, Saliency
from torch import Tensor, nn
from torchvision.transforms.functional import gaussian_blur

import hookscope
from hookscope.errors import OptionError, TargetError
from hookscope.explain.attribute import ATTRIBUTION_METHODS, attribute
from hookscope.explain.baselines import gauss_legendre, make_baseline
from tests.models import LeNet, resnet18_random_bn

TARGETS = [3, 7]


def _cos(a: Tensor, b: Tensor) -> float:
    return float(a.flatten() @ b.flatten() / (a.norm() * b.norm()))


@pytest.fixture(scope="module")
def resnet() -> nn.Module:
    """resnet18, random init with random BatchNorm statistics so that it is not positively homogeneous."""
    return resnet18_random_bn()


@pytest.fixture(scope="module")
def image() -> Tensor:
    """Two 3x32x32 images in [0, 1], each spanning exactly 0..1 (so smoothgrad's std is ``noise``)."""
    x = torch.rand(2, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x[:, 0, 0, 0], x[:, 0, 0, 1] = 0.0, 1.0
    return x


def _captum_input(x: Tensor) -> Tensor:
    return x.clone().requires_grad_(True)  # Captum warns when it has to set requires_grad itself


# -- hand-built cases --------------------------------------------------------------------------


@pytest.fixture
def linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4)).double()


def test_linear_model_closed_forms(linear: nn.Module) -> None:
    """f(x) = w.x + b: saliency = w, input x grad = w * x, smoothgrad = w, IG = (x - x') * w exactly."""
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    w = linear[1].weight[2].detach().view(1, 3, 8, 8).expand_as(x)
    assert torch.allclose(attribute(linear, x, "saliency", 2), w, atol=1e-12)
    assert torch.allclose(attribute(linear, x, "input_x_gradient", 2), w * x, atol=1e-12)
    assert torch.allclose(attribute(linear, x, "smoothgrad", 2, samples=5, noise=0.5), w, atol=1e-12)
    for baseline in (None, "zeros", "blur", "uniform", torch.tensor(0.25, dtype=torch.float64)):
        attr, delta = attribute(linear, x, "integrated_gradients", 2, baseline=baseline, steps=3, return_delta=True)
        assert torch.allclose(attr, (x - make_baseline(x, baseline)) * w, atol=1e-12), baseline
        assert delta.abs().max() < 1e-12


class Poly(nn.Module):
    """f(x) = sum(c * x**power) per image, one output."""

    def __init__(self, c: Tensor, power: int) -> None:
        super().__init__()
        self.c, self.power = c, power

    def forward(self, x: Tensor) -> Tensor:
        return (self.c * x**self.power).flatten(1).sum(1, keepdim=True)


def test_quadratic_integrated_gradients_closed_form() -> None:
    """f = sum c x^2: IG_j = c_j (x_j^2 - x'_j^2), exact for any number of Gauss-Legendre steps."""
    x, base, c = torch.randn(3, 2, 5, 5, dtype=torch.float64).unbind(0)
    model = Poly(c, 2)
    for steps in (1, 4):
        attr, delta = attribute(
            model, x[None], "integrated_gradients", 0, baseline=base, steps=steps, return_delta=True
        )
        assert torch.allclose(attr[0], c * (x**2 - base**2), atol=1e-12)
        assert delta.abs().max() < 1e-12


def test_integrated_gradients_uses_gauss_legendre() -> None:
    """f = sum x^3 from 0: 2 Gauss-Legendre points are exact (degree 3), a Riemann sum is not."""
    x = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    attr = attribute(Poly(torch.ones(3, dtype=torch.float64), 3), x, "integrated_gradients", 0, steps=2)
    assert torch.allclose(attr, x**3, atol=1e-12)
    nodes, weights = gauss_legendre(7)
    ref_nodes, ref_weights = np.polynomial.legendre.leggauss(7)
    assert np.allclose(nodes.numpy(), (ref_nodes + 1) / 2, atol=1e-14)
    assert np.allclose(weights.numpy(), ref_weights / 2, atol=1e-14)


def test_guided_backprop_by_hand() -> None:
    """One ReLU: only positive output gradients pass, then ReLU's own mask applies."""
    model = nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU(), nn.Linear(3, 1, bias=False)).double()
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, -1.0], [2.0, 1.0], [-1.0, 1.0]]))  # h = (0.5, 2.5, -0.5)
        model[2].weight.copy_(torch.tensor([[1.0, -2.0, 3.0]]))
    x = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    assert attribute(model, x, "saliency", 0).tolist() == [[-3.0, -3.0]]  # 1*(1,-1) - 2*(2,1)
    assert attribute(model, x, "guided_backprop", 0).tolist() == [[1.0, -1.0]]  # (1, 0, 3) masked (1, 1, 0)


class TwoLayer(nn.Module):
    """One ReLU(inplace=True) module called twice, as in torchvision's BasicBlock."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(4, 6), nn.Linear(6, 6), nn.Linear(6, 2)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc3(self.relu(self.fc2(self.relu(self.fc1(x)))))


def test_guided_backprop_reused_inplace_relu() -> None:
    torch.manual_seed(3)
    model = TwoLayer().double()
    x = torch.randn(5, 4, dtype=torch.float64)
    with torch.no_grad():
        h1 = model.fc1(x)
        h2 = model.fc2(h1.relu())
    w1, w2, w3 = model.fc1.weight.detach(), model.fc2.weight.detach(), model.fc3.weight.detach()
    g2 = w3[1].expand(5, 6).clamp(min=0) * (h2 > 0)  # d score / d (fc2 output), guided
    g1 = (g2 @ w2).clamp(min=0) * (h1 > 0)
    assert torch.allclose(attribute(model, x, "guided_backprop", 1), g1 @ w1, atol=1e-12)
    assert hookscope.find_hooks(model) == []


# -- Captum on a real network --------------------------------------------------------------------


def test_saliency_and_input_x_gradient_match_captum(resnet: nn.Module, image: Tensor) -> None:
    ours = attribute(resnet, image, "saliency", TARGETS)
    assert torch.allclose(ours, Saliency(resnet).attribute(_captum_input(image), target=TARGETS, abs=False), atol=1e-12)
    ours = attribute(resnet, image, "input_x_gradient", TARGETS)
    assert torch.allclose(ours, InputXGradient(resnet).attribute(_captum_input(image), target=TARGETS), atol=1e-12)


@pytest.mark.parametrize("baseline", [None, "blur", "uniform"])
def test_integrated_gradients_match_captum(resnet: nn.Module, image: Tensor, baseline: str | None) -> None:
    attr, delta = attribute(
        resnet, image, "integrated_gradients", TARGETS, baseline=baseline, steps=8, return_delta=True
    )
    ref, ref_delta = IntegratedGradients(resnet).attribute(
        _captum_input(image),
        baselines=make_baseline(image, baseline),
        target=TARGETS,
        n_steps=8,
        method="gausslegendre",
        return_convergence_delta=True,
    )
    assert torch.allclose(attr, ref, atol=1e-10)
    assert torch.allclose(delta, ref_delta, atol=1e-10)
    assert delta.abs().min() > 1e-6  # the BatchNorm shifts make the delta real, not rounding


def test_a_number_is_a_constant_baseline_as_in_captum(resnet: nn.Module, image: Tensor) -> None:
    """Captum takes baselines=0.00001 as the image filled with 0.00001."""
    attr, delta = attribute(
        resnet, image, "integrated_gradients", TARGETS, baseline=0.00001, steps=8, return_delta=True
    )
    ref, ref_delta = IntegratedGradients(resnet).attribute(
        _captum_input(image), baselines=0.00001, target=TARGETS, n_steps=8, method="gausslegendre",
        return_convergence_delta=True,
    )  # fmt: skip
    assert torch.allclose(attr, ref, atol=1e-10)
    assert torch.allclose(delta, ref_delta, atol=1e-10)
    assert not torch.allclose(attr, attribute(resnet, image, "integrated_gradients", TARGETS, steps=8), atol=1e-10)


def test_integrated_gradients_batch_size_does_not_change_the_result(resnet: nn.Module, image: Tensor) -> None:
    whole = attribute(resnet, image, "integrated_gradients", TARGETS, steps=6)
    assert torch.allclose(attribute(resnet, image, "integrated_gradients", TARGETS, steps=6, batch_size=5), whole)


def test_guided_backprop_matches_captum(resnet: nn.Module, image: Tensor) -> None:
    """resnet18 calls each block's ReLU(inplace=True) twice: the case hooks get wrong."""
    with pytest.warns(UserWarning, match="Setting backward hooks on ReLU"):
        ref = GuidedBackprop(resnet).attribute(_captum_input(image), target=TARGETS)
    ours = attribute(resnet, image, "guided_backprop", TARGETS)
    assert torch.allclose(ours, ref, atol=1e-12)
    assert not torch.allclose(ours, attribute(resnet, image, "saliency", TARGETS), atol=1e-3)


def test_smoothgrad_is_the_mean_gradient_over_its_noise(resnet: nn.Module, image: Tensor) -> None:
    """Same generator, same noise: a hand loop, image by image, gives the same mean."""
    x = image
    std = 0.2 * (x.flatten(1).amax(1) - x.flatten(1).amin(1))
    g = torch.Generator().manual_seed(5)
    expected = torch.zeros_like(x)
    for _ in range(2):
        for i in range(2):
            noisy = (x[i] + std[i] * torch.randn(x.shape[1:], generator=g, dtype=x.dtype))[None].requires_grad_()
            expected[i] += torch.autograd.grad(resnet(noisy)[0, TARGETS[i]], noisy)[0][0] / 2
    for batch_size in (None, 4):
        ours = attribute(
            resnet, x, "smoothgrad", TARGETS, samples=2, noise=0.2, batch_size=batch_size,
            generator=torch.Generator().manual_seed(5),
        )  # fmt: skip
        assert torch.allclose(ours, expected, atol=1e-12)


def test_smoothgrad_agrees_with_captum_noise_tunnel(resnet: nn.Module, image: Tensor) -> None:
    """Different noise, so a statistical check: each image spans 0..1, so Captum's stdevs = noise."""
    x, samples = image, 32
    torch.manual_seed(0)
    ref = NoiseTunnel(Saliency(resnet)).attribute(
        _captum_input(x), nt_type="smoothgrad", nt_samples=samples, stdevs=0.3, target=TARGETS, abs=False
    )
    ours = attribute(
        resnet, x, "smoothgrad", TARGETS, samples=samples, noise=0.3, generator=torch.Generator().manual_seed(0)
    )
    wrong_scale = attribute(resnet, x, "smoothgrad", TARGETS, samples=samples, noise=0.1)
    assert _cos(ours, ref) > 0.88 > _cos(wrong_scale, ref)  # measured: 0.91 and 0.82 (saliency: 0.69)


def test_blur_baseline_is_torchvisions_gaussian_blur(image: Tensor) -> None:
    half, sigma = 5, 0.05 * 32
    assert torch.allclose(make_baseline(image, "blur"), gaussian_blur(image, [2 * half + 1] * 2, [sigma] * 2))
    assert torch.equal(make_baseline(image, "uniform"), make_baseline(image, "uniform"))


# -- targets ---------------------------------------------------------------------------------------


def test_target_forms(resnet: nn.Module, image: Tensor) -> None:
    x = image
    top1 = resnet(x).argmax(1).tolist()
    saliency = attribute(resnet, x, "saliency", top1)
    assert torch.equal(attribute(resnet, x, "saliency"), saliency)
    assert torch.equal(attribute(resnet, x, "saliency", torch.tensor(top1)), saliency)
    for i, cls in enumerate(top1):
        assert torch.allclose(attribute(resnet, x, "saliency", cls)[i], saliency[i], atol=1e-12)
    ig = attribute(resnet, x, "integrated_gradients", top1, steps=2)
    assert torch.allclose(attribute(resnet, x, "integrated_gradients", steps=2), ig, atol=1e-12)
    inputs = x.clone().requires_grad_()
    expected = torch.autograd.grad((resnet(inputs)[:, 1] - resnet(inputs)[:, 2]).sum(), inputs)[0]
    ours = attribute(resnet, x, "saliency", lambda out: out[:, 1] - out[:, 2])
    assert torch.allclose(ours, expected, atol=1e-12)


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
@pytest.mark.parametrize(("target", "match"), [(10, "not a class"), ([1, 2, 3], "3 targets for a batch of 2")])
def test_wrong_target_raises_target_error(method: str, target: object, match: str) -> None:
    model = TwoLayer().double()
    with pytest.raises(TargetError, match=match):
        attribute(model, torch.randn(2, 4, dtype=torch.float64), method, target, steps=2, samples=2)
    assert hookscope.find_hooks(model) == []


# -- what attribute must not touch -----------------------------------------------------------------


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
def test_model_flags_grads_and_input_untouched(method: str) -> None:
    model = TwoLayer().double().train()
    model.fc1.requires_grad_(False)
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    before = x.detach().clone()
    with torch.no_grad():  # attribute enables gradients itself
        attr = attribute(model, x, method, 0, steps=3, samples=2)
    assert attr.shape == x.shape and not attr.requires_grad
    assert torch.equal(x.detach(), before) and x.grad is None
    assert model.training and [p.requires_grad for p in model.parameters()] == [False] * 2 + [True] * 4
    assert all(p.grad is None for p in model.parameters())
    assert hookscope.find_hooks(model) == []


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
def test_model_that_changes_its_input_in_place(method: str) -> None:
    torch.manual_seed(0)
    inplace = nn.Sequential(nn.ReLU(inplace=True), nn.Linear(4, 2)).double()
    plain = nn.Sequential(nn.ReLU(), inplace[1])
    x = torch.randn(3, 4, dtype=torch.float64)
    before = x.clone()
    options = {"steps": 3, "samples": 2, "generator": torch.Generator().manual_seed(0)}
    expected = attribute(plain, x, method, 1, **options)
    options["generator"] = torch.Generator().manual_seed(0)
    assert torch.allclose(attribute(inplace, x, method, 1, **options), expected, atol=1e-12)
    assert torch.equal(x, before)


def test_works_in_inference_mode() -> None:
    model = TwoLayer().double()
    x = torch.randn(2, 4, dtype=torch.float64)
    with torch.inference_mode():
        inside = attribute(model, x, "guided_backprop", 0)
    assert torch.equal(inside, attribute(model, x, "guided_backprop", 0))


class Raises(TwoLayer):
    def forward(self, x: Tensor) -> Tensor:
        self.relu(self.fc1(x))
        raise RuntimeError("boom mid-forward")


@pytest.mark.parametrize("method", ATTRIBUTION_METHODS)
def test_no_hooks_left_when_the_model_raises(method: str) -> None:
    model = Raises().double()
    with pytest.raises(RuntimeError, match="boom mid-forward"):
        attribute(model, torch.randn(2, 4, dtype=torch.float64), method, 0, steps=2, samples=2)
    assert hookscope.find_hooks(model) == []


# -- errors ----------------------------------------------------------------------------------------


def test_unknown_method_lists_the_methods() -> None:
    with pytest.raises(hookscope.HookscopeError, match=r"unknown method 'gradcam'; methods are saliency, .*guided"):
        attribute(TwoLayer(), torch.randn(1, 4), "gradcam")


def test_guided_backprop_without_relu_modules() -> None:
    with pytest.raises(OptionError, match=r"LeNet has no nn.ReLU module; .*functional relu"):
        attribute(LeNet(), torch.randn(1, 3, 32, 32), "guided_backprop", 0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "integrated_gradients", "baseline": torch.zeros(3)}, r"shape \(3,\) does not broadcast"),
        ({"method": "integrated_gradients", "baseline": "black"}, "not a baseline"),
        ({"method": "integrated_gradients", "baseline": "blur"}, r"needs \(batch, channels, height, width\)"),
        ({"method": "integrated_gradients", "steps": 0}, "steps must be a positive int"),
        ({"method": "smoothgrad", "batch_size": 0}, "batch_size must be a positive int"),
        ({"method": "smoothgrad", "noise": -1.0}, "noise must be >= 0"),
        ({"method": "saliency", "return_delta": True}, "return_delta=True needs method='integrated_gradients'"),
    ],
)
def test_bad_options(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        attribute(TwoLayer(), torch.randn(2, 4), target=0, **kwargs)


def test_integer_input_is_rejected() -> None:
    with pytest.raises(OptionError, match="floating-point tensor"):
        attribute(TwoLayer(), torch.ones(2, 4, dtype=torch.long))
