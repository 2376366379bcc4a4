"""Everything hookscope raises or warns, in one tree.

::

    HookscopeError                 base of every error hookscope raises
     ├── SelectionError            a selector matched no module (or no site of a store), is not a
     │                             selector, or names a module torch cannot hook (TorchScript)
     ├── CaptureError              a capture was built or used the wrong way
     ├── BlockError                a hook block (capture, edit, nan_guard, watch...) entered twice
     ├── NotCapturedError          asked for a name a result does not hold: a site, kind or key of a
     │                             capture or store, a watched module, a history's column or step, a
     │                             sweep's site; the message names the closest ones (also a KeyError)
     ├── AmbiguousCallError        a shortcut (``.output``...) on a site called more than once
     ├── OptionError               an option with no meaning: unknown kind, method, colormap, bins...
     ├── ShapeError                a tensor that cannot be read as maps, tokens or images
     ├── TargetError               a target that does not fit the model's output
     ├── InputError                an input or source that cannot be read as what the function takes (a
     │                             spec, a file, text without tokenizer=, a model where a store goes)
     ├── MismatchError             two things compared do not match: two models' modules, calls or
     │                             outputs, two stores' batches
     ├── ModelError                a model spec or weights file that cannot be loaded
     │    └── ForwardError         the model's own forward raised (the message names the module)
     ├── StoreError                a store or report that cannot be written (full disk, unwritable) or read
     │    ├── OutputExistsError    the output exists without ``force``, or is not hookscope's to replace
     │    │                        (also a FileExistsError)
     │    └── DamagedShardError    one shard of a store is truncated, missing or fails its checksum
     ├── EditError                 an edit that never took effect (site never ran, key absent,
     │                             nothing changed), or one built or applied the wrong way
     ├── NonFiniteError            a NaN or an infinity, named where it was produced (nan_guard)
     ├── ServingError              a vLLM engine hookscope cannot hook as asked (compiled, parallel), a
     │                             selected site that never fired in it, or a request whose hook raised
     └── MissingDependencyError    an optional package is missing (also an ImportError)

    HookscopeWarning (UserWarning) base of every warning hookscope gives
     ├── CaptureWarning            something requested could not be captured, and why
     │    └── CompiledWarning      a compiled model runs eagerly inside a block (said once per block)
     ├── StoreWarning              a store opened without part of it (a damaged shard), and which part
     ├── NonFiniteWarning          what NonFiniteError would say, from nan_guard(mode="warn")
     ├── EditWarning               what EditError would say, for an edit block with strict=False
     └── ServingWarning            what ServingError would say, for a vLLM block with strict=False

Old spellings of options warn with Python's own ``DeprecationWarning`` (see ``hookscope.base.deprecation``).

Every message says what was expected, what was received, and how to fix it. One mistake is one
class wherever it happens: an unknown kind is an ``OptionError`` in ``capture``, ``extract``,
``build_report`` and ``show`` alike, an existing output without ``force`` an ``OutputExistsError``
in ``save``, ``extract``, ``watch``, ``write_report`` and ``export`` (one gate: ``base.files.new_output``).
"""

from __future__ import annotations


class HookscopeError(Exception):
    """Base class of every error hookscope raises."""


class HookscopeWarning(UserWarning):
    """Base class of every warning hookscope gives: ``warnings.filterwarnings("ignore", category=HookscopeWarning)``."""


class SelectionError(HookscopeError):
    """A selector matched no module of the model (or no site of a store), is not a valid selector, or
    names a module torch cannot hook (a ``torch.jit.script`` module)."""


class CaptureError(HookscopeError):
    """A capture was configured or used the wrong way."""


class NotCapturedError(HookscopeError, KeyError):
    """No such name in a result: a site, kind or key of a capture or store, a watched module, a
    history's column or step, a sweep's site. The message names the closest ones."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class BlockError(HookscopeError, RuntimeError):
    """A hook block (``capture``, ``edit``, ``nan_guard``, ``watch``, a recorder) was entered twice.

    Each block is used once: open a new one.
    """


class AmbiguousCallError(HookscopeError):
    """A single-value shortcut was used on a site that was called several times."""


class CaptureWarning(HookscopeWarning):
    """Something that was asked for could not be captured; the message says why."""


class CompiledWarning(CaptureWarning):
    """A compiled model runs eagerly inside a block, so every hook fires; silence it by this class."""


class OptionError(HookscopeError, ValueError):
    """An option that has no meaning: an unknown kind, method, colormap or pick, a bad size or count."""


class ShapeError(HookscopeError, ValueError):
    """A tensor whose shape cannot be read as spatial maps, patch tokens or an image."""


class TargetError(HookscopeError, ValueError):
    """A target that does not fit the model's output."""


