"""Input specs as a data set, for ``hookscope extract``: images read one at a time, or tensor rows.

``photos/`` or ``a.jpg b.jpg``     one item per image, opened and prepared when the loader asks for it
                                  (a folder of a million photos is never held in memory)
``batch.pt`` / ``.npy`` / ...     the rows of the tensor (its first dimension)
``random:64x3x224x224``           64 rows of ``torch.randn``, seed 0

Items are ``(C, H, W)`` tensors; a ``DataLoader`` stacks them into batches. The specs are those of
``hookscope.cli.inputs`` (whose ``image_paths`` / ``open_image`` read the files), prepared by a
``hookscope.zoo.preprocess.Preprocess``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torch import Tensor
from torch.utils.data import Dataset

from ..errors import InputError
from ..zoo.preprocess import Preprocess
from .inputs import TENSOR_SUFFIXES, image_paths, load_input, open_image


class ImageFiles(Dataset[Tensor]):
    """Image files, each opened and prepared (``Preprocess.prepare``) when it is asked for."""

    def __init__(self, paths: Sequence[Path], preprocess: Preprocess) -> None:
        self.paths, self.preprocess = list(paths), preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Tensor:
        return self.preprocess.prepare(open_image(self.paths[index]))[0]  # (C, size, size)


class Rows(Dataset[Tensor]):
    """The rows of one tensor."""

    def __init__(self, tensor: Tensor) -> None:
        if tensor.dim() < 1:
            raise InputError(f"a data set needs a tensor with a batch dimension, got shape {tuple(tensor.shape)}")
        self.tensor = tensor

    def __len__(self) -> int:
        return len(self.tensor)

    def __getitem__(self, index: int) -> Tensor:
        return self.tensor[index]


def input_dataset(specs: Sequence[str], preprocess: Preprocess) -> Dataset[Tensor]:
    """The data set ``specs`` name (see the module docstring); one-line ``InputError`` otherwise."""
    if len(specs) == 1 and (specs[0].startswith("random:") or specs[0].lower().endswith(TENSOR_SUFFIXES)):
        return Rows(load_input(specs, preprocess).x)
    if not specs:
        raise InputError("no input given; pass images, a folder, a tensor file or random:64x3x224x224")
    return ImageFiles([path for spec in specs for path in image_paths(Path(spec))], preprocess)
