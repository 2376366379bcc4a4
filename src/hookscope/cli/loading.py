"""What a command loads, as its flags say: the model (``MODEL``, ``--weights``, ``--trust-weights``) moved to
``--device``, and the inputs prepared for it with ``--size``, ``--mean`` and ``--std`` applied.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import OptionError
from .inputs import LoadedInput, load_input
from .models import LoadedModel, load_model
from .timm_models import prepared_line


def model_from(args: argparse.Namespace) -> LoadedModel:
    """The model ``MODEL`` names (with ``--weights``, ``--trust-weights``), moved to ``--device``."""
    loaded = load_model(args.model, weights=args.weights, trust=args.trust_weights)
    try:
        loaded.model.to(args.device)
    except (RuntimeError, AssertionError) as err:
        raise OptionError(f"cannot use device {args.device!r}: {err}") from err
    return loaded


def inputs_from(args: argparse.Namespace, specs: Sequence[str], loaded: LoadedModel) -> LoadedInput:
    """The inputs ``specs`` name, prepared for ``loaded`` with ``--size``, ``--mean``, ``--std`` applied; images
    prepared as a model's own config asks (timm) are said so on stderr."""
    preprocess = loaded.preprocess.with_overrides(size=args.size, mean=args.mean, std=args.std)
    batch = load_input(list(specs), preprocess)
    if loaded.from_config and batch.pictures is not None:
        print(prepared_line(loaded.name, loaded.preprocess, preprocess), file=sys.stderr)
    return batch


def one_input(batch: LoadedInput, command: str) -> LoadedInput:
    """``batch``, unless its file held several inputs, which ``command`` cannot explain."""
    if batch.several:
        raise OptionError(f"{command} explains one input tensor and {batch.names[0]} holds several (a tuple or a "
                          "dict); pass one tensor, or use `hookscope capture` or `hookscope list`, which feed "
                          "several as model(*tuple) or model(**dict)")  # fmt: skip
    return batch
