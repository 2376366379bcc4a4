"""``hookscope.explain_prediction(model, x, out, expected=3)``: the evidence bundle of one (wrong) prediction.

::

    found = hookscope.explain_prediction(model, x, "why-5-not-9", expected=9)
    found.manifest["ablation"]["change"], hookscope.evidence.bundle.validate_bundle("why-5-not-9") == []

The verb: it *explains* a *prediction*, as ``hookscope explain`` does on the command line; ``explain`` alone
is the room of CAMs and attributions (``hookscope.explain``), so the verb names what it explains.

The folder (``hookscope.evidence.prediction.v1``, ``schemas/prediction.v1.json``) holds ``input.npy``,
``logits.npy``, ``probabilities.npy``, ``maps/<target>@<layer>.npy`` (each ``(H, W)`` float32 in [0, 1]),
``ablation/keep.npy`` (the mask the ablation applied), ``store/`` (a hookscope store: the picked layer's and its
block's outputs and the contrastive score's gradients at them, ``hookscope.load``) and ``manifest.json``, written
last; every array loads with ``numpy.load(..., allow_pickle=False)``. Maps: Grad-CAM (``method=``) for the
predicted class, the expected class and the contrastive score ``logit[predicted] - logit[expected]``, at the
picked layer (``select=``, or ``hookscope.pick_layer``'s choice) and at its block (its parent module), each with
its deletion and insertion AUC (``hookscope.faithfulness``, beside a random map's). The whole folder is written
beside ``out`` and renamed into place (``base.files.staged_folder``): whole or absent; an existing ``out`` is
refused unless ``force`` (and then only one hookscope wrote). Given the same model, input and seed, every file is
the same bytes but the ``created`` times of the manifests.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import platform
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .._version import __version__
from ..base.files import mark, new_output, staged_folder, write_atomically
from ..base.optional import require
from ..core.select import Selector
from ..errors import CaptureWarning, HookscopeError, OptionError, StoreError, TargetError
from ..explain.cam import CAM_METHODS, cam
from ..explain.layers import choose_layer, one_module
from ..faithful.measure import faithfulness
from ..progress import Progress, callback
from ..store.save import save, weights_hash
from . import facts, views  # noqa: F401  (views: registers the text and the page section of Evidence)
from .bundle import MANIFEST, PREDICTION
from .result import Evidence

METRICS = ("deletion", "insertion")
STORE = "store"


def explain_prediction(
    model: nn.Module,
    x: Tensor,
    out: str | Path,
    *,
    expected: int,
    select: Selector | None = None,
    method: str = "gradcam",
    top_k: int = 5,
    labels: Sequence[str] | None = None,
    seed: int = 0,
    force: bool = False,
    progress: Progress = None,
) -> Evidence:
    """Write the evidence bundle of the model's prediction on one image (see the module docstring).

    Args:
        model: the classifier; it runs in eval mode, each module's flag restored.
        x: one image ``(1, C, H, W)``.
        out: the bundle's folder; it must not exist unless ``force``.
        expected: the class the image should have been given.
        select: the one module whose maps are read; None picks it as ``hookscope.pick_layer`` does.
        method: a gradient CAM method: ``gradcam`` (the default), ``gradcam++``, ``xgradcam`` or ``layercam``.
        top_k: how many of the top classes the manifest lists.
        labels: the class names, by index; the manifest names the predicted, expected and top classes with them.
        seed: seeds the faithfulness controls; recorded with the rest of the provenance.
        force: replace an existing ``out`` that hookscope wrote (never a folder holding other files).
        progress: how far it got (``hookscope.progress``): stage ``"evidence"``, one step per part.

    Returns:
        The bundle, read back (``Evidence``): ``.manifest``, ``.path``.

    Raises:
        OptionError: ``x`` is not one image, or ``method`` is not a gradient CAM method.
        TargetError: ``expected`` is not a class of the model's output.
        SelectionError: ``select`` matches no module or several, or no module returns spatial maps.
        OutputExistsError: ``out`` exists and ``force`` is False, or it holds files hookscope did not write.
        StoreError: the folder cannot be written; nothing is left behind.
        MissingDependencyError: ``numpy`` is not installed.
    """
    if x.dim() != 4 or x.shape[0] != 1:
        raise OptionError(f"explain_prediction() explains one image (1, C, H, W), got shape {tuple(x.shape)}")
    if method not in CAM_METHODS or method in ("scorecam", "eigencam"):
        raise OptionError(f"method must be a gradient CAM ({', '.join(CAM_METHODS[:4])}), got {method!r}")
    root = new_output(out, force=force, kind="evidence")
    numpy = require("numpy")
    tell = callback(progress)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        manifest = _facts(model, x, expected, select, method, top_k, seed, tell)
    manifest["prediction"]["labels"] = _labels(manifest["prediction"], labels)
    with staged_folder(root, lambda err, folder: StoreError(f"cannot write the evidence bundle in {folder}: {err}"),
                       parents=True) as staging:  # fmt: skip
        _write(staging, manifest, numpy)
    return Evidence(root, json.loads((root / MANIFEST).read_text(encoding="utf-8")))


def _facts(
    model: nn.Module, x: Tensor, expected: int, select: Selector | None, method: str, top_k: int, seed: int,
    tell: Callable[[str, int, int], None],
) -> dict[str, Any]:  # fmt: skip
    """Everything the bundle says, computed before a byte is written: the manifest, its arrays under ``arrays``
    and the capture the store keeps under ``capture`` (both taken out before the manifest is written)."""
    logits, probabilities, top = facts.prediction_facts(model, x, top_k)
    if not 0 <= expected < logits.numel():
        raise TargetError(f"expected={expected} is not a class of the model's {logits.numel()} outputs")
    predicted = int(logits.argmax())
    layer, call, how = _layer(model, x, select)
    block = layer.rpartition(".")[0] or None
    honesty: dict[str, list[str]] = {"blank_maps": [], "never_ran": [], "refused": [], "notes": []}
    if block is None:
        honesty["notes"].append(f"`{layer}` is a module of the model itself: there is no block around it")
    score = facts.contrastive(predicted, expected)
    targets = {"predicted": predicted, "expected": expected, "contrastive": score}
    arrays: dict[str, Tensor] = {"input.npy": x.detach().cpu(), "logits.npy": logits}
    arrays["probabilities.npy"] = probabilities
    tell("evidence", 1, 4)
    maps = _maps(model, x, [(layer, call), *([(block, None)] if block else [])], targets, method, seed, honesty, arrays)
    tell("evidence", 2, 4)
    cap, ranked, never, notes = facts.gradient_ranking(model, x, score)
    honesty["never_ran"], honesty["notes"] = never, honesty["notes"] + notes
    tell("evidence", 3, 4)
    ablation = _ablation(model, x, layer, call, cap, arrays, score)
    if ablation["status"] == "refused":
        honesty["refused"].append(f"the ablation at `{layer}`: {ablation['why']}")
    tell("evidence", 4, 4)
    kept = {name: cap[name] for name in (layer, block) if name is not None and name in cap}
    return {
        "schema": PREDICTION, "schema_version": 1, "hookscope": __version__, "created": _now(), "store": STORE,
        "input": _array("input.npy", arrays), "prediction": {
            "predicted": predicted, "expected": expected, "correct": predicted == expected,
            "logits": _array("logits.npy", arrays), "probabilities": _array("probabilities.npy", arrays),
            "top_k": top, "labels": {}},
        "maps": maps,
        "layers": {"picked": layer, "why": how, "block": block, "ranked": ranked},
        "ablation": ablation,
        "provenance": _provenance(model, x, select, layer, how, seed),
        "honesty": honesty, "files": sorted([*arrays, STORE]), "arrays": arrays, "capture": kept,
    }  # fmt: skip


def _labels(prediction: dict[str, Any], labels: Sequence[str] | None) -> dict[str, str]:
    """``{"5": "five", ...}`` for the predicted, expected and top classes; ``{}`` without labels."""
    if labels is None:
        return {}
    wanted = sorted({prediction["predicted"], prediction["expected"], *(row["class"] for row in prediction["top_k"])})
    return {str(c): str(labels[c]) for c in wanted if c < len(labels)}


def _layer(model: nn.Module, x: Tensor, select: Selector | None) -> tuple[str, int | None, str]:
    """The layer the maps are read at, its call (None: the last) and how the choice was made, in words."""
    if select is None:
        choice = choose_layer(model, x)
        return choice.layer, choice.call, f"picked: {choice.words}"
    name = one_module(model, select)
    assert name is not None
    return name, None, f"select={select!r} matched `{name}`"


def _maps(
    model: nn.Module, x: Tensor, sites: Sequence[tuple[str, int | None]], targets: dict[str, Any], method: str,
    seed: int, honesty: dict[str, list[str]], arrays: dict[str, Tensor],
) -> list[dict[str, Any]]:  # fmt: skip
    """Each target's map at each site, with its faithfulness (``hookscope.faithfulness``, per target)."""
    found: list[dict[str, Any]] = []
    for target, value in targets.items():
        heats: dict[str, Tensor] = {}
        for site, call in sites:
            name = f"{target}@{site}"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CaptureWarning)
                try:
                    heat = cam(model, x, method, value, select=site, call=call)
                except HookscopeError as err:  # a block whose output is no map: said, not raised
                    honesty["refused"].append(f"the {target} map at `{site}`: {err}")
                    continue
            honesty["notes"] += [str(w.message) for w in caught if issubclass(w.category, CaptureWarning)]
            file = f"maps/{name}.npy"
            arrays[file] = heat[0].float().cpu()
            blank = not bool(torch.isfinite(heat).all()) or float(heat.max() - heat.min()) == 0.0
            if blank:
                honesty["blank_maps"].append(name)
            else:
                heats[name] = heat
            found.append({
                "name": name, "target": target, "score": _said(target, targets), "layer": site, "method": method,
                "array": _array(file, arrays), "blank": blank, "min": facts.number(heat.min()),
                "max": facts.number(heat.max()), "faithfulness": {"status": "not computed", "why": "the map is blank"},
            })  # fmt: skip
        _faithful(model, x, heats, value, seed, found)
    return found


