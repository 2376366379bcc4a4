"""Linear probes: LeNet's digits by depth, a leakage control, and each fit against its oracle (sklearn, by hand)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

import hookscope
from hookscope import edits
from hookscope.edits.values import Where
from hookscope.errors import OptionError, SelectionError, ShapeError
from hookscope.probes import fit as fits
from hookscope.reducers import spatial_mean
from hookscope.zoo import lenet
from tests.report.test_narrow import check_widths

DEPTH = ["relu1", "relu2", "relu3", "relu4", "fc3"]


@pytest.fixture(scope="module")
def digits() -> tuple[hookscope.Capture, torch.Tensor]:
    model, (x, y) = lenet.lenet(), lenet.digits("all")
    with hookscope.capture(model, [*DEPTH, "fc2"], reduce=spatial_mean()) as cap, torch.no_grad():
        model(x)
    return cap, y


def test_digits_become_linearly_readable_with_depth(digits) -> None:
    cap, y = digits
    threads = torch.get_num_threads()
    probes = hookscope.probe(cap, y, select=DEPTH)
    assert torch.get_num_threads() == threads  # small fits run on one thread, then it is given back
    tests = [probes[site].test for site in DEPTH]
    assert list(probes) == DEPTH
    assert tests[0] < 0.6 and all(b >= a - 0.01 for a, b in itertools.pairwise(tests)), tests
    assert min(tests[-2:]) >= 0.95, tests
    assert probes["relu1"].groups == len(y) and sum(probes["relu1"].examples) == len(y)


def test_logistic_matches_sklearn_on_the_same_split(digits) -> None:
    from sklearn.linear_model import LogisticRegression

    cap, y = digits
    x = cap["relu2"].output.double()
    ours = hookscope.probe(cap, y, select="relu2", penalty=1e-2)["relu2"]
    train, test = fits.group_split(torch.arange(len(y)), holdout=0.25, seed=0)
    z, mean, scale = fits.standardized(x[train])
    theirs = LogisticRegression(C=1 / (1e-2 * int(train.sum())), max_iter=5000, tol=1e-10)
    theirs.fit(z.numpy(), y[train].numpy())
    accuracy = theirs.score(((x[test] - mean) / scale).numpy(), y[test].numpy())
    assert ours.test == pytest.approx(accuracy, abs=0.015)


def test_ridge_r2_equals_sklearn_ridge_on_the_same_split() -> None:
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score

    g = torch.Generator().manual_seed(1)
    x = torch.randn(120, 20, generator=g) * torch.linspace(0.1, 5, 20)
    values = x @ torch.randn(20, generator=g) + 0.5 * torch.randn(120, generator=g)
    cap = _capture(nn.Identity(), x)
    ours = hookscope.probe(cap, values, penalty=0.05)
    train, test = fits.group_split(torch.arange(120), holdout=0.25, seed=0)
    z, mean, scale = fits.standardized(x[train])
    theirs = Ridge(alpha=0.05 * int(train.sum())).fit(z.numpy(), values[train].double().numpy())
    expected = r2_score(values[test].double().numpy(), theirs.predict(((x[test] - mean) / scale).numpy()))
    probe = next(iter(ours.values()))
    assert probe.method == "ridge" and probe.metric == "r2"
    assert probe.test == pytest.approx(expected, abs=1e-9)


def test_shuffled_labels_leak_through_a_token_split_but_not_a_group_split() -> None:
    """Tokens of one sequence share its activation: split by token, the probe recognises sequences."""
    g = torch.Generator().manual_seed(0)
    sequences, tokens, width = 400, 4, 512
    x = torch.randn(sequences, 1, width, generator=g) + 0.3 * torch.randn(sequences, tokens, width, generator=g)
    shuffled = torch.randint(0, 2, (sequences,), generator=g)  # a label per sequence, unrelated to x
    cap = _capture(nn.Identity(), x)
    by_group = next(iter(hookscope.probe(cap, shuffled).values()))
    by_token = next(iter(hookscope.probe(cap, shuffled, groups=torch.arange(sequences * tokens)).values()))
    assert by_group.groups == sequences and sum(by_group.examples) == sequences * tokens
    assert abs(by_group.test - 0.5) < 0.12, by_group
    assert by_token.test > 0.9, by_token


def test_mean_difference_is_the_difference_of_the_class_means() -> None:
    g = torch.Generator().manual_seed(2)
    y = torch.arange(200) % 2
    x = torch.randn(200, 8, generator=g) + 3.0 * y[:, None] * torch.eye(8)[0]
    probe = next(iter(hookscope.probe(_capture(nn.Identity(), x), y, method="mean_difference").values()))
    train, _ = fits.group_split(torch.arange(200), holdout=0.25, seed=0)
    xt, yt = x[train].double(), y[train]
    torch.testing.assert_close(probe.direction, xt[yt == 1].mean(0) - xt[yt == 0].mean(0))
    assert probe.test > 0.9


def test_project_out_removes_what_the_probe_reads(digits) -> None:
    cap, y = digits
    probe = hookscope.probe(cap, y, select="fc2")["fc2"]
    acts = cap["fc2"].output
    assert probe.direction.shape == (10, 84) and probe.score(acts, y) > 0.95
    removed = edits.project_out(probe.direction)(acts, Where("fc2", "output", "out", 0))
    assert probe.score(removed, y) < 0.2  # every image gets the same prediction: chance
    # the rest of the activation is untouched: the removed part lies in the directions' span
    basis = torch.linalg.svd(probe.direction.T, full_matrices=False).U[:, :9]
    gone = acts.double() - removed.double()
    torch.testing.assert_close(gone @ basis @ basis.T, gone, atol=1e-5, rtol=1e-4)


def test_project_out_inside_an_edit_and_steering_with_add() -> None:
    g = torch.Generator().manual_seed(3)
    y = torch.arange(160) % 2
    x = torch.randn(160, 6, generator=g) + 2.0 * y[:, None] * torch.ones(6)
    layer = nn.Linear(6, 6).double()
    with torch.no_grad():
        layer.weight.copy_(torch.eye(6)), layer.bias.zero_()
    probe = next(iter(hookscope.probe(_capture(layer, x.double()), y).values()))
    with hookscope.edit(layer, {"": edits.project_out(probe.direction)}), torch.no_grad():
        assert probe.score(layer(x.double()), y) == pytest.approx(0.5)
    with hookscope.edit(layer, {"": edits.add(100 * probe.direction)}), torch.no_grad():
        assert probe.score(layer(x.double()), torch.ones(160)) == 1.0  # steered: every row reads as class 1


def test_a_store_probes_as_the_capture_does(tmp_path, digits) -> None:
    cap, y = digits
    model, (x, _) = lenet.lenet(), lenet.digits("all")
    loader = [x[i : i + 256] for i in range(0, len(x), 256)]
    hookscope.extract(model, loader, select="relu2", out=tmp_path / "acts", progress=False)
    stored = hookscope.probe(tmp_path / "acts", y, reduce=spatial_mean(), method="mean_difference")["relu2"]
    held = hookscope.probe(cap, y, select="relu2", method="mean_difference")["relu2"]
    assert stored.examples == held.examples and stored.test == pytest.approx(held.test, abs=1e-3)
    torch.testing.assert_close(stored.direction, held.direction, atol=1e-5, rtol=1e-5)


def test_results_show_as_table_plot_and_html(digits) -> None:
    cap, y = digits
    probes = hookscope.probe(cap, y, select=["relu3", "fc3"])
    lines = probes.table().splitlines()
    assert lines[0].split() == ["site", "method", "train", "test", "chance", "examples", "groups"]
    assert lines[2].split()[:4] == ["fc3", "logistic", f"{probes['fc3'].train:.3f}", f"{probes['fc3'].test:.3f}"]
    assert probes.plot().size[0] > 200
    assert "Linear probes at 2 sites" in (probes._repr_html_() or "")


def test_wrong_inputs_say_what_to_pass(digits) -> None:
    cap, y = digits
    with pytest.raises(SelectionError, match=r"'relu9' matched no site of the capture \(6 sites; closest: 'relu4'"):
        hookscope.probe(cap, y, select="relu9")
    with pytest.raises(ShapeError, match="labels has 10 entries, but 'fc3' holds 1797 rows"):
        hookscope.probe(cap, y[:10], select="fc3")
    with pytest.raises(OptionError, match="method is one of logistic, ridge, mean_difference, got 'lasso'"):
        hookscope.probe(cap, y, method="lasso")
    with pytest.raises(OptionError, match="needs integer classes"):
        hookscope.probe(cap, y.double(), method="logistic")
    with pytest.raises(OptionError, match="holdout is the share of groups"):
        hookscope.probe(cap, y, select="fc3", holdout=1.5)
    broken = _capture(nn.Identity(), torch.tensor([[1.0, float("nan")], [2.0, 3.0]]), finite=False)
    with pytest.raises(hookscope.NonFiniteError, match="1 NaN or infinite values of 4"):
        hookscope.probe(broken, [0, 1])


def _capture(module: nn.Module, x: torch.Tensor, *, finite: bool = True) -> hookscope.Capture:
    with hookscope.capture(module, "") as cap, torch.no_grad():
        module(x)
    assert len(cap) == 1 and np.isfinite(next(iter(cap.values())).output.numpy()).all() == finite
    return cap


def test_probes_are_a_section_of_the_report(digits, chromium, tmp_path) -> None:
    cap, y = digits
    probes = hookscope.probe(cap, y, select=["relu1", "fc3"])
    model, (x, _) = lenet.lenet(), lenet.digits("test")
    report = hookscope.build_report(model, x[:2], select="conv1", sections=[probes])
    assert [s.id for s in report.sections] == ["probes"]
    html = hookscope.render_html(report)
    assert "Linear probes by site" in html and f"{probes['fc3'].test:.3f}" in html
    hookscope.write_report(report, tmp_path / "page")
    check_widths(chromium, tmp_path / "page" / "index.html", "probes")  # 1280 and 400 px, screenshots kept


class Twice(nn.Module):
    """One layer called twice a forward pass: a store holds two calls of it per batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.relu(self.lin(x)))


def test_call_picks_one_call_a_batch_of_a_store(tmp_path) -> None:
    model, g = Twice().eval(), torch.Generator().manual_seed(4)
    x = torch.randn(48, 4, generator=g)
    y = (x[:, 0] > 0).long()
    hookscope.extract(model, x.split(16), select="lin", out=tmp_path / "twice", progress=False)
    with pytest.raises(ShapeError, match="labels has 48 entries, but 'lin' holds 96 rows"):
        hookscope.probe(tmp_path / "twice", y)
    probe = hookscope.probe(tmp_path / "twice", y, call=1, method="mean_difference")["lin"]
    with torch.no_grad():
        second = model(x).double()
    train, _ = fits.group_split(torch.arange(48), holdout=0.25, seed=0)
    xt, yt = second[train], y[train]
    torch.testing.assert_close(probe.direction, xt[yt == 1].mean(0) - xt[yt == 0].mean(0))
