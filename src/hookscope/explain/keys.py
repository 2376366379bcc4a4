"""Which tensor of a layer's output ``cam()`` reads, when the layer returns several.

``key=`` names it. Without it, the first tensor that the target's gradient reaches and that is a
map (``(B, C, H, W)``, or ``(B, N, C)`` tokens on a patch grid): usually the first, with a
``CaptureWarning`` naming the others. A PiT stage returns ``(x, cls_tokens)`` and its head reads
the class tokens alone, so at the last stage no gradient reaches ``x``: its map would be zero
everywhere, and the tensor the score depends on is no map. There ``cam()`` says which tensors the
score reads and what to pass (a layer before it, or ``key=``) rather than failing to find a
gradient.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection

from torch import Tensor

from ..core.call import Call
from ..core.channels import spatial_maps
from ..errors import CaptureWarning, SelectionError, ShapeError
from .targets import choose_key, several_tensors


def layer_key(chosen: Call, layer: str, wanted: str | None, reached: Collection[str] | None = None) -> str | None:
    """The key of ``chosen``'s output that cam() reads (None: no output held; ``get`` says why).

    ``wanted``: the user's ``key=``. ``reached``: the keys whose tensor the target's gradient
    reaches (None: not known, every key counts)."""
    keys = chosen.keys("output")
    what = f"the output of layer {layer!r}"
    if wanted is not None:
        key = choose_key(keys, wanted, what, "key")
        if reached is not None and key not in reached:
            read = f"it reaches {', '.join(reached)} only" if reached else "it reaches none of its tensors"
            raise SelectionError(
                f"cam() reads key={wanted!r} of layer {layer!r}, but no gradient of the target reaches {key} ({read}); "
                "pass select= a layer whose map the target depends on, or another key="
            )
        return key
    usable = [k for k in keys if (reached is None or k in reached) and _is_map(chosen.get("output", k))]
    if keys and not usable:
        raise SelectionError(_unreached(chosen, layer, keys, reached))
    if len(keys) > 1:
        note = several_tensors(what, keys, "key") if usable[0] == keys[0] else _skipped(what, keys, usable[0])
        warnings.warn(note, CaptureWarning, stacklevel=3)  # cam() says it again, at its caller
    return usable[0] if usable else None


def _is_map(tensor: Tensor) -> bool:
    """Whether cam() can read ``tensor`` as maps: (B, C, H, W), or (B, N, C) tokens on a grid larger than 1x1."""
    if not tensor.is_floating_point() or tensor.dim() not in (3, 4):
        return False
    if tensor.dim() == 4:
        return True  # a 1x1 map too: cam() says it is flat
    try:
        return bool(spatial_maps(tensor[:1], tokens=True).shape[2:].numel() > 1)  # not a class token alone
    except ShapeError:
        return False


def _skipped(what: str, keys: list[str], used: str) -> str:
    """The note for a layer whose first tensors get no gradient from the target, or are no maps."""
    before = ", ".join(keys[: keys.index(used)])
    return (
        f"{what} holds {len(keys)} tensors; using {used}, the first map the target's gradient reaches "
        f"({before}: no gradient from the target, or no map); pass key= to choose"
    )


def _unreached(chosen: Call, layer: str, keys: list[str], reached: Collection[str] | None) -> str:
    """The error for a layer none of whose tensors (or not the one asked for) gives a map the target
    depends on. ``reached``: as in ``layer_key``."""
    shapes = ", ".join(f"{k} {tuple(chosen.get('output', k).shape)}" for k in keys)
    if reached is None:
        why = "none of which is a (B, C, H, W) map or tokens on a grid"
    elif not reached:
        why = "and no gradient of the target reaches it"
    else:
        why = f"and the target's gradient reaches {', '.join(reached)} only, not a (B, C, H, W) map or tokens on a grid"
    return (
        f"cam() needs a map of layer {layer!r} that the target depends on; got {shapes}, {why}; pass select= "
        "a layer whose map the target depends on (one before it), or key= one of its maps that the target reads"
    )
