"""Directions from a store: planted offsets found (where repeng's default is not), the peers' mean aggregator
matched, LeNet's 7 against 1 separated on held-out digits, and rows streamed within a memory bound."""

from __future__ import annotations

import math
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.errors import OptionError, ShapeError
from hookscope.probes import fit as fits
from hookscope.steer import contrast
from hookscope.steer import directions as streamed
from hookscope.zoo import lenet

D, N, NOISE = 64, 200, 0.3


def planted(seed: int = 2) -> tuple[Tensor, Tensor, Tensor]:
    """(d, toward, away): ``toward = base + 2 d + noise``, ``away = base + noise``, with a unit ``d`` (D,)."""
    g = torch.Generator().manual_seed(seed)
    d = nn.functional.normalize(torch.randn(D, generator=g, dtype=torch.float64), dim=0)
    base = torch.randn(N, D, generator=g, dtype=torch.float64)
    toward = base + 2 * d + NOISE * torch.randn(N, D, generator=g, dtype=torch.float64)
    away = base + NOISE * torch.randn(N, D, generator=g, dtype=torch.float64)
    return d, toward, away


def stored(rows: Tensor, out: Path, batch: int = 50) -> hookscope.Run:
    """``rows`` (N, ...) as the outputs of an identity layer, extracted to a store ``batch`` rows at a time."""
    model = nn.Sequential(nn.Identity())
    return hookscope.extract(model, list(rows.split(batch)), out=out, select="0", progress=False)