def _said(target: str, targets: dict[str, Any]) -> str:
    if target == "contrastive":
        return f"logit[{targets['predicted']}] - logit[{targets['expected']}]"
    return f"logit[{targets[target]}] ({target} class)"


def _faithful(
    model: nn.Module, x: Tensor, heats: dict[str, Tensor], target: Any, seed: int, found: list[dict[str, Any]]
) -> None:
    """Deletion and insertion AUC of the maps of one target, beside a random map's (the first image's)."""
    if not heats:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureWarning)  # its eval-mode note: the maps' own notes are kept
        result = faithfulness(model, x, heats, target=target, metrics=METRICS, seed=seed)
    control = result["random control"]
    for row in found:
        if row["name"] in heats:
            scores = result[row["name"]]
            row["faithfulness"] = {
                "status": "computed", "metrics": list(METRICS), "steps": result.steps,
                "deletion_auc": _first(scores.deletion_auc), "insertion_auc": _first(scores.insertion_auc),
                "random_deletion_auc": _first(control.deletion_auc),
                "random_insertion_auc": _first(control.insertion_auc),
                "remarks": [r for r in result.remarks if row["name"] in r],
            }  # fmt: skip


def _first(values: Tensor | None) -> float | str:
    return facts.number(values[0]) if values is not None else "nan"


