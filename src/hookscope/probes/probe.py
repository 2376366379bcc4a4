"""``probe``: a linear probe per site of a store or a capture, trained and tested on a group-aware split.

::

    probes = hookscope.probe("acts.hookscope", labels, select="fc*", groups=image_ids)
    print(probes.table())                 # accuracy (or R^2) per site, train and test, chance beside
    probes.plot()                         # the metric against depth (forward order)
    edits.project_out(probes["fc2"].direction)   # the probe's direction(s), in the site's shape

Examples come from each site's tensor (``kind``, ``key``, ``call``), after ``reduce=`` when given
(``hookscope.reducers.spatial_mean()`` probes a CNN's channel means instead of its whole map):
(B, D) rows are examples; (B, T, D) tokens are, each sequence one group (labels per sequence are
repeated over its tokens); (B, C, *S) maps are flattened, one example per image. ``groups``: one
id per row (image or sequence) or per example; default: each row its own group. A split never
separates a group (``hookscope.probes.fit.group_split``): splitting tokens leaks a sequence's
shared activation into the test set.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor

from ..base.words import closest
from ..core.kinds import Kind
from ..core.policy import Reducer
from ..core.records import Record
from ..core.select import Selector
from ..errors import NonFiniteError, NotCapturedError, OptionError, ShapeError
from ..progress import Progress, callback
from ..store.reader import Run, load, selected_sites
from . import fit as fits
from .result import Probe, Probes

METHODS = ("logistic", "ridge", "mean_difference")
Labels = Tensor | Sequence[int] | Sequence[float]


def probe(
    source: Mapping[str, Record] | str | os.PathLike[str],
    labels: Labels,
    *,
    select: Selector | None = None,
    groups: Tensor | Sequence[Any] | None = None,
    method: str | None = None,
    kind: Kind = "output",
    key: str | None = None,
    call: int | None = None,
    reduce: Reducer | None = None,
    holdout: float = 0.25,
    penalty: float = 1e-3,
    seed: int = 0,
    progress: Progress = None,
) -> Probes:
    """A linear probe of ``labels`` at every site ``select`` picks (None: every site).

    ``source``: a store (a path or ``hookscope.load``'s ``Run``) or a ``Capture``; ``select`` picks its
    sites as ``core.store_sites.select_sites`` says (names, globs, ``re:``, module types, a list).
    ``labels``: one per row (image, sequence) or per example (token), integer classes or float values. ``method``:
    ``logistic`` (classes, the default for integers), ``ridge`` (values, the default for floats) or
    ``mean_difference`` (classes, nearest class mean). ``holdout``: the share of groups tested,
    drawn with ``seed``; ``penalty``: the L2 strength (ridge: sklearn's ``alpha / N``). The
    metric is accuracy for classes, R^2 for values. ``progress`` (``hookscope.progress``; default
    quiet) hears ``("probe", sites done, sites)`` after each site's fit.

    Args:
        source: a store (a path or a ``load``-ed ``Run``) or a ``Capture``.
        labels: one per row (image, sequence) or per example (token): integer classes or float values.
        select: site names or globs probed; None probes every site.
        groups: one id per row or per example, kept on one side of the split; None makes each row its own group.
        method: ``logistic``, ``ridge`` or ``mean_difference``; None picks ``logistic`` for integer
            labels, ``ridge`` for floats.
        kind: the kind read (default ``output``).
        key: the tensor of a call; None takes the site's only (or first) tensor.
        call: the call read at a site that runs several times; None requires one call per batch.
        reduce: a ``(site, kind, key, tensor)`` reducer applied first (``reducers.spatial_mean()``).
        holdout: the share of groups tested, in (0, 1).
        penalty: the L2 strength (ridge: sklearn's ``alpha / N``).
        seed: the seed of the split.
        progress: None or False (quiet), True (lines on stderr), a stream, or a callable
            ``(stage, done, total)`` (``hookscope.progress``).

    Returns:
        ``Probes``, per site, the fitted probe with its train and test metric (accuracy for classes,
        R^2 for values) and the chance level.

    Raises:
        OptionError: labels neither integer nor float, an unknown method or one that needs classes, or
            a ``reduce`` that keeps nothing.
        SelectionError: ``select`` matches no site.
        NotCapturedError: a site has no call in the source.
        ShapeError: the labels or groups do not match the rows, or a site's shapes differ between batches.
        NonFiniteError: a site holds NaN or infinite activations.
    """
    run = load(source) if isinstance(source, (str, os.PathLike)) else source
    target = _labels(labels)
    chosen = _method(method, target)
    found: dict[str, Probe] = {}
    sites, step = selected_sites(run, select), partial(callback(progress), "probe")
    step(0, len(sites))
    for done, site in enumerate(sites, 1):
        x, y, group, shape = _examples(_tensors(run, site, kind, key, call, reduce), target, groups, site)
        found[site] = _fit_site(site, chosen, x, y, group, shape, holdout=holdout, penalty=penalty, seed=seed)
        step(done, len(sites))
    return Probes(found)


def _fit_site(site: str, method: str, x: Tensor, y: Tensor, groups: Tensor, shape: tuple[int, ...], *,
              holdout: float, penalty: float, seed: int) -> Probe:  # fmt: skip
    train, test = fits.group_split(groups, holdout=holdout, seed=seed)
    classes = int(y.max()) + 1 if method != "ridge" else 0
    if method == "logistic":
        fitted = fits.fit_logistic(x[train], y[train], classes=classes, penalty=penalty)
    elif method == "mean_difference":
        fitted = fits.fit_mean_difference(x[train], y[train], classes=classes)
    else:
        fitted = fits.fit_ridge(x[train], y[train], penalty=penalty)
    score = fits.r2 if method == "ridge" else fits.accuracy
    chance = 0.0 if method == "ridge" else float(torch.bincount(y[test].long()).max()) / int(test.sum())
    return Probe(site=site, method=method, fit=fitted, shape=shape, train=score(fitted.predict(x[train]), y[train]),
                 test=score(fitted.predict(x[test]), y[test]), chance=chance, examples=(int(train.sum()),
                 int(test.sum())), groups=len(torch.unique(groups)))  # fmt: skip


def _labels(labels: Labels) -> Tensor:
    target = labels.detach().cpu() if isinstance(labels, Tensor) else torch.as_tensor(labels)
    if target.is_complex() or target.dtype == torch.bool or target.numel() == 0:
        raise OptionError(f"probe's labels are integer classes or float values, got {target.dtype} of "
                          f"{target.numel()} elements; pass a tensor or list with one label per row")  # fmt: skip
    return target


def _method(method: str | None, target: Tensor) -> str:
    if method is None:
        return "ridge" if target.is_floating_point() else "logistic"
    if method not in METHODS:
        raise OptionError(f"probe's method is one of {', '.join(METHODS)}, got {method!r}{closest(method, METHODS)}")
    if method != "ridge" and (target.is_floating_point() or int(target.min()) < 0):
        raise OptionError(f"method={method!r} needs integer classes 0, 1, ... as labels, got {target.dtype} "
                          "values; pass class indices, or method='ridge' for values")  # fmt: skip
    return method


def _tensors(run: Mapping[str, Record], site: str, kind: Kind, key: str | None, call: int | None,
             reduce: Reducer | None) -> Iterator[Tensor]:  # fmt: skip
    """The site's tensor per batch (a store's) or per call, in order, reduced when asked."""
    if call is not None and isinstance(run, Run):
        calls = [run.batch(b)[site].calls[call] for b in run.batches]
    else:
        calls = run[site].calls if call is None else [run[site].calls[call]]
    for one in calls:
        tensor = one.get(kind, key) if key is not None else one.sole(kind)
        kept = reduce(site, kind, key or "", tensor) if reduce is not None else tensor
        if kept is None:
            raise OptionError(f"reduce= kept nothing of {site!r}; probe needs a tensor per batch")
        yield kept.detach().cpu()


def _examples(tensors: Iterator[Tensor], labels: Tensor, groups: Any, site: str
              ) -> tuple[Tensor, Tensor, Tensor, tuple[int, ...]]:  # fmt: skip
    """(x (N, D), y (N,), groups (N,), the shape of one example) from the site's tensors."""
    parts = list(tensors)
    if not parts:
        raise NotCapturedError(f"probe found no call of {site!r} in the source; capture or extract it over the "
                               "inputs the labels describe")  # fmt: skip
    shapes = {tuple(t.shape[1:]) for t in parts}
    if len(shapes) != 1:
        raise ShapeError(f"probe needs one shape per example at {site!r}, got {sorted(shapes)}; "
                         "pad sequences to one length or pass call= for one call")  # fmt: skip
    x = torch.cat(parts).double()  # (B, ...)
    bad = int((~x.isfinite()).sum())
    if bad:
        raise NonFiniteError(f"probe needs finite activations, {site!r} holds {bad:,} NaN or infinite values of "
                             f"{x.numel():,}; find where with hookscope.nan_guard, or select other sites",
                             module=site, count=bad, numel=x.numel())  # fmt: skip
    rows, tokens = x.shape[0], x.shape[1] if x.dim() == 3 else 1
    row_groups = torch.arange(rows) if groups is None else torch.as_tensor(groups).reshape(-1)
    shape: tuple[int, ...] = tuple(x.shape[1:]) or (1,)
    if x.dim() == 3:  # (B, T, D): every token an example, its sequence its group
        x, shape = x.reshape(rows * tokens, x.shape[2]), (x.shape[2],)
    else:
        x = x.reshape(rows, -1)
    return x, _spread(labels, rows, tokens, site, "labels"), _spread(row_groups, rows, tokens, site, "groups"), shape


def _spread(values: Tensor, rows: int, tokens: int, site: str, what: str) -> Tensor:
    """One value per example: per row values repeated over each row's tokens."""
    flat = values.reshape(-1)
    if len(flat) == rows * tokens:
        return flat
    if len(flat) == rows:
        return flat.repeat_interleave(tokens)
    per_token = f" or {rows * tokens} (one per token)" if tokens > 1 else ""
    raise ShapeError(f"probe's {what} has {len(flat)} entries, but {site!r} holds {rows} rows; pass one per "
                     f"row{per_token}, in the order the batches ran")  # fmt: skip
