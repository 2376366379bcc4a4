"""``faithfulness(model, x, maps, target=...)``: does the model's score follow where each map points?

::

    heat = hookscope.cam(model, x, "gradcam")
    result = hookscope.faithfulness(model, x, {"gradcam": heat}, metrics=("deletion", "insertion"))
    result["gradcam"].deletion_auc, result.table(), result.plot()

Deletion and insertion (``perturb``) remove or reveal the map's top positions step by step;
ROAD (``road``, images) imputes the removed pixels from their neighbours; confidence multiplies
the image by the map. Each map is measured beside a random map (seeded; for images drawn on a grid a
sixteenth of each side and resized, so it removes blobs, not scattered pixels) and, for images, an
edge detector's map: a map no better than its random control says so in ``remarks``.

Conventions (``convention=``) fix whose numbers come out:

- ``"hookscope"`` (the default): a class target is scored by its softmax probability, so every
  AUC lies in [0, 1]; a callable target's curves are scaled per image to [0, 1] (0 the lowest point,
  1 the highest). ROAD and confidence use the same score; the drop in confidence is relative
  (Chattopadhay et al.: ``max(0, y - o) / y``).
- ``"torchcam"``: TorchCAM 0.5's ``DeletionInsertionMetric`` with ``logits_fn=softmax``: softmax
  probability, raw callable scores.
- ``"quantus"``: Quantus 0.6's ``PixelFlipping`` (deletion only, ``flipping``): features ranked
  per channel value, ``ceil(features / steps)`` replaced at each step, softmax probability, the area
  with unit spacing (not normalised).
- ``"grad-cam"``: pytorch-grad-cam 1.5.7: raw logits; ROAD as ``ROADCombined`` (noise drawn from
  ``seed``, as its global generator after ``torch.manual_seed(seed)``); confidence as
  ``CamMultImageConfidenceChange`` (``drop = max(0, y - o)``, ``increase = o > y``).

Perturbed copies go through the model ``batch_size`` at a time, under ``inference_mode`` and in eval
mode (each module's flag restored). Ties in a map are broken by position (a stable sort).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.modes import evaluating
from ..errors import CaptureWarning, OptionError, ShapeError
from ..explain.normalize import scale_maps
from ..explain.targets import Target, explained, logits, scores
from ..progress import Progress, callback
from . import views  # noqa: F401  (registers the table, picture, notebook view and section)
from .flipping import features_of, flipped
from .perturb import Baseline, auc, baseline_of, counts, per_position, perturbed, ranks, sobel
from .result import Faithfulness, MapScores
from .road import PERCENTILES, impute, kept, noisy

METRICS = ("deletion", "insertion", "road", "confidence")
CONVENTIONS = ("hookscope", "torchcam", "grad-cam", "quantus")
Maps = Union[Tensor, Mapping[str, Any], Any]


def faithfulness(
    model: nn.Module,
    x: Tensor,
    maps: Maps,
    *,
    target: Target = None,
    output: str | None = None,
    metrics: Iterable[str] = ("deletion", "insertion", "road", "confidence"),
    steps: int = 20,
    baseline: Baseline = "zeros",
    convention: str = "hookscope",
    batch_size: int = 32,
    controls: bool = True,
    seed: int = 0,
    progress: Progress = None,
) -> Faithfulness:
    """Measure how faithful each map is to ``model`` on ``x``.

    Args:
        model: the network the maps explain.
        x: the input the maps were made for: an image batch (B, C, H, W), or token ids (B, T).
        maps: one map (a tensor: (B, H, W) or (B, h, w) resized bilinearly, (B, C, H, W) summed as ``|value|``
            over channels, (B, T) for tokens; or a ``TokenAttribution``), or a mapping of names to maps.
        target: what the score is: None (each image's top-1 class on ``x``), a class, one class per
            image, or a callable ``logits -> (B,)`` (see ``hookscope.explain.targets``).
        output: the key of the model's output the target indexes (default its first tensor).
        metrics: any of ``"deletion"``, ``"insertion"``, ``"road"`` and ``"confidence"`` (the last two
            for images only).
        steps: the number of intervals of the deletion and insertion curves (TorchCAM's ``steps``).
        baseline: what replaces deleted positions: ``"zeros"``, ``"mean"`` (each image's channel means),
            ``"blur"`` (a Gaussian blur of the image), a tensor broadcastable to ``x``, or for tokens the
            id of a mask or pad token (an int).
        convention: ``"hookscope"``, ``"torchcam"``, ``"grad-cam"`` or ``"quantus"`` (see the module docstring).
        batch_size: perturbed copies run through the model at once.
        controls: also measure a random map and, for images, an edge detector's map.
        seed: seeds the random control and ROAD's noise.
        progress: how far it got (``hookscope.progress``): stage ``"faithfulness"``, one step per batch.

    Returns:
        A ``Faithfulness``, per map (controls included) its curves and numbers, and ``remarks``.

    Raises:
        OptionError: an unknown metric, convention or baseline, or a metric that needs images.
        ShapeError: a map whose shape does not fit ``x``.
        TargetError: a target that does not fit the model's output.
    """
    chosen = _check(x, metrics, convention, steps, batch_size)
    named = _named(maps)
    if convention == "quantus":
        return _quantus(model, x, named, target, output, baseline, steps, batch_size, controls, seed, progress)
    tokens = x.dim() == 2
    fill = baseline_of(x, baseline)
    with evaluating(model, "faithfulness()"), torch.inference_mode():
        run = _Runner(model, x, target, output, convention, batch_size, callback(progress))
        heats = {name: per_position(heat, tuple(x.shape)) for name, heat in named.items()}
        if controls:
            generator = torch.Generator().manual_seed(seed)
            heats["random control"] = _random_map(next(iter(heats.values())).shape, generator)
            if not tokens:
                heats["edge control"] = sobel(x)
        fractions = torch.tensor(counts(heats_size(heats), steps), dtype=torch.float32) / heats_size(heats)
        results = {}
        for name, heat in heats.items():
            found = MapScores(name, control=name.endswith(" control"))
            if {"deletion", "insertion"} & chosen:
                _curves(run, x, fill, heat, steps, fractions, found)
            if "confidence" in chosen:
                _confidence(run, x, heat, found)
            results[name] = found
        if "road" in chosen:
            _road(run, x, heats, results, seed)
    remarks = _remarks(results)
    return Faithfulness(results, fractions, convention, run.score_name, _said(baseline), steps, remarks)


def _quantus(model: nn.Module, x: Tensor, named: Mapping[str, Tensor], target: Target, output: str | None,
             baseline: Baseline, steps: int, batch_size: int, controls: bool, seed: int,
             progress: Progress) -> Faithfulness:  # fmt: skip
    """Quantus's pixel flipping of each map (``flipping``): the deletion curve and its unnormalised area."""
    fill = baseline_of(x, baseline)
    with evaluating(model, "faithfulness()"), torch.inference_mode():
        run = _Runner(model, x, target, output, "quantus", batch_size, callback(progress))
        feats = {name: features_of(heat, tuple(x.shape)) for name, heat in named.items()}
        if controls:
            feats["random control"] = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed))
            feats["edge control"] = features_of(sobel(x), tuple(x.shape))
        results, fractions = {}, torch.zeros(0)
        for name, feat in feats.items():
            copies, fractions = flipped(x, fill, feat, steps)
            curve = run(copies, [i for i in range(len(x)) for _ in range(len(fractions))]).reshape(len(x), -1)
            results[name] = MapScores(name, control=name.endswith(" control"), deletion=curve,
                                      deletion_auc=torch.trapezoid(curve, dx=1.0, dim=1))  # fmt: skip
    return Faithfulness(results, fractions, "quantus", run.score_name, _said(baseline), steps, _remarks(results))


def heats_size(heats: Mapping[str, Tensor]) -> int:
    """Positions per image of the maps (all of one shape)."""
    return next(iter(heats.values()))[0].numel()


class _Runner:
    """The model under perturbation: the score of a batch of perturbed copies, ``batch_size`` at a time."""

    def __init__(self, model: nn.Module, x: Tensor, target: Target, output: str | None, convention: str,
                 batch_size: int, step: Callable[[str, int, int], None]) -> None:  # fmt: skip
        self.model, self.convention, self.batch_size, self.step = model, convention, batch_size, step
        self.done = 0
        out = model(x)
        self.output, note = explained(out, output)  # resolved once: every later pass reads that tensor
        if note is not None:
            warnings.warn(note, CaptureWarning, stacklevel=3)  # the caller's line (faithfulness, then here)
        _, index = scores(out, target, self.output)
        self.index, self.target = index, target
        self.probability = index is not None and convention != "grad-cam"
        self.score_name = "probability" if self.probability else ("logit" if index is not None else "target")
        self.original = self._score(out, torch.arange(len(x)))

    def _score(self, out: Any, rows: Tensor) -> Tensor:
        if self.index is None:
            picked, _ = scores(out, self.target, self.output)
            return picked.float()
        values = logits(out, self.output).float()
        if self.probability:
            values = values.softmax(dim=-1)
        return values.gather(1, self.index[rows][:, None]).squeeze(1)

    def __call__(self, copies: Sequence[Tensor], rows: Sequence[int]) -> Tensor:
        """Scores (N,) of the perturbed ``copies``, each a copy of image ``rows[i]``."""
        found = []
        for start in range(0, len(copies), self.batch_size):
            chunk = torch.stack(list(copies[start : start + self.batch_size]))
            which = torch.tensor(list(rows[start : start + self.batch_size]))
            found.append(self._score(self.model(chunk), which))
            self.done += 1
            self.step("faithfulness", self.done, 0)
        return torch.cat(found) if found else torch.zeros(0)


def _curves(
    run: _Runner, x: Tensor, fill: Tensor, heat: Tensor, steps: int, fractions: Tensor, found: MapScores
) -> None:
    """Deletion and insertion curves (B, P) of one map, and their areas."""
    rank = ranks(heat)
    points = counts(rank.shape[1], steps)
    interior = points[1:-1]
    copies, rows = [], []
    for b in range(len(x)):
        copies.append(fill[b])  # everything deleted: deletion's last point and insertion's first
        rows.append(b)
        for insert in (False, True):
            copies += [perturbed(x[b], fill[b], rank[b], count, insert=insert) for count in interior]
            rows += [b] * len(interior)
    got = run(copies, rows).reshape(len(x), 1 + 2 * len(interior))
    bare = got[:, :1]
    original = run.original[:, None]
    deletion = torch.cat([original, got[:, 1 : 1 + len(interior)], bare], dim=1)
    insertion = torch.cat([bare, got[:, 1 + len(interior) :], original], dim=1)
    if run.score_name == "target" and run.convention == "hookscope":
        deletion, insertion = _scaled(deletion, insertion)
    found.deletion, found.insertion = deletion, insertion
    found.deletion_auc, found.insertion_auc = auc(deletion, fractions), auc(insertion, fractions)


def _scaled(*curves: Tensor) -> tuple[Tensor, ...]:
    """Curves of one image scaled together to [0, 1]: 0 their lowest point, 1 their highest."""
    joined = torch.cat(curves, dim=1)
    low, high = joined.min(dim=1, keepdim=True).values, joined.max(dim=1, keepdim=True).values
    span = (high - low).clamp_min(torch.finfo(joined.dtype).tiny)
    return tuple((c - low) / span for c in curves)


def _confidence(run: _Runner, x: Tensor, heat: Tensor, found: MapScores) -> None:
    """The score of the image multiplied by its map (scaled to [0, 1]; grad-cam's convention: as given)."""
    weights = heat if run.convention == "grad-cam" else scale_maps(heat)
    after = run(list(x * weights[:, None]), list(range(len(x))))
    change = after - run.original
    found.drop = (-change).clamp_min(0) if run.convention == "grad-cam" else (-change).clamp_min(0) / run.original
    found.increase = (change > 0).float()


def _road(run: _Runner, x: Tensor, heats: Mapping[str, Tensor], results: Mapping[str, MapScores], seed: int) -> None:
    """ROAD per map: least-relevant-first then most-relevant-first over the percentiles, pytorch-grad-cam's order
    (so the noise of one seed is the same draws). The sparse systems are solved on a thread per core (SuperLU
    releases the GIL); the noise is drawn afterwards, in order."""
    for name, heat in heats.items():
        generator = torch.Generator().manual_seed(seed)
        ordered = heat if run.convention == "grad-cam" else scale_maps(heat)
        changes = {}
        for most in (False, True):
            masks = [(b, kept(ordered[b], p, most_relevant_first=most)) for p in PERCENTILES for b in range(len(x))]
            with ThreadPoolExecutor(max_workers=min(len(masks), os.cpu_count() or 1)) as pool:
                solved = list(pool.map(lambda mask: impute(x[mask[0]], mask[1]), masks))
            copies = [noisy(x[b], keep, s, generator) for (b, keep), s in zip(masks, solved, strict=True)]
            after = run(copies, [b for b, _ in masks]).reshape(len(PERCENTILES), len(x))
            changes[most] = (after - run.original[None]).mean(dim=0)
        found = results[name]
        found.road_morf, found.road_lerf = changes[True], changes[False]
        found.road = (changes[False] - changes[True]) / 2


def _random_map(shape: torch.Size, generator: torch.Generator) -> Tensor:
    """A random map of ``shape``: for images, uniform noise on a grid a sixteenth of each side, resized
    bilinearly, so the control removes blobs as a CAM does rather than scattered pixels (which alone
    wreck a network's score); for tokens, uniform noise per token."""
    if len(shape) == 2:
        return torch.rand(shape, generator=generator)
    coarse = torch.rand(shape[0], 1, max(1, shape[1] // 16), max(1, shape[2] // 16), generator=generator)
    return F.interpolate(coarse, size=tuple(shape[1:]), mode="bilinear", align_corners=False)[:, 0]


def _remarks(results: Mapping[str, MapScores]) -> list[str]:
    """Each map that is no better than the random control, in words."""
    control = results.get("random control")
    if control is None:
        return []
    said = []
    for name, found in results.items():
        if found.control:
            continue
        means = found.means()
        base = control.means()
        worse = [
            label
            for label, column, better in (
                ("deletion", "deletion AUC", -1), ("insertion", "insertion AUC", 1), ("ROAD", "ROAD", 1),
            )
            if column in means and column in base and better * (means[column] - base[column]) <= 0
        ]  # fmt: skip
        if worse:
            said.append(f"{name} is no better than a random map on {', '.join(worse)}: do not trust it here")
    return said


def _check(x: Tensor, metrics: Iterable[str], convention: str, steps: int, batch_size: int) -> set[str]:
    chosen = {metrics} if isinstance(metrics, str) else set(metrics)
    unknown = sorted(chosen - set(METRICS))
    if unknown or not chosen:
        raise OptionError(f"unknown metric {', '.join(unknown) or 'none given'}; metrics are {', '.join(METRICS)}")
    if convention not in CONVENTIONS:
        raise OptionError(f"unknown convention {convention!r}; conventions are {', '.join(CONVENTIONS)}")
    if convention == "quantus" and (chosen != {"deletion"} or x.dim() != 4):
        raise OptionError(
            "convention='quantus' is Quantus's pixel flipping of an image batch: pass metrics=('deletion',)"
        )
    if x.dim() not in (2, 4):
        raise ShapeError(f"faithfulness() needs an image batch (B, C, H, W) or token ids (B, T), got {tuple(x.shape)}")
    if x.dim() == 2 and chosen & {"road", "confidence"}:
        raise OptionError(
            f"{' and '.join(sorted(chosen & {'road', 'confidence'}))} perturb images; for tokens pass "
            "metrics=('deletion', 'insertion')"
        )
    if steps < 1 or batch_size < 1:
        raise OptionError(f"steps and batch_size must be positive, got steps={steps}, batch_size={batch_size}")
    return chosen


def _named(maps: Maps) -> dict[str, Tensor]:
    """``maps`` as {name: tensor}: a tensor is ``"map"``; a ``TokenAttribution`` gives its (B, T) attributions."""
    if isinstance(maps, Tensor) or hasattr(maps, "attributions"):
        maps = {"map": maps}
    if not isinstance(maps, Mapping) or not maps:
        raise OptionError(f"maps must be a tensor, a TokenAttribution or a mapping of names to them, got {maps!r}")
    named = {}
    for name, heat in maps.items():
        heat = getattr(heat, "attributions", heat)
        if not isinstance(heat, Tensor):
            raise OptionError(f"map {name!r} is a {type(heat).__name__}, not a tensor")
        if name.endswith(" control"):
            raise OptionError(f"map name {name!r} is taken by the controls; rename it")
        named[str(name)] = heat
    return named


def _said(baseline: Baseline) -> str:
    return (
        baseline
        if isinstance(baseline, str)
        else ("token id " + str(baseline) if isinstance(baseline, int) else "given")
    )
