"""The maths of a linear probe, torch alone, float64: group-aware splits and three fits.

::

    train, test = group_split(groups, holdout=0.25, seed=0)      # whole groups on one side only
    fit = fit_logistic(x[train], y[train], classes=10, penalty=1e-3)
    accuracy(fit.predict(x[test]), y[test])

``x`` is (N, D), one row per example; ``groups`` (N,) says which examples came from one forward
pass of one input (an image, a sequence): a split never puts one group on both sides, so a probe
cannot score by recognising a sequence it saw in training (tokens of one sequence share most of
their activation). Every fit standardises the training features (mean 0, standard deviation 1,
``ddof=0``), fits there and returns its weights in the raw feature space, so ``x @ weight + bias``
is the probe's output on raw activations and ``weight``'s columns are directions in them.

``fit_logistic``      multinomial logistic regression, L2 ``penalty``, full-batch L-BFGS from zero
                      (deterministic): ``mean CE + penalty / 2 * ||W||^2`` on standardised features
``fit_ridge``         closed form ``(X'X + penalty * N * I)^-1 X'y`` on standardised, centred data
``fit_mean_difference``  nearest class mean: scores ``x . mu_c - ||mu_c||^2 / 2``, directions
                      ``mu_c - mu`` (for two classes, one direction ``mu_1 - mu_0``)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import OptionError

SMALL = 2**24  # multiply-adds per step below which a fit runs on one thread (thread hand-offs cost more)
EPS = 1e-12  # a feature whose training standard deviation is below this is left unscaled
STEPS = 100  # L-BFGS iterations of a logistic fit


@dataclass(frozen=True)
class LinearFit:
    """``x @ weight + bias``: (N, D) -> (N, K) scores, or (N, 1) values; float64, raw feature space."""

    weight: Tensor  # (D, K)
    bias: Tensor  # (K,)
    classes: bool  # scores of K classes (argmax), or K = 1 value

    def scores(self, x: Tensor) -> Tensor:
        return x.double() @ self.weight + self.bias  # (N, K)

    def predict(self, x: Tensor) -> Tensor:
        """(N,) class indices, or (N,) values."""
        scores = self.scores(x)
        return scores.argmax(dim=1) if self.classes else scores[:, 0]


def group_split(groups: Tensor, *, holdout: float, seed: int) -> tuple[Tensor, Tensor]:
    """(train, test) boolean masks over the N examples: a ``holdout`` share of the groups, drawn with
    ``seed``, tests; every example of a group lands on the same side."""
    if not 0 < holdout < 1:
        raise OptionError(f"holdout is the share of groups kept for testing, between 0 and 1, got {holdout!r}")
    names, group_of = torch.unique(groups, return_inverse=True)
    if len(names) < 2:
        raise OptionError(f"a probe's split needs at least 2 groups, got {len(names)}; pass groups= with more")
    order = torch.randperm(len(names), generator=torch.Generator().manual_seed(seed))
    n_test = min(max(1, round(holdout * len(names))), len(names) - 1)
    tested = torch.zeros(len(names), dtype=torch.bool)
    tested[order[:n_test]] = True
    test = tested[group_of]
    return ~test, test


def standardized(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(z, mean, scale): z = (x - mean) / scale per column, float64; constant columns keep scale 1."""
    x = x.double()
    mean = x.mean(dim=0)
    scale = x.std(dim=0, correction=0)
    scale = torch.where(scale > EPS, scale, torch.ones_like(scale))
    return (x - mean) / scale, mean, scale


def _raw(weight: Tensor, bias: Tensor, mean: Tensor, scale: Tensor, classes: bool) -> LinearFit:
    """A fit on standardised features as the same function of the raw ones."""
    raw = weight / scale[:, None]  # (D, K)
    return LinearFit(raw, bias - mean @ raw, classes)


def fit_logistic(x: Tensor, y: Tensor, *, classes: int, penalty: float) -> LinearFit:
    """Multinomial logistic regression of ``y`` (N,) in 0..classes-1 on ``x`` (N, D)."""
    z, mean, scale = standardized(x)
    weight = torch.zeros(z.shape[1], classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(classes, dtype=torch.float64, requires_grad=True)
    solver = torch.optim.LBFGS([weight, bias], lr=1, max_iter=STEPS, tolerance_grad=1e-7,
                               tolerance_change=1e-10, history_size=20, line_search_fn="strong_wolfe")  # fmt: skip
    target = y.long()

    def closure() -> Tensor:
        solver.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ weight + bias, target) + penalty / 2 * weight.square().sum()
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    with torch.enable_grad(), one_thread(z.numel() * classes < SMALL):
        solver.step(closure)  # type: ignore[no-untyped-call]
    return _raw(weight.detach(), bias.detach(), mean, scale, classes=True)


def fit_ridge(x: Tensor, y: Tensor, *, penalty: float) -> LinearFit:
    """Ridge regression of the values ``y`` (N,) on ``x`` (N, D): sklearn's ``Ridge(alpha=penalty * N)``
    on the standardised features."""
    z, mean, scale = standardized(x)
    target = y.double()
    centred = target - target.mean()
    n, d = z.shape
    if d <= n:  # (D, D) normal equations, else the (N, N) dual: the same solution
        weight = torch.linalg.solve(z.T @ z + penalty * n * torch.eye(d, dtype=z.dtype), z.T @ centred)
    else:
        weight = z.T @ torch.linalg.solve(z @ z.T + penalty * n * torch.eye(n, dtype=z.dtype), centred)
    return _raw(weight[:, None], target.mean()[None], mean, scale, classes=False)


def fit_mean_difference(x: Tensor, y: Tensor, *, classes: int) -> LinearFit:
    """The nearest class mean, as a linear classifier: scores ``x . mu_c - ||mu_c||^2 / 2``."""
    x = x.double()
    onehot = torch.nn.functional.one_hot(y.long(), classes).double()  # (N, K)
    counts = onehot.sum(dim=0)
    if bool((counts == 0).any()):
        missing = [int(c) for c in torch.nonzero(counts == 0).flatten()]
        raise OptionError(f"mean_difference needs every class in the training split, classes {missing} have none")
    means = (onehot.T @ x) / counts[:, None]  # (K, D)
    return LinearFit(means.T, -0.5 * means.square().sum(dim=1), classes=True)


@contextmanager
def one_thread(small: bool) -> Iterator[None]:
    """A small fit on one thread: torch's intra-op threads cost tens of ms a step on a busy machine,
    where a (1,000 x 100) step takes 1 ms alone. The thread count is restored on exit."""
    threads = torch.get_num_threads()
    if small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def accuracy(predicted: Tensor, y: Tensor) -> float:
    return float((predicted == y.long()).double().mean())


def r2(predicted: Tensor, y: Tensor) -> float:
    """The coefficient of determination, 1 - SS_res / SS_tot (sklearn's ``r2_score``)."""
    y = y.double()
    total = (y - y.mean()).square().sum()
    return float(1 - (y - predicted).square().sum() / total) if total > 0 else float("nan")
