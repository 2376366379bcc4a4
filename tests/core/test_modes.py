"""A model left in training mode: cam, attribute, build_report and patch_sweep explain it in eval mode,
say so once, and leave every module's flag and BatchNorm's running statistics exactly as they were."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.core.modes import evaluating, training_modules
from hookscope.errors import CaptureWarning


class Net(nn.Module):
    """Conv, BatchNorm, Dropout: three things training mode changes; ``head`` is left in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())
        self.drop = nn.Dropout(0.5)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(6 * 8 * 8, 4))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self.block(self.features(x))))


def trained_a_little() -> Net:
    """Running statistics away from their initial 0 and 1, so eval and train mode differ."""
    net = Net().train()
    with torch.no_grad():
        for seed in range(3):
            net(torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(seed)) * 2 + 1)
    net.head.eval()  # mixed flags: each one must come back as it was
    return net


def flags(model: nn.Module) -> dict[str, bool]:
    return {name: module.training for name, module in model.named_modules()}


def state(model: nn.Module) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def assert_untouched(model: nn.Module, before_flags: dict[str, bool], before_state: dict[str, Tensor]) -> None:
    assert flags(model) == before_flags
    after = model.state_dict()
    assert after.keys() == before_state.keys()
    for k, v in before_state.items():
        assert torch.equal(after[k], v), k  # bit-exact: running_mean, running_var, num_batches_tracked


def run_and_check(model: nn.Module, call: object) -> tuple[object, list[warnings.WarningMessage]]:
    before_flags, before_state = flags(model), state(model)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = call()  # type: ignore[operator]
    assert_untouched(model, before_flags, before_state)
    return result, [w for w in seen if "ran it in eval mode" in str(w.message)]


X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(7))


def test_evaluating_restores_each_flag_even_when_the_block_raises() -> None:
    net = trained_a_little()
    before = flags(net)
    inside: list[bool] = []

    def fail() -> None:
        with evaluating(net) as switched:
            inside.extend(flags(net).values())
            assert switched == ["features.1", "block.1", "drop"]
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail()
    assert inside and not any(inside)
    assert flags(net) == before and before["head"] is False and before["features"] is True


def test_only_modules_that_compute_otherwise_are_named() -> None:
    plain = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Dropout(0.0), nn.BatchNorm1d(3, track_running_stats=False))
    assert training_modules(plain.train()) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with evaluating(plain, "cam()"):  # nothing to say
            assert not plain.training
    assert plain.training
    assert training_modules(nn.Sequential(nn.Dropout(0.1), nn.GRU(3, 3, 2, dropout=0.2)).eval()) == []
    assert training_modules(nn.Sequential(nn.Dropout(0.1), nn.GRU(3, 3, 2, dropout=0.2))) == ["0", "1"]


def test_cam_explains_the_eval_model_and_says_so_once() -> None:
    net = trained_a_little()
    expected = hookscope.cam(copy.deepcopy(net).eval(), X, "gradcam", 1, select="block")
    heat, said = run_and_check(net, lambda: hookscope.cam(net, X, "gradcam", 1, select="block"))
    assert len(said) == 1 and said[0].category is CaptureWarning and "cam()" in str(said[0].message)
    assert said[0].filename == __file__  # at the user's line
    assert torch.equal(heat, expected)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["scorecam", "eigencam"])
def test_forward_only_cams_too(method: str) -> None:
    net = trained_a_little()
    expected = hookscope.cam(copy.deepcopy(net).eval(), X, method, 1, select="block")
    heat, said = run_and_check(net, lambda: hookscope.cam(net, X, method, 1, select="block"))
    assert len(said) == 1
    torch.testing.assert_close(heat, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", ["saliency", "integrated_gradients", "smoothgrad"])
def test_attribute_explains_the_eval_model(method: str) -> None:
    net = trained_a_little()
    options = {"steps": 4, "samples": 3}
    options_eval = {**options, "generator": torch.Generator().manual_seed(0)}
    expected = hookscope.attribute(copy.deepcopy(net).eval(), X, method, 2, **options_eval)  # type: ignore[arg-type]
    options_train = {**options, "generator": torch.Generator().manual_seed(0)}
    attr, said = run_and_check(net, lambda: hookscope.attribute(net, X, method, 2, **options_train))  # type: ignore[arg-type]
    assert len(said) == 1 and "attribute()" in str(said[0].message)
    torch.testing.assert_close(attr, expected, rtol=0, atol=1e-6)


def test_build_report_runs_in_eval_mode_and_remarks_it() -> None:
    pytest.importorskip("PIL")
    net = trained_a_little()
    expected = hookscope.build_report(copy.deepcopy(net).eval(), X, grads=True)
    build, said = run_and_check(net, lambda: hookscope.build_report(net, X, grads=True))
    assert said == []  # on the page, not a warning
    remarks = [r for r in build.remarks if "ran it in eval mode" in r]  # type: ignore[attr-defined]
    assert len(remarks) == 1 and "the report ran it" in remarks[0] and "features.1" in remarks[0]
    assert build.predictions == expected.predictions  # type: ignore[attr-defined]
    assert [c.overlays for c in build.cams] == [c.overlays for c in expected.cams]  # type: ignore[attr-defined]


def test_patch_sweep_numbers_are_the_eval_numbers() -> None:
    net = trained_a_little()
    clean, corrupt = X, X.flip(2, 3) - 1

    def sweep(model: nn.Module) -> hookscope.PatchSweep:
        return hookscope.patch_sweep(model, clean, corrupt, target=1, select=["features", "block", "drop"])

    expected = sweep(copy.deepcopy(net).eval())
    result, said = run_and_check(net, lambda: sweep(net))
    assert len(said) == 1 and "patch_sweep()" in str(said[0].message) and said[0].filename == __file__
    assert result.patched == expected.patched and result.restored == expected.restored  # type: ignore[attr-defined]
    assert result.forwards == expected.forwards == 3  # batched: three copies in one forward pass
    by_hand = copy.deepcopy(net).eval()
    with torch.no_grad():
        clean_logit = float(by_hand(clean)[:, 1].double().mean())
    assert result.metric_clean == expected.metric_clean == pytest.approx(clean_logit, rel=1e-6)  # type: ignore[attr-defined]