def interleaved(toward: Tensor, away: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rows [t0, a0, t1, a1, ...], their labels [1, 0, 1, 0, ...] and pair ids [0, 0, 1, 1, ...]."""
    rows = torch.stack([toward, away], dim=1).reshape(-1, toward.shape[1])
    labels = torch.tensor([1, 0]).repeat(len(toward))
    return rows, labels, torch.arange(len(toward)).repeat_interleave(2)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> tuple[Tensor, Tensor, Tensor, Tensor, hookscope.Run]:
    d, toward, away = planted()
    rows, labels, ids = interleaved(toward, away)
    return d, rows, labels, ids, stored(rows.float(), tmp_path_factory.mktemp("pairs") / "pairs.hookscope")


def repeng_default(toward: Tensor, away: Tensor) -> Tensor:
    """repeng 0.4's ``read_representations`` with its default ``pca_diff``, on these rows as the hidden states."""
    np.float_ = np.float64  # type: ignore[attr-defined]  # repeng 0.4 names numpy.float_, which numpy 2 removed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its own imports' deprecation warnings
        import repeng.extract

    hidden = torch.stack([toward, away], dim=1).reshape(-1, D).float().numpy()  # its order: positive, negative, ...
    model = types.SimpleNamespace(config=types.SimpleNamespace(num_hidden_layers=2),
                                  transformer=types.SimpleNamespace(h=[None, None]))  # fmt: skip
    entries = [repeng.extract.DatasetEntry("+", "-")] * len(toward)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(repeng.extract, "batched_get_hiddens", lambda *args, **kwargs: {0: hidden.copy()})
        patch.setattr(repeng.extract.tqdm, "tqdm", lambda it, **kwargs: it)
        found = repeng.extract.read_representations(model, None, entries, hidden_layers=[0])
    return torch.as_tensor(found[0]).double()


def test_pca_of_uncentred_pair_differences_finds_the_planted_offset(pairs) -> None:
    d, rows, labels, ids, run = pairs
    theirs = repeng_default(rows[0::2], rows[1::2])
    assert abs(float(theirs @ d) / float(theirs.norm())) == pytest.approx(0.184, abs=2e-3)  # the concept centred away
    for method in ("pca", "mean_difference"):  # logistic, unpaired in 64 dimensions from 300 rows: |cos| 0.75
        found = hookscope.directions(run, labels, groups=ids, method=method)["0"]
        assert float(found.unit @ d) >= 0.99, method  # the sign too: from the 0s toward the 1s
        assert found.auc > 0.9 and found.examples == (300, 100) and found.groups == N


def test_pca_is_the_uncentred_top_axis_of_the_differences_by_hand(pairs) -> None:
    _, rows, labels, ids, run = pairs
    found = hookscope.directions(run, labels, groups=ids, method="pca", seed=3)["0"]
    train, _ = fits.group_split(ids, holdout=0.25, seed=3)
    diff = (rows[0::2] - rows[1::2])[train[0::2]].float().double()
    u = torch.linalg.svd(diff, full_matrices=False).Vh[0]  # right singular vector: uncentred
    u = u * torch.sign(u @ diff.mean(dim=0))
    torch.testing.assert_close(found.unit, u, rtol=0, atol=1e-7)  # eigh of the Gram matrix, against an SVD
    assert found.norm == pytest.approx(float(diff.mean(dim=0) @ u), rel=1e-8)


def test_mean_difference_equals_steering_vectors_mean_aggregator(pairs) -> None:
    from steering_vectors.aggregators import mean_aggregator, pca_aggregator

    _, rows, labels, ids, run = pairs
    found = hookscope.directions(run, labels, groups=ids, holdout=0.5, seed=1)
    train, _ = fits.group_split(ids, holdout=0.5, seed=1)
    toward, away = rows[0::2][train[0::2]].float().double(), rows[1::2][train[0::2]].float().double()
    theirs = mean_aggregator()(toward, away)
    torch.testing.assert_close(found["0"].vector, theirs, rtol=0, atol=1e-6)
    pca = hookscope.directions(run, labels, groups=ids, holdout=0.5, seed=1, method="pca")["0"]
    torch.testing.assert_close(pca.unit, pca_aggregator()(toward, away), rtol=0, atol=1e-6)


def test_logistic_is_the_probes_fit_streamed(pairs) -> None:
    _, rows, labels, ids, run = pairs
    found = hookscope.directions(run, labels, groups=ids, method="logistic", penalty=1e-2, max_memory=8 * D * 30)
    train, _ = fits.group_split(ids, holdout=0.25, seed=0)
    fit = fits.fit_logistic(rows[train].float().double(), labels[train], classes=2, penalty=1e-2)
    theirs = fit.weight[:, 1] - fit.weight[:, 0]
    torch.testing.assert_close(found["0"].unit, theirs / theirs.norm(), rtol=0, atol=1e-6)
    probe = hookscope.probe(run, labels, groups=ids, penalty=1e-2)["0"].direction  # the same split, in memory
    torch.testing.assert_close(found["0"].unit, probe / probe.norm(), rtol=0, atol=1e-6)


def test_pair_ids_may_be_text(pairs) -> None:
    _, _, labels, ids, run = pairs
    named = hookscope.directions(run, labels, groups=[f"pair {i}" for i in ids.tolist()], method="pca")["0"]
    numbered = hookscope.directions(run, labels, groups=ids, method="pca")["0"]
    assert named.groups == numbered.groups == N and named.examples == numbered.examples


def test_auc_equals_sklearn() -> None:
    from sklearn.metrics import roc_auc_score

    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (300,), generator=g).double()  # ties
    labels = torch.randint(0, 2, (300,), generator=g)
    assert contrast.auc(scores, labels) == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()), abs=1e-12)


@pytest.fixture(scope="module")
def sevens_and_ones(tmp_path_factory) -> tuple[hookscope.Run, Tensor]:
    model, (x, y) = lenet.lenet(), lenet.digits("all")
    keep = (y == 7) | (y == 1)
    return hookscope.extract(model, list(x[keep].split(64)), out=tmp_path_factory.mktemp("digits") / "d.hookscope",
                             select=["relu3", "relu4"], progress=False), (y[keep] == 7).long()  # fmt: skip


def test_seven_against_one_separates_held_out_digits(sevens_and_ones) -> None:
    run, labels = sevens_and_ones
    heard: list[tuple[str, int, int]] = []
    found = hookscope.directions(run, labels, method="mean_difference", progress=lambda *a: heard.append(a))
    assert list(found) == ["relu3", "relu4"] and heard == [("directions", n, 2) for n in range(3)]
    assert all(found[site].auc > 0.95 for site in found), found.table()
    assert sum(found["relu4"].examples) == len(labels) == found.provenance["rows"]


