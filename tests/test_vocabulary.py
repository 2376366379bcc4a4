"""One vocabulary: every public function spells an idea one way, with one default (docs/guide/vocabulary.md).

The test reads ``inspect.signature`` of every function in ``hookscope.__all__``. A parameter name
outside ``ALLOWED`` fails, and an old spelling (``RENAMED``) fails naming the new one, so a new
function that says ``layers=`` or ``metric=`` is caught here, not by a user. Shared options keep
one default (``DEFAULTS``), and what follows a function's subject is keyword-only (``POSITIONAL``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import hookscope
import hookscope.core.select
import hookscope.edits
import hookscope.exports.sae_lens
import hookscope.integrations
import hookscope.reducers
import hookscope.zoo

FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: getattr(hookscope, name) for name in hookscope.__all__ if inspect.isfunction(getattr(hookscope, name))
}
# the functions of the public sub-package hookscope.compare speak it too
FUNCTIONS |= {
    f"compare.{name}": getattr(hookscope.compare, name)
    for name in hookscope.compare.__all__
    if inspect.isfunction(getattr(hookscope.compare, name))
}

# the edit ops (hookscope.edits), the reducers, the zoo and the integrations speak it too
FUNCTIONS |= {f"edits.{n}": getattr(hookscope.edits, n) for n in hookscope.edits.__all__
              if inspect.isfunction(getattr(hookscope.edits, n))}  # fmt: skip
FUNCTIONS |= {f"reducers.{n}": f for n, f in vars(hookscope.reducers).items()  # those that make a Reduction
              if inspect.isfunction(f) and inspect.signature(f).return_annotation == "Reduction"}  # fmt: skip
FUNCTIONS |= {f"zoo.{n}": f for n, f in vars(hookscope.zoo).items()  # its own, not what it imports
              if inspect.isfunction(f) and f.__module__.startswith("hookscope.zoo") and n[0] != "_"}  # fmt: skip


def _integrations() -> dict[str, Callable[..., Any]]:
    """The integrations' functions and the constructors of their classes (a missing trainer library: skipped)."""
    found: dict[str, Callable[..., Any]] = {}
    for info in pkgutil.iter_modules(hookscope.integrations.__path__):
        if info.name == "session":  # the callbacks' shared machinery, not called by users
            continue
        try:
            module = importlib.import_module(f"hookscope.integrations.{info.name}")
        except ImportError:
            continue
        for n, v in vars(module).items():
            own = not n.startswith("_") and getattr(v, "__module__", "") == module.__name__
            if own and (inspect.isfunction(v) or inspect.isclass(v)):
                found[f"integrations.{info.name}.{n}"] = v
    return found


FUNCTIONS |= _integrations()

# The old spellings: each is now the name on the right (kept one release with a DeprecationWarning).
RENAMED = {
    "selector": "select", "layer": "select", "layers": "select", "blocks": "select", "sites": "select",
    "scalar_fn": "target", "metric": "target", "loss": "target",
    "k": "top_k", "copies": "batch_size",
}  # fmt: skip
# One name, one meaning: a name that meant two things keeps one; the other is now the name on the right.
SECOND_MEANINGS = {
    "Graph.colored": {"measure": "column"},  # measure= is compare.cka's CKA or RSA; the graph's numbers are a column
    "StoreStream": {"batch_size": "minibatch"},  # batch_size= is rows through a model; a stream yields minibatches
    "TopExamples.table": {"top_k": "units"},  # top_k= counts predictions; a table of units shows units
}

