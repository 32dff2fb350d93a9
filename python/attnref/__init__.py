# SPDX-License-Identifier: Apache-2.0
"""attnref: validators and float reference kernels for paged, splash and ragged attention.
The functions live in the C++ extension attnref._attnref (its docstring replaces this one); an
installed wheel also holds the C++ headers, the CMake package and the attnref-run program."""
import os as _os

from ._attnref import *  # noqa: F401,F403  (every public function and class)
from ._attnref import __doc__, __version__  # noqa: F401

# The extension's classes report the package as their module, so tracebacks say
# attnref.ShapeError as the names users write.
for _name, _value in list(globals().items()):
    if isinstance(_value, type) and _value.__module__ == __name__ + "._attnref":
        _value.__module__ = __name__
del _name, _value

_HERE = _os.path.dirname(_os.path.abspath(__file__))


def _bundled(*parts):
    path = _os.path.join(_HERE, *parts)
    if not _os.path.exists(path):
        raise FileNotFoundError(
            f"attnref: {path} does not exist; the headers, the CMake package and attnref-run "
            "come with the installed wheel (pip install), not with a build tree")
    return path


def get_include():
    """The directory holding attnref/attnref.hpp (the C++ headers; the kernels need Eigen 3.4
    from the system): compile with -I attnref.get_include()."""
    return _bundled("include")


def get_cmake_dir():
    """The directory holding attnrefConfig.cmake: cmake -Dattnref_DIR=<it>, then
    find_package(attnref CONFIG) gives attnref::validate and, with Eigen, attnref::attnref."""
    return _bundled("share", "cmake", "attnref")