def test_a_store_larger_than_the_budget_is_read_in_chunks(pairs, monkeypatch) -> None:
    _, _, labels, ids, run = pairs
    sizes: list[int] = []
    read = streamed.read_rows
    monkeypatch.setattr(streamed, "read_rows", lambda *a: sizes.append(a[3]) or read(*a))
    budget = 2 * 8 * D * 16  # 16 rows read at a time, and 16 more of pairs gathered
    small = hookscope.directions(run, labels, groups=ids, method="pca", max_memory=budget)["0"]
    assert max(sizes) == 16 and len(sizes) > 3 * (2 * N) // 16  # sums, 19 blocks of 8 pairs, held-out rows
    whole = hookscope.directions(run, labels, groups=ids, method="pca")["0"]
    torch.testing.assert_close(small.unit, whole.unit, rtol=0, atol=1e-12)


def test_bad_labels_and_groups_are_refused(pairs) -> None:
    _, _, labels, ids, run = pairs
    with pytest.raises(OptionError, match=r"labels are 1 \(toward\) and 0"):
        hookscope.directions(run, labels * 2)
    with pytest.raises(ShapeError, match="labels have 399 entries"):
        hookscope.directions(run, labels[:-1])
    with pytest.raises(OptionError, match="reads pairs"):
        hookscope.directions(run, labels, groups=ids // 2, method="pca")
    with pytest.raises(OptionError, match="one of mean_difference, pca, logistic"):
        hookscope.directions(run, labels, method="pca_diff")
    with pytest.raises(OptionError, match=r"directions read a store .* got a dict"):
        hookscope.directions(dict(run), labels)
    with pytest.raises(OptionError, match="hold no row labelled"):  # two groups: one label each, one held out
        hookscope.directions(run, labels, groups=labels)


def test_rows_of_other_shapes_or_not_finite_are_refused(tmp_path) -> None:
    labels = torch.tensor([1, 0] * 4)
    uneven = hookscope.extract(nn.Sequential(nn.Identity()), [torch.ones(4, 3, 2), torch.ones(4, 5, 2)],
                               out=tmp_path / "uneven.hookscope", select="0", progress=False)  # fmt: skip
    with pytest.raises(ShapeError, match=r"one shape per row at '0', got \[\(3, 2\), \(5, 2\)\]"):
        hookscope.directions(uneven, labels)
    rows = torch.ones(8, 3)
    rows[5, 1] = float("nan")
    broken = stored(rows, tmp_path / "nan.hookscope", batch=4)
    with pytest.raises(hookscope.NonFiniteError, match="holds 1 NaN or infinite values in batch 1"):
        hookscope.directions(broken, labels)


def test_a_held_out_set_of_one_label_warns_and_measures_nothing(pairs) -> None:
    _, _, labels, _, run = pairs
    four = (1 - labels) * 2 + torch.arange(len(labels)) % 4 // 2  # two groups of each label: one is held out
    with pytest.warns(hookscope.HookscopeWarning, match="hold one label only") as record:
        found = hookscope.directions(run, labels, groups=four)["0"]
    assert math.isnan(found.auc) and found.groups == 4 and record[0].filename == __file__


def test_directions_show_as_a_table_a_notebook_view_and_a_report_section(sevens_and_ones) -> None:
    from hookscope.report.sections import as_section

    run, labels = sevens_and_ones
    found = hookscope.directions(run, labels, select="relu4")
    lines = found.table().splitlines()
    assert lines[0].split() == ["site", "method", "norm", "held-out", "AUC", "examples", "groups"]
    assert lines[1].split()[:2] == ["relu4", "mean_difference"] and "179 toward, 182 away" in lines[-1]
    assert found.provenance["store_hash"][:12] in lines[-1] and len(found.provenance["store_hash"]) == 64
    assert "Directions at 1 sites" in (found._repr_html_() or "") and found.plot().size[0] > 100
    section = as_section(found)
    assert (section.id, section.title) == ("directions", "Directions by site") and "relu4" in section.html