# The shared vocabulary (docs/guide/vocabulary.md): one name per idea in every function.
SHARED = {
    "select",  # which modules: a Selector (hookscope.core.select), ":blocks" included
    "target",  # the number explained: an int, a list, a tensor, or a callable on the model's output
    "method",  # one spelling per method ("integrated_gradients", not "ig")
    "steps",  # points on an integration path
    "progress",  # hookscope.progress.Progress: bool, stream or (stage, done, total) callable
    "call",  # which call of a module that runs several times: 0-based, None = the default below
    "key",  # a tensor inside a layer's structured value
    "output",  # a tensor inside the model's structured output
    "top_k",  # how many predictions
    "batch_size",  # rows (copies, path points) sent through the model at once
    "out",  # a path hookscope writes
    "kinds",  # Kind | Iterable[Kind]
    "kind",  # one Kind, where a function draws or reduces exactly one (gradient_flow, histogram_plot)
    "tokenizer",  # encodes text and names tokens
    "force",  # replace an output that exists
}

# Names that are one idea each today, grouped by what they are.
SUBJECTS = {
    "model", "x", "inputs", "input_ids", "clean_x", "corrupt_x", "loader",  # what runs, and on what
    "cap", "capture", "capture_or_rows", "tensor", "tensors", "tokens", "obj", "report", "att",  # what is drawn/saved
    "image", "heat",  # a picture and its heatmap
    "path",  # only load(path): a path hookscope reads (writing is out=)
    "optimizer",  # watch/nan_guard/find_hooks: one optimizer or several
    "run",  # build_training_report(run): a watch store (hookscope.load)
    "edits",  # edit(model, {selector: spec}): the mapping's keys are Selectors
    "source",  # export(source, out, format=): a store, a capture, a graph overlay, ... in another tool's format
    "accelerator",  # integrations.accelerate: the Accelerator the watch goes through
    "model_a", "model_b",  # compare.cka / compare.divergence: the two models (or stores) compared
    "maps",  # faithfulness(model, x, maps): the heatmaps measured
    "llm",  # capture_llm / edit_llm: the vllm.LLM whose workers are hooked
}  # fmt: skip
OPTIONS = {
    # capture
    "detach", "clone", "device", "dtype", "reduce",
    # explanations: attribute's Captum-like options, token_attribution's, attention_rollout's
    "baseline", "samples", "noise", "generator", "return_delta", "embeddings", "rows", "head_fusion",
    "discard_ratio", "prefix", "positions", "unembed", "norm",
    # attention_grid(att, layer): which layer of an Attention result (a name or index in att.layers, not a Selector)
    "layer", "batch", "heads", "mean",
    # pictures
    "channels", "pick", "normalize", "cmap", "diverging", "padding", "min_tile", "columns", "background",
    "alpha", "labels", "vanish", "explode", "bins", "log", "grid", "channels_last",
    # statistics
    "per_channel", "channel_dim", "percentiles",
    # reports
    "grads", "pictures", "cam_methods", "title", "notes", "max_layers", "image_names", "sections",
    # the module graph: build_report(graph=) draws it, module_graph(exported=) adds torch.export's data flow
    "graph", "exported",
    # stores
    "verify", "max_memory", "stats_only", "resume", "forward", "shard_size", "flush_every",
    # stores others read: extract's layout ("rows", "tokens"), a dataset's items (by rows or tokens), its shuffle
    "layout", "by", "seed",
    # training (Watch(zero=): DeepSpeed's ZeRO optimizer, whose partitions hold the gradients; watch() finds it)
    "every", "tensorboard", "thresholds", "mode", "allow", "scaler", "sync", "sinks", "zero",
    # edits; inside vLLM, the request ids an edit is limited to
    "strict", "requests",
    # inside vLLM: one request (its RequestOutput.request_id)
    "request",
    # exports: the other tool's format
    "format",
    # compare: B's modules when they differ from A's, the similarity measure, B's autocast dtype
    "select_b", "measure", "autocast",
    # probes: who shares a split, the share of groups tested, the L2 strength, the split's seed
    "groups", "holdout", "penalty",
    # evidence: the class a wrong prediction should have been (explain_prediction); the folder of an alert's bundle
    # (watch, nan_guard) and the "module:function" its reproducer rebuilds the model with (nan_guard)
    "expected", "evidence", "factory",
    # faithfulness: which metrics, whose numbers, the random and edge controls; build_report(faithfulness=) adds it
    "metrics", "convention", "controls", "faithfulness",
    # the edit ops: what an op changes (units of a token output, the value, factor, vector, bounds, direction, fn)
    "units", "value", "factor", "vector", "dim", "min", "max", "direction", "fn",
    # the reducers: first_rows(n) rows, chain(*reducers)
    "n", "reducers",
    # the zoo: the side of the square an image is resized to
    "size",
    # the integrations: the callback's nan_guard (the Accelerator is a subject)
    "nan_guard",
    # the graph's numbers: the column they fill (Graph.colored, export(format="model-explorer"))
    "column",
    # a store stream: items per minibatch it yields
    "minibatch",
    # steering: edits.add(match_norm=) scales the vector by each token's norm; steer_sweep's multipliers of the
    # vector, the two completions whose log-probability gap is the propensity, the prompts the side effect is read on
    "match_norm", "scales", "completions", "neutral",
}  # fmt: skip
ALLOWED = SHARED | SUBJECTS | OPTIONS

