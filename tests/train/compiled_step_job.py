"""A compiled train step under watch, in a fresh process (Dynamo's caches and counters are per process, and
a long test session leaves state behind): prints the frames compiled, the graph breaks, whether the
recompile limit was hit, and the watch's rows, as JSON."""

from __future__ import annotations

import io
import json
import logging
import warnings

from torch._dynamo.utils import counters

from tests.train.test_compiled_step import _train

if __name__ == "__main__":
    said = io.StringIO()
    logging.getLogger("torch._dynamo").addHandler(logging.StreamHandler(said))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a graph break inside a hook is a warning: fail on it
        # Dynamo itself reads a non-leaf .grad while it compiles any such step, hooks or not (torch 2.14.1)
        warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not a leaf Tensor")
        compiled = _train(compiled=True)
    found = {
        "frames": counters["frames"]["total"],
        "breaks": sum(counters["graph_break"].values()),
        "recompile_limit": "recompile_limit" in said.getvalue(),
        "rows": {name: h.rows.tolist() for name, h in compiled.histories().items()},
        "steps": compiled.history("0").steps,
    }
    print(json.dumps(found))