class MissingDependencyError(HookscopeError, ImportError):
    """An optional package that a function needs is not installed."""


class InputError(HookscopeError, ValueError):
    """An input spec, file or source that cannot be read as what the function takes (a model input, a
    store where a store goes)."""


class MismatchError(HookscopeError, ValueError):
    """Two things compared do not match: two models' modules, calls or outputs, two stores' batches."""


class ModelError(HookscopeError, ValueError):
    """A model spec, or weights, that cannot be loaded."""


class StoreError(HookscopeError):
    """A store or report that cannot be written (unwritable folder, full disk) or read (missing, corrupt)."""


class OutputExistsError(StoreError, FileExistsError):
    """The output (a store, a report folder or file) exists and ``force=True`` was not given, or it holds files
    hookscope did not write, or it is a folder hookscope never replaces (``base.files.new_output``)."""


class DamagedShardError(StoreError):
    """One shard of a store is truncated, missing or fails its checksum; ``shard`` names its file, ``why`` says how."""

    def __init__(self, shard: str, why: str, advice: str = "") -> None:
        super().__init__(f"shard {shard} is damaged: {why}{advice}")
        self.shard, self.why = shard, why


class StoreWarning(HookscopeWarning):
    """A store was opened or read without part of it (a damaged shard); the message names the part."""


class ForwardError(ModelError):
    """The model's own forward raised; the message names the module it raised in."""


class EditError(HookscopeError):
    """An edit that did not take effect (its site never ran, its key never appeared, it changed
    nothing), or one that was built or applied the wrong way; the message names the site."""


class EditWarning(HookscopeWarning):
    """What ``EditError`` would say, from an edit block opened with ``strict=False``."""


class ServingError(HookscopeError):
    """A vLLM engine that cannot be hooked as asked (a compiled worker, pipeline parallel, a value split over
    tensor-parallel ranks that cannot be gathered), a selected site that never fired inside it, or a request
    whose hook raised (the engine went on serving the others)."""


class ServingWarning(HookscopeWarning):
    """What ``ServingError`` would say about sites that never fired, from a vLLM block with ``strict=False``."""


class NonFiniteError(HookscopeError, FloatingPointError):
    """A NaN or an infinity where it was produced; the attributes say where and how much.

    ``step`` (the training step), ``phase`` (``forward``, ``backward`` or ``optimizer``), ``module``
    (dotted name; ``""`` is the model), ``call`` (the module's call in that step, None for a
    parameter), ``kind`` (``output``, ``grad_input``, ``input``, ``grad_output``, ``param``,
    ``param_grad``), ``key`` (``out[0]``, ``args[0]``, ``weight``), ``value`` (``nan``, ``inf``,
    ``-inf``...), ``count`` and ``numel`` (non-finite elements, of how many; None when the tensor
    was gone before it could be counted), ``input_absmax`` (max ``|x|`` of what the producer received)
    and, under torchrun, ``rank`` (the rank that found it: every rank raises the same finding).
    """

    def __init__(
        self,
        message: str,
        *,
        step: int = 0,
        phase: str = "forward",
        module: str = "",
        call: int | None = None,
        kind: str = "output",
        key: str = "",
        value: str = "nan",
        count: int | None = None,
        numel: int | None = None,
        input_absmax: float | None = None,
        rank: int | None = None,
    ) -> None:
        super().__init__(message)
        self.step, self.phase, self.module, self.call = step, phase, module, call
        self.rank = rank
        self.kind, self.key, self.value = kind, key, value
        self.count, self.numel, self.input_absmax = count, numel, input_absmax

    def __reduce__(self) -> tuple[object, ...]:  # pickles with its attributes (to and from worker processes)
        return type(self), (str(self),), self.__dict__


class NonFiniteWarning(HookscopeWarning):
    """What ``NonFiniteError`` would say, from ``nan_guard(mode="warn")``: one warning per producer."""