# Which options may come before the `*` (the subject aside): the rest are keyword-only.
POSITIONAL = {
    "capture": {"select"}, "select_modules": {"select"},  # (model, select): what is selected is the subject
    "capture_llm": {"select"},
    "cam": {"method", "target"}, "attribute": {"method", "target"}, "token_attribution": {"target"},
    "watch": {"optimizer"}, "nan_guard": {"optimizer"},
    "save": {"out"}, "write_report": {"out"}, "export": {"out"},
    "attention_grid": {"layer"}, "render_html": set(),
    "probe": {"labels"},  # probe(source, labels): the labels are what is probed for
    "directions": {"labels"},  # directions(source, labels): which rows the direction points toward
    "faithfulness": {"maps"},  # faithfulness(model, x, maps): the maps are what is measured
    "steer_sweep": {"vector"},  # steer_sweep(model, inputs, vector): the vector is what is swept
    "explain_prediction": {"out"},  # explain_prediction(model, x, out): the bundle it writes
    # an edit op's own value is its subject: add(vector), clamp(min, max), scale(factor), ...
    "edits.add": {"vector"}, "edits.clamp": {"min", "max"}, "edits.function": {"fn"},
    "edits.project_out": {"direction"}, "edits.replace": {"value"}, "edits.scale": {"factor"},
    # a reducer's one number or dtype: first_rows(8), top_channels(3), top_examples(9), cast(torch.float16)
    "reducers.first_rows": {"n"}, "reducers.top_channels": {"top_k"}, "reducers.top_examples": {"top_k"},
    "reducers.cast": {"dtype"},
    "zoo.lite_input": {"size"}, "zoo.imagenet_input": {"size"},  # (image, size): the image and its new size
}  # fmt: skip

# The shared defaults: {option: {function: default}}, and one default for any other function.
# else None; the text report draws the token norms of the encoder layers, as `hookscope report minilm` does
SELECT_DEFAULTS = {"logit_lens": ":blocks", "patch_sweep": ":blocks", "build_text_report": ":blocks"}
DEFAULTS: dict[str, Any] = {"steps": 50, "call": None, "top_k": 5, "force": False, "tokenizer": None,
                            "shard_size": "256MB", "max_memory": "1GB"}  # sizes: store.format  # fmt: skip
# docs/guide/vocabulary.md: the one top_k that is not 5, and why
TOP_K_DEFAULTS = {"reducers.top_examples": 9}  # the examples kept per unit: a 3 x 3 grid (TopExamples.plot)
PROGRESS_DEFAULTS = {"extract": True}  # a dataset run is long; else None (quiet)
# steps= is 50 points on an integration path (Captum's n_steps), and 20 intervals of a deletion curve (TorchCAM's)
STEPS_DEFAULTS = {"faithfulness": 20}


