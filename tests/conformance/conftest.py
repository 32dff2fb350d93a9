# SPDX-License-Identifier: Apache-2.0
"""The conformance suite: attnref's verdicts and numbers against JAX's own Pallas TPU kernels,
run on the CPU under TPU interpret mode. Needs build/venv (JAX, ml_dtypes, numpy 2) and the
module on PYTHONPATH. Without JAX every test skips with one reason, unless ATTNREF_REQUIRE_JAX=1
(ctest, CI), where a missing JAX fails."""
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

try:
    import jax  # noqa: F401
    import ml_dtypes  # noqa: F401
    JAX_ERROR = None
except ImportError as e:  # pragma: no cover - depends on the interpreter
    JAX_ERROR = f"JAX is not importable here ({e}); run with build/venv/bin/python"


if JAX_ERROR is not None:
    # The suites import JAX at module level; test_jax_available.py carries the one skip.
    collect_ignore_glob = ["test_verdicts.py", "test_numbers.py"]


# A module built with pybind11 < 2.12 misreads numpy 2 arrays (a division by a zero item size
# kills the interpreter); one call in a child process says so before the suite runs.
_PROBE = ("import numpy as np, attnref; z = np.zeros((1, 1, 1), np.float32); "
          "attnref.merge_attention_states(z, z[..., 0], z, z[..., 0])")


def pytest_configure(config):
    if JAX_ERROR is not None:
        if os.environ.get("ATTNREF_REQUIRE_JAX") == "1":
            raise pytest.UsageError(f"ATTNREF_REQUIRE_JAX=1 but {JAX_ERROR}")
        return
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True)
    if probe.returncode > 0:
        raise pytest.UsageError(f"attnref fails here: {probe.stderr.strip()[-300:]}")
    if probe.returncode < 0:
        raise pytest.UsageError(
            f"attnref dies on this interpreter's numpy arrays (signal {-probe.returncode}); "
            "build the module with pybind11 >= 2.12: "
            "-Dpybind11_DIR=$(build/venv/bin/python -m pybind11 --cmakedir)")


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="run the full grids (scripts/conformance.sh), not the CI subset")


@pytest.fixture
def full(request):
    return request.config.getoption("--full")
