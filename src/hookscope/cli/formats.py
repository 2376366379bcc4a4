"""What a file is, read from its first and last bytes, so that an error can say what is wrong with it.

``file_format(path)`` names the format of a weights or tensor file without loading it:

===============  ==============================================================
format           how it is told
===============  ==============================================================
``empty``        zero bytes
``torch``        a zip archive (``PK\\x03\\x04``) with its end record: ``torch.save``
``truncated``    a zip archive whose end record is missing (a copy cut short)
``pickle``       a pickle stream (``\\x80`` and a protocol 2-5): the legacy ``torch.save``
``safetensors``  an 8-byte header length, then a JSON header that fits in the file
``npy``          ``\\x93NUMPY``
``image``        JPEG, PNG, GIF, BMP, TIFF or WebP magic bytes
``other``        anything else
===============  ==============================================================

``describe(path)`` says the same for people ("a JPEG image", "an empty file (0 bytes)").
Only ``torch`` and ``pickle`` files can be unpickled, so only they may ever be answered with
``--trust-weights`` (``hookscope.cli.models``); ``hookscope.cli.inputs`` uses the same names.
"""

from __future__ import annotations

import re
from pathlib import Path

PICKLED = ("torch", "pickle")  # the formats torch.load reads
ZIP_END = b"PK\x05\x06"  # a zip archive's end-of-central-directory record
ZIP_TAIL = 65_536 + 22  # it lies within this many bytes of the end (its comment is at most 64 KiB)
IMAGES = {
    b"\xff\xd8\xff": "a JPEG image",
    b"\x89PNG\r\n\x1a\n": "a PNG image",
    b"GIF8": "a GIF image",
    b"BM": "a BMP image",
    b"II*\x00": "a TIFF image",
    b"MM\x00*": "a TIFF image",
}
WHAT = {
    "empty": "an empty file (0 bytes)",
    "torch": "a torch.save archive",
    "truncated": "a truncated zip archive (its end is missing: a copy or a save cut short)",
    "pickle": "a pickle (the legacy torch.save format)",
    "safetensors": "a safetensors file",
    "npy": "a numpy .npy file",
    "other": "a file of an unknown kind (not torch.save, safetensors or numpy)",
}


def file_format(path: Path) -> str:
    """The format of the file at ``path``, one of the names in the module docstring."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(16)
        f.seek(max(size - ZIP_TAIL, 0))
        tail = f.read()
    if not head:
        return "empty"
    if head.startswith(b"PK\x03\x04"):
        return "torch" if ZIP_END in tail else "truncated"
    if head[0] == 0x80 and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if _image(head) is not None:
        return "image"
    if len(head) >= 9 and 2 <= int.from_bytes(head[:8], "little") <= size - 8 and head[8:9] == b"{":
        return "safetensors"
    return "other"


def describe(path: Path) -> str:
    """What the file at ``path`` is, for people: "a JPEG image", "an empty file (0 bytes)", ..."""
    kind = file_format(path)
    if kind == "image":
        with path.open("rb") as f:
            return _image(f.read(16)) or "an image"
    return WHAT[kind]


def refused_global(err: BaseException) -> str | None:
    """The class or function ``torch.load(weights_only=True)`` refused to unpickle; None when it failed otherwise
    (a damaged file), which unpickling with ``weights_only=False`` would not mend."""
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
    return found.group(1) if found else None


def load_failure(err: BaseException) -> str:
    """Why ``torch.load`` failed, in one line: torch's reason without its advice, or the error's type."""
    text = str(err)
    found = re.search(r"WeightsUnpickler error:(.*?)(?:\n\n(?=Check)|$)", text, re.S)
    reason = found.group(1) if found else text.split(". ")[0]
    return " ".join(reason.split()) or type(err).__name__


def _image(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    return next((what for magic, what in IMAGES.items() if head.startswith(magic)), None)