def _parameters(name: str) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(FUNCTIONS[name]).parameters.values() if p.kind is not p.VAR_KEYWORD]


def test_there_are_functions_to_check() -> None:
    assert {"capture", "cam", "attribute", "extract", "build_report", "patch_sweep", "logit_lens"} <= set(FUNCTIONS)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_parameter_names_are_the_vocabulary(name: str) -> None:
    for p in _parameters(name):
        own = p.name in POSITIONAL.get(name, set())  # attention_grid(att, layer): a layer of the result
        assert own or p.name not in RENAMED, f"{name}({p.name}=) is the old spelling; call it {RENAMED[p.name]}="
        assert p.name in ALLOWED, f"{name}({p.name}=) is not in the vocabulary; use a shared name or add it here"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_options_after_the_subject_are_keyword_only(name: str) -> None:
    for p in _parameters(name):
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            assert p.name in SUBJECTS | POSITIONAL.get(name, set()), f"{name}({p.name}) must come after `*`"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_shared_options_have_one_default(name: str) -> None:
    params = {p.name: p for p in _parameters(name)}
    for option, default in DEFAULTS.items():
        if option in params:
            default = STEPS_DEFAULTS.get(name, default) if option == "steps" else default
            default = TOP_K_DEFAULTS.get(name, default) if option == "top_k" else default
            assert params[option].default == default, f"{name}({option}=) must default to {default!r}"
    if "progress" in params:
        assert params["progress"].default == PROGRESS_DEFAULTS.get(name), f"{name}(progress=)'s default"
    if "select" in params and params["select"].default is not inspect.Parameter.empty:
        assert params["select"].default == SELECT_DEFAULTS.get(name), f"{name}(select=)'s default"
    assert all(p.default != "ig" for p in params.values()), f"{name}: the method is 'integrated_gradients'"


WITH_SELECT = [n for n in FUNCTIONS if "select" in inspect.signature(FUNCTIONS[n]).parameters]


# the integrations pass select= on to watch, whose docstring says it
@pytest.mark.parametrize("name", sorted(n for n in WITH_SELECT if not n.startswith("integrations.")))
def test_each_docstring_says_what_select_picks(name: str) -> None:
    doc = inspect.getdoc(FUNCTIONS[name]) or ""
    assert "select" in doc, f"{name}'s docstring must say what select= picks and what None means"


