"""Sphinx configuration of hookscope's documentation site (``make docs``: docs/_build/html).

Markdown pages (MyST), the API reference from the docstrings (autodoc + napoleon, Google style;
its pages are written at build time by ``_ext/apipages.py``), the furo theme, and llms.txt /
llms-full.txt (sphinx-llms-txt). The build is offline and strict: ``-W --keep-going -n``, and
every page it writes is self-contained (no font, script or stylesheet from another site).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import hookscope  # noqa: E402

project = "hookscope"
author = "the hookscope authors"
copyright = "the hookscope authors"
release = version = hookscope.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_llms_txt",
    "apipages",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
nitpicky = True
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
suppress_warnings: list[str] = []

# Autodoc: the docstrings' Args: become parameter tables, types go into them (not the signature).
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_member_order = "bysource"
autoclass_content = "class"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
napoleon_use_rtype = False

# Names from other libraries that signatures mention: no intersphinx (the build is offline), so each
# is named here, once. A hookscope name never belongs here (apipages resolves those).
FOREIGN = {
    "py:class": [
        "torch.Tensor",
        "Tensor",
        "torch.nn.Module",
        "torch.nn.modules.module.Module",
        "nn.Module",
        "torch.dtype",
        "torch.device",
        "torch.Generator",
        "torch.utils.data.Dataset",
        "torch.utils.data.IterableDataset",
        "torch.utils.data.DataLoader",
        "torch.optim.Optimizer",
        "Optimizer",
        "torch.optim.optimizer.Optimizer",
        "torch._C.Generator",
        "torch.utils.hooks.RemovableHandle",
        "PIL.Image.Image",
        "Image",
        "Image.Image",
        "matplotlib.figure.Figure",
        "numpy.ndarray",
        "pathlib.Path",
        "Path",
        "os.PathLike",
        "collections.abc.Callable",
        "collections.abc.Iterable",
        "collections.abc.Iterator",
        "collections.abc.Mapping",
        "collections.abc.Sequence",
        "typing.Any",
        "typing.Literal",
        "typing.TextIO",
        "types.TracebackType",
    ],
}
# hookscope's own types that signatures mention but that are not public (no page of their own): type
# aliases written by their short name, and the parts of a result that are reached through it.
INTERNAL = {
    "py:class": [
        "Pick", "Normalize", "RGB", "Picture", "Heat", "FlowRow", "Target", "Progress", "Reducer", "EditSpec",
        "Probe", "Source", "LossScale", "worker.Spec", "Forward", "Loss",
        "hookscope.core.tree.Leaf", "hookscope.core.tree.Node", "hookscope.core.tree.NotKept",
        "hookscope.core.tree.Plain", "hookscope.edits.tally.EditReport", "hookscope.edits.tokens.Tokens",
        "hookscope.graph.nodes.Edge", "hookscope.graph.nodes.Node", "hookscope.report.content.CamView",
        "hookscope.report.content.LayerView", "hookscope.report.content.Prediction",
        "hookscope.report.content.Section", "hookscope.report.flow.FlowChart", "hookscope.report.inline.Inline",
        "hookscope.stats.summary.ChannelSummary", "hookscope.stats.summary.Histogram",
        "hookscope.store.contents.Contents", "hookscope.train.guard.Guard", "hookscope.train.page.TrainingReport",
        "hookscope.transformer.text_content.TextReport", "hookscope.transformer.linear.Recurrent",
        "hookscope.core.experts.RouterStats",
    ],
}  # fmt: skip
nitpick_ignore = [
    (role, target) for table in (FOREIGN, INTERNAL) for role, targets in table.items() for target in targets
]

# The page: furo, with no font or script from another site (furo bundles its own; checked by tests/docs/).
html_theme = "furo"
html_title = f"hookscope {release}"
html_static_path: list[str] = []
html_last_updated_fmt = None
html_copy_source = True
html_show_sphinx = False

# llms.txt (a summary with a link per page) and llms-full.txt (every page, then the API reference).
llms_txt_title = "hookscope"
llms_txt_summary = (
    "See what every layer of a PyTorch network saw, what it produced and what gradient flowed back "
    "through it: PyTorch's hooks, done right, in one with block."
)
llms_txt_uri_template = "{docname}.html"  # relative links: the built site opens from a folder, offline
