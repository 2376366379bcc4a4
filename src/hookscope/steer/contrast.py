"""The maths of a contrast direction, torch alone, float64, fed a chunk of rows at a time.

::

    sums = Sums(features)
    for x, y in chunks:                       # (n, D) float64 rows, (n,) labels 0 or 1
        sums.add(x, y)
    sums.mean_difference()                    # mu_1 - mu_0
    top_direction(gram, sums.mean_difference())   # uncentred PCA of pair differences
    auc(scores, labels)                       # P(score of a 1 > score of a 0), ties counted half

Nothing here holds more than one chunk of rows: ``Sums`` keeps per-class counts and sums and the
running mean and spread of every row (Chan et al.'s merge), a Gram matrix is ``D x D``, and
``fit_logistic`` evaluates its loss chunk by chunk, so a fit over a store reads it again per
evaluation instead of holding it. Paired differences are never centred: with pairs ``a_i - b_i =
d + noise``, centring subtracts ``d`` itself and leaves the noise (repeng's default ``pca_diff``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from ..errors import OptionError
from ..probes.fit import EPS, STEPS

Chunks = Callable[[], Iterator[tuple[Tensor, Tensor]]]  # a fresh pass over (x (n, D), y (n,)) chunks


class Sums:
    """Per-class counts and sums, and the mean and spread of all rows (for standardising), merged chunk by chunk.

    Args:
        features: D, the length of a row.
    """

    def __init__(self, features: int) -> None:
        self.counts = torch.zeros(2, dtype=torch.float64)
        self.sums = torch.zeros(2, features, dtype=torch.float64)
        self.mean = torch.zeros(features, dtype=torch.float64)
        self.m2 = torch.zeros(features, dtype=torch.float64)  # sum of squared deviations from the mean

    def add(self, x: Tensor, y: Tensor) -> None:
        """Add the rows ``x`` (n, D) with labels ``y`` (n,) in {0, 1}."""
        if len(x) == 0:
            return
        onehot = torch.nn.functional.one_hot(y.long(), 2).double()  # (n, 2)
        before = float(self.counts.sum())
        self.counts += onehot.sum(dim=0)
        self.sums += onehot.T @ x
        n, mean = len(x), x.mean(dim=0)
        delta, total = mean - self.mean, before + n
        self.m2 += (x - mean).square().sum(dim=0) + delta.square() * before * n / total
        self.mean += delta * n / total

    def mean_difference(self) -> Tensor:
        """(D,) the mean of class 1 less the mean of class 0."""
        return self.sums[1] / self.counts[1] - self.sums[0] / self.counts[0]

    def scale(self) -> Tensor:
        """(D,) the standard deviation of every feature (``ddof=0``), 1 where it is below ``EPS``."""
        std = (self.m2 / self.counts.sum()).sqrt()
        return torch.where(std > EPS, std, torch.ones_like(std))


def gram(differences: Iterator[Tensor], features: int) -> Tensor:
    """(D, D) ``sum_i d_i d_i^T`` over chunks of differences (n, D), uncentred."""
    total = torch.zeros(features, features, dtype=torch.float64)
    for d in differences:
        total += d.T @ d
    return total


def top_direction(matrix: Tensor, toward: Tensor) -> Tensor:
    """(D,) the unit eigenvector of the symmetric ``matrix``'s largest eigenvalue, signed so that ``toward`` projects
    positive on it: the first principal axis of uncentred differences, pointing from class 0 to class 1."""
    _, vectors = torch.linalg.eigh(matrix)
    top: Tensor = vectors[:, -1]
    return top if float(top @ toward) >= 0 else -top


def fit_logistic(chunks: Chunks, mean: Tensor, scale: Tensor, *, rows: int, penalty: float) -> Tensor:
    """(D,) the weight of class 1 less class 0 of ``probes.fit.fit_logistic`` (two classes, the same loss, solver
    and start), in the raw feature space, evaluated a chunk at a time: each evaluation is one pass over the
    ``rows`` training rows."""
    if rows == 0:
        raise OptionError("a logistic direction needs training rows; pass more groups or a smaller holdout")
    weight = torch.zeros(len(mean), 2, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    solver = torch.optim.LBFGS([weight, bias], lr=1, max_iter=STEPS, tolerance_grad=1e-7,
                               tolerance_change=1e-10, history_size=20, line_search_fn="strong_wolfe")  # fmt: skip

    def closure() -> Tensor:
        solver.zero_grad()
        total = 0.0
        for x, y in chunks():
            z = (x - mean) / scale
            part = torch.nn.functional.cross_entropy(z @ weight + bias, y.long(), reduction="sum") / rows
            part.backward()  # type: ignore[no-untyped-call]
            total += float(part.detach())
        ridge = penalty / 2 * weight.square().sum()
        ridge.backward()  # type: ignore[no-untyped-call]
        return torch.tensor(total + float(ridge.detach()), dtype=torch.float64)

    with torch.enable_grad():
        solver.step(closure)  # type: ignore[no-untyped-call]
    raw = weight.detach() / scale[:, None]  # (D, 2)
    return raw[:, 1] - raw[:, 0]


def auc(scores: Tensor, labels: Tensor) -> float:
    """The area under the ROC curve of ``scores`` (n,) for ``labels`` (n,) in {0, 1}: the Mann-Whitney U
    of the 1s over the 0s, ties counted half (sklearn's ``roc_auc_score``); NaN without both labels."""
    positive = labels.bool()
    ones, zeros = int(positive.sum()), int((~positive).sum())
    if ones == 0 or zeros == 0:
        return float("nan")
    order = torch.argsort(scores.double())
    ranks = torch.empty(len(scores), dtype=torch.float64)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    values, inverse = torch.unique(scores.double(), return_inverse=True)  # ties share their mean rank
    mean_rank = torch.zeros(len(values), dtype=torch.float64).index_add_(0, inverse, ranks)
    mean_rank /= torch.bincount(inverse, minlength=len(values)).double()
    u = float(mean_rank[inverse][positive].sum()) - ones * (ones + 1) / 2
    return u / (ones * zeros)