def test_the_target_is_the_same_idea_where_it_is_positional() -> None:
    """``target`` follows the subject (and the method) in every explanation: cam, attribute, token_attribution."""
    for name in ("cam", "attribute", "token_attribution"):
        positional = [p.name for p in _parameters(name) if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert "target" in positional, f"{name}: target stays positional"


def test_kinds_take_one_kind_or_several() -> None:
    for name in ("capture", "extract", "build_report", "show"):
        annotation = str(inspect.signature(FUNCTIONS[name]).parameters["kinds"].annotation)
        assert "Kind | Iterable[Kind]" in annotation, f"{name}(kinds=) takes Kind | Iterable[Kind], got {annotation}"


# The public methods of exported classes: their parameters name parts of the result they belong to.
METHOD_NAMES = {
    "name",  # a series or tapped tensor by name (Run.history, Watch.history, Capture.tap)
    "grad",  # Capture.tap: also keep the tensor's gradient
    "step", "index", "site", "position", "what",  # a row, batch, site or cell of the result
    "dim", "layout", "other",  # Record.stack's dim, Call.set_layout's layout, RunningStats.merge's other
    "column", "row", "words",  # History/Watch.plot's series column, LogitLens' sequence, TokenAttribution per word
    "epoch",  # StoreStream.set_epoch: the epoch a shuffle is seeded with
    "scalars",  # Watch.log(**scalars): named numbers kept beside the statistics
    "rtol",  # Divergence.first / .plot: the relative tolerance
    "unit", "rank",  # TopExamples.where: a unit (channel) and the place among its top k
    "overlay",  # Graph.colored(overlay, column=): a number per module (column= names them)
    "prompts",  # LLMCapture.pending(prompts): what llm.generate takes, those its store lacks
    "calls",  # Record.set_calls(calls): the calls a store's reader builds at once
}  # fmt: skip
RESULT_LAYER = {"Attention", "LinearAttention"}  # .weights(layer), .mixing(layer): a layer of the result


def _methods() -> list[tuple[str, str, inspect.Signature]]:
    found = []
    exported = [(n, getattr(hookscope, n)) for n in hookscope.__all__]
    exported += [(n, getattr(hookscope.compare, n)) for n in hookscope.compare.__all__]  # its results too
    for name, cls in exported:
        if inspect.isclass(cls) and not issubclass(cls, BaseException):
            for method, value in vars(cls).items():
                if not method.startswith("_") and inspect.isfunction(value):
                    found.append((name, method, inspect.signature(value)))
    return found


def test_public_methods_speak_the_vocabulary_too() -> None:
    methods = _methods()
    assert len(methods) > 20  # Capture, Run, Record, Attention, PatchSweep, ...
    for cls, method, signature in methods:
        for p in list(signature.parameters.values())[1:]:  # after self
            assert p.name in ALLOWED | METHOD_NAMES, f"{cls}.{method}({p.name}=) is not in the vocabulary"
            if p.name in RENAMED:  # only a result's own layer may be called layer
                assert cls in RESULT_LAYER, f"{cls}.{method}({p.name}=) is the old spelling of {RENAMED[p.name]}="


# -- select=: one table of defaults, in hookscope.core.select's docstring and docs/guide/vocabulary.md ---
def _select_table() -> dict[str, tuple[str, str]]:
    """function -> (its default, what select=None picks there), read from core/select.py's docstring table."""
    table: dict[str, tuple[str, str]] = {}
    for line in (hookscope.core.select.__doc__ or "").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ``") and len(cells) == 3:
            table |= dict.fromkeys(re.findall(r"``([\w.]+)``", cells[0]), (cells[1], cells[2]))
    return table


def _selecting() -> dict[str, inspect.Parameter]:
    """Every public callable (functions, classes, compare's) whose select= has a default; export passes
    its options to its writer, whose select= is the datasets format's."""
    found = {f"compare.{n}": getattr(hookscope.compare, n) for n in hookscope.compare.__all__}
    found |= {n: getattr(hookscope, n) for n in hookscope.__all__} | {"export": hookscope.exports.sae_lens.write}
    params = {}
    for name, value in found.items():
        if callable(value) and not (inspect.isclass(value) and issubclass(value, BaseException)):
            select = inspect.signature(value).parameters.get("select")
            if select is not None and select.default is not inspect.Parameter.empty:
                params[name] = select
    return params


def test_one_table_says_what_select_none_picks_in_every_function() -> None:
    table, selecting = _select_table(), _selecting()
    assert len(selecting) >= 18 and set(table) == set(selecting), set(table) ^ set(selecting)
    for name, param in selecting.items():
        default, none = table[name]
        assert default == ("None" if param.default is None else f'``"{param.default}"``'), f"{name}(select=)"
        assert none, f"{name}: the table must say what select=None picks"


def test_the_guide_vocabulary_row_of_select_lists_every_function() -> None:
    page = (Path(__file__).parents[1] / "docs" / "guide" / "vocabulary.md").read_text(encoding="utf-8")
    [row] = [line for line in page.splitlines() if line.startswith("| which modules | `select=` |")]
    assert '`":blocks"`' in row and "transformer.h.*" in row  # how to ask for blocks, and what a glob is
    for name in _select_table():
        assert f"`{name}`" in row, f"docs/guide/vocabulary.md's select= row does not say what None picks in {name}"


# -- the constructors of exported classes ----------------------------------------------------------
# Parts of a result that hookscope builds (Call, Run, Probes, ...): names of what the object holds.
RESULT_PARTS = {
    "tensors", "missing", "watched", "reached", "order", "error", "layouts",  # Call: what a capture recorded
    "rows", "type", "probes",  # GradientFlow, History, Probes: their rows, a module's type, the fitted probes
    "undefined",  # History: the cells of its rows that are undefined (an update ratio over zero weights)
    "root", "manifest",  # Run: load(path) opens the store at root and reads its manifest
    "policy",  # Capture: capture() turns detach=, clone=, device=, dtype= into one Policy
    "spec", "counted",  # LLMCapture, LLMEdit: what their workers are asked; RequestEdits: what they counted
    "directions", "provenance",  # Directions: a Direction per site, and what made them (store, method, seed, ...)
}  # fmt: skip
# A dataclass result is built by hookscope (its fields are what it holds); these are built by users.
USER_DATACLASSES = {"Thresholds", "Policy"}


def _constructors() -> dict[str, inspect.Signature]:
    found = {}
    for name in hookscope.__all__:
        cls = getattr(hookscope, name)
        if not inspect.isclass(cls) or issubclass(cls, BaseException) or name in {"KINDS"}:
            continue
        if dataclasses.is_dataclass(cls) and name not in USER_DATACLASSES:
            continue
        found[name] = inspect.signature(cls)
    return found


def test_constructors_speak_the_vocabulary() -> None:
    constructors = _constructors()
    assert {"Capture", "Run", "StoreStream", "StoreDataset", "Watch", "Thresholds", "RunningStats"} <= set(constructors)
    for cls, signature in constructors.items():
        for p in signature.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                continue
            assert p.name not in RENAMED, f"{cls}({p.name}=) is the old spelling of {RENAMED[p.name]}="
            assert p.name not in SECOND_MEANINGS.get(cls, {}), f"{cls}({p.name}=) means another thing elsewhere"
            known = ALLOWED | METHOD_NAMES | RESULT_PARTS | {f.name for f in _fields(cls)}
            assert p.name in known, f"{cls}({p.name}=) is not in the vocabulary"


def _fields(cls: str) -> tuple[dataclasses.Field[Any], ...]:
    value = getattr(hookscope, cls)
    return dataclasses.fields(value) if cls in USER_DATACLASSES else ()


# -- one name, one meaning ----------------------------------------------------------------------------
def _signature_of(dotted: str) -> inspect.Signature:
    """``Graph.colored``, ``StoreStream`` (its constructor), ``TopExamples.table``."""
    owner, _, method = dotted.partition(".")
    value = getattr(hookscope, owner)
    return inspect.signature(getattr(value, method) if method else value)


@pytest.mark.parametrize("where", sorted(SECOND_MEANINGS))
def test_a_name_has_one_meaning(where: str) -> None:
    parameters = _signature_of(where).parameters
    for old, new in SECOND_MEANINGS[where].items():
        assert new in parameters and old not in parameters, f"{where}({old}=) is now {new}="


def test_measure_is_the_similarity_measure_only() -> None:
    takes = [n for n in FUNCTIONS if "measure" in inspect.signature(FUNCTIONS[n]).parameters]
    assert takes == ["compare.cka"]
    assert all("measure" not in sig.parameters for _, _, sig in _methods())


def test_graph_is_a_module_graph_everywhere() -> None:
    """build_report(graph=) takes a Graph, as save, extract and build_training_report do; True traces one."""
    annotation = str(inspect.signature(hookscope.build_report).parameters["graph"].annotation)
    assert "Graph" in annotation and "bool" in annotation


def test_sink_tools_are_not_kinds() -> None:
    """hookscope.KINDS are what a capture keeps; the tools a sink writes to are train.sinks.TOOLS."""
    from hookscope.train import sinks

    assert sinks.TOOLS == ("tensorboard", "trackio", "mlflow", "wandb")
    with pytest.warns(DeprecationWarning, match=r"sinks\.KINDS is deprecated.*sinks\.TOOLS"):
        assert sinks.KINDS == sinks.TOOLS
    assert set(sinks.TOOLS).isdisjoint(hookscope.KINDS)


def test_one_class_per_name() -> None:
    """Two classes were called Lines (the CLI's redrawn-line stream, the progress lines): a name is one class."""
    names: dict[str, list[str]] = {}
    for info in pkgutil.walk_packages(hookscope.__path__, "hookscope."):
        if info.name.startswith("hookscope.integrations.") or info.name == "hookscope.__main__":
            continue  # their trainer libraries may be missing; __main__ runs the command line
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the forwarders of moved modules
            module = importlib.import_module(info.name)
        for n, v in vars(module).items():
            if inspect.isclass(v) and v.__module__ == info.name and not n.startswith("_"):
                names.setdefault(n, []).append(info.name)
    assert names["Lines"] == ["hookscope.progress"]


# -- progress= and target= ------------------------------------------------------------------------------
def test_the_long_functions_take_progress() -> None:
    from hookscope.exports import sae_lens

    long = ["cam", "attribute", "build_report", "extract", "token_attribution", "patch_sweep", "probe"]
    for name in long:
        assert "progress" in inspect.signature(FUNCTIONS[name]).parameters, f"{name} takes progress="
    assert inspect.signature(sae_lens.write).parameters["progress"].default is None  # export(format="datasets")


def test_a_target_that_can_be_left_out_defaults_to_the_top_1_class() -> None:
    """None means each row's top-1 class in cam, attribute, build_report and patch_sweep (on the clean input)."""
    for name in ("cam", "attribute", "build_report", "patch_sweep"):
        assert inspect.signature(FUNCTIONS[name]).parameters["target"].default is None, f"{name}(target=None)"


def test_the_one_target_contract_is_written_where_it_is_checked() -> None:
    from hookscope.explain import targets

    doc = inspect.getdoc(targets) or ""
    assert "target(output) -> Tensor" in doc and "call_target" in doc
    for name in ("cam", "attribute", "token_attribution", "patch_sweep", "extract"):
        assert name in doc.split("The one contract")[1], f"explain/targets.py names {name} under the one contract"


# -- results draw themselves -----------------------------------------------------------------------------
def test_every_plot_is_a_pil_image() -> None:
    exported = [(n, getattr(hookscope, n)) for n in hookscope.__all__]
    exported += [(n, getattr(hookscope.compare, n)) for n in hookscope.compare.__all__]
    plots = {
        n: inspect.signature(c.plot) for n, c in exported if inspect.isclass(c) and callable(getattr(c, "plot", None))
    }
    assert {"Capture", "Run", "Report", "Graph", "Attention", "Similarity", "Divergence"} <= set(plots)
    wrong = {cls: str(sig.return_annotation) for cls, sig in plots.items() if sig.return_annotation != "Image"}
    assert wrong == {}, "type .plot() as PIL's Image (a TYPE_CHECKING import)"


def test_sizes_have_one_default_per_idea_in_classes_and_writers_too() -> None:
    """``max_memory``: the tensors a streaming job holds (extract, StoreStream); ``shard_size``: one file a
    store or an export writes (save, extract, export and its datasets writer)."""
    from hookscope.exports import sae_lens
    from hookscope.store.format import MAX_MEMORY, SHARD_SIZE

    assert (MAX_MEMORY, SHARD_SIZE) == ("1GB", "256MB")
    holders = [hookscope.extract, hookscope.StoreStream.__init__]
    writers = [hookscope.save, hookscope.extract, hookscope.export, sae_lens.write]
    assert {inspect.signature(f).parameters["max_memory"].default for f in holders} == {MAX_MEMORY}
    assert {inspect.signature(f).parameters["shard_size"].default for f in writers} == {SHARD_SIZE}
