"""Sites and the block indices other steering libraries key their vectors by.

steering-vectors' ``SteeringVector.layer_activations`` and repeng's ``ControlVector.directions`` are
``{block index: vector}``; hookscope's directions are ``{site: Direction}``. A site's block index is
the number its name ends with (``transformer.h.3``, ``model.layers.10``); the way back fills a
template (``"transformer.h.{}"``). ``Directions.to_steering_vector``, ``.to_control_vector`` and
``.from_*`` use these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ..errors import OptionError

_NUMBER = re.compile(r"(\d+)$")


def by_block(vectors: Mapping[str, Tensor]) -> dict[int, Tensor]:
    """``{site: vector}`` as ``{block index: vector}``: each site's trailing number.

    Args:
        vectors: site -> vector.

    Returns:
        Block index -> vector, in the sites' order.

    Raises:
        OptionError: a site's name does not end with a number, or two sites end with the same one.
    """
    found: dict[int, Tensor] = {}
    for site, vector in vectors.items():
        number = _NUMBER.search(site)
        if number is None:
            raise OptionError(f"{site!r} does not end with a block number, which steering-vectors and repeng key "
                              "vectors by; find directions at the blocks (select='transformer.h.*')")  # fmt: skip
        block = int(number.group(1))
        if block in found:
            raise OptionError(f"two sites end with block number {block} ({site!r} is the second); "
                              "convert the directions of one kind of site at a time")  # fmt: skip
        found[block] = vector.detach().cpu().reshape(-1)
    return found


def by_site(vectors: Mapping[int, Tensor], site: str) -> dict[str, Tensor]:
    """``{block index: vector}`` as ``{site: vector}``, the sites named by the template ``site``.

    Args:
        vectors: block index -> vector.
        site: a name with ``{}`` where the index goes (``"model.layers.{}"``).

    Returns:
        Site -> vector, in increasing block order.

    Raises:
        OptionError: ``site`` holds no ``{}``.
    """
    if "{}" not in site:
        raise OptionError(f"site= names the blocks' modules with {{}} for the index, got {site!r}; "
                          "pass e.g. site='transformer.h.{}'")  # fmt: skip
    return {site.replace("{}", str(int(block))): vectors[block] for block in sorted(vectors)}


def model_type(model: Any, provenance: Mapping[str, Any]) -> str:
    """The ``model_type`` repeng records: a model's ``config.model_type``, a name given, the provenance's, or
    ``"unknown"``."""
    if isinstance(model, str):
        return model
    config = getattr(model, "config", None)
    return str(getattr(config, "model_type", None) or provenance.get("model_type") or "unknown")
