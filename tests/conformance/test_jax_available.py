# SPDX-License-Identifier: Apache-2.0
"""The JAX the suite judges with is the pinned one (requirements-dev.txt)."""
import pathlib
import re

import pytest

from conftest import JAX_ERROR

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_jax_is_the_pinned_release():
    if JAX_ERROR is not None:
        pytest.skip(JAX_ERROR)
    import jax
    pins = (ROOT / "requirements-dev.txt").read_text()
    pinned = re.search(r"^jax(?:\[cpu\])?==([\w.]+)", pins, re.M)
    assert pinned, "requirements-dev.txt pins no jax"
    assert jax.__version__ == pinned.group(1)