def _ablation(
    model: nn.Module, x: Tensor, layer: str, call: int | None, cap: Any, arrays: dict[str, Tensor],
    score: Callable[[Tensor], Tensor],
) -> dict[str, Any]:  # fmt: skip
    """The verified ablation of the contrastive map's top region at the layer (``facts.ablation``)."""
    heat = arrays.get(f"maps/contrastive@{layer}.npy")
    calls = cap[layer].calls if layer in cap else []
    if heat is None or not calls:
        return {"status": "refused", "why": f"no contrastive map at `{layer}` (see honesty.refused)"}
    if float(heat.max() - heat.min()) == 0.0:
        return {"status": "refused", "why": f"the contrastive map at `{layer}` is blank: it points at no region"}
    index = len(calls) - 1 if call is None else call
    output = calls[index].tensors.get("output", {})
    shapes = [tuple(t.shape) for t in output.values()]
    if len(shapes) != 1 or len(shapes[0]) != 4:
        return {"status": "refused", "why": f"`{layer}` returns {shapes}, not one (B, C, h, w) map to zero a region of"}
    keep = facts.top_region(heat[None], shapes[0][2:])
    arrays["ablation/keep.npy"] = keep[0, 0]
    found = facts.ablation(model, x, layer, index, keep, score)
    if found["status"] == "verified":
        found["map"] = f"contrastive@{layer}"
        found["score"] = "the contrastive score (see maps)"
    else:
        del arrays["ablation/keep.npy"]
    return found


def _provenance(
    model: nn.Module, x: Tensor, select: Selector | None, layer: str, how: str, seed: int
) -> dict[str, Any]:
    data = x.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{data.dtype} {tuple(data.shape)}\n".encode() + data.numpy().tobytes()).hexdigest()
    numpy = require("numpy")
    versions = {"hookscope": __version__, "torch": torch.__version__, "python": platform.python_version(),
                "numpy": numpy.__version__}  # fmt: skip
    return {
        "model": type(model).__name__, "model_sha256": weights_hash(model), "input_sha256": digest,
        "versions": versions, "seed": seed, "device": str(x.device), "dtype": str(x.dtype).removeprefix("torch."),
        "selectors": [{"asked": None if select is None else repr(select), "resolved": [layer], "how": how}],
    }  # fmt: skip


def _array(file: str, arrays: dict[str, Tensor]) -> dict[str, Any]:
    tensor = arrays[file]
    return {"file": file, "shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch.")}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _write(staging: Path, manifest: dict[str, Any], numpy: Any) -> None:
    """The arrays, the store, then the manifest, then the marker (the folder is renamed into place after)."""
    arrays, kept = manifest.pop("arrays"), manifest.pop("capture")
    for file, tensor in arrays.items():
        (staging / file).parent.mkdir(parents=True, exist_ok=True)
        numpy.save(staging / file, tensor.detach().cpu().numpy(), allow_pickle=False)
    manifest["files"] = sorted({*arrays, STORE})
    save(kept, staging / STORE)
    text = json.dumps(manifest, indent=1) + "\n"
    write_atomically(staging / MANIFEST, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    mark(staging, "evidence")
