# SPDX-License-Identifier: Apache-2.0
"""attnref: validators and float reference kernels for paged, splash and ragged attention.
The functions live in the C++ extension attnref._attnref (its docstring replaces this one); an
installed wheel also holds the C++ headers, the CMake package and the attnref-run program."""
import importlib as _importlib
import os as _os

from . import _isa

# The extension is built once per x86-64 level (attnref._attnref is baseline; _attnref_avx2 and
# _attnref_avx512 where the build made them): import the one for the level this CPU runs, or
# the lower one ATTNREF_ISA names, falling back to the next lower level a build lacks.
_LEVELS = ("baseline", "avx2", "avx512")


def _import_extension():
    chosen = _isa.choose(_os.environ.get("ATTNREF_ISA"))  # ValueError: no such level
    for level in reversed(_LEVELS[:_LEVELS.index(chosen) + 1]):
        name = "_attnref" if level == "baseline" else "_attnref_" + level
        try:
            return _importlib.import_module("." + name, __name__)
        except ModuleNotFoundError as e:
            if e.name != __name__ + "." + name:
                raise
    raise ImportError("attnref: no extension attnref._attnref* found beside " + __file__)


_extension = _import_extension()
globals().update({k: v for k, v in vars(_extension).items() if not k.startswith("_")})
__doc__ = _extension.__doc__
__version__ = _extension.__version__

# The extension's classes report the package as their module, so tracebacks say
# attnref.ShapeError as the names users write.
for _name, _value in list(globals().items()):
    if isinstance(_value, type) and _value.__module__ == _extension.__name__:
        _value.__module__ = __name__
del _name, _value


def build_info():
    """What this process runs: {'version', 'isa' (the level of the kernels: baseline, avx2 or
    avx512), 'cpu_isa' (the best level this CPU runs), 'isa_forced' (ATTNREF_ISA, or None),
    'extension' (the module imported)}."""
    return {
        "version": __version__,
        "isa": _extension._kernel_isa,
        "cpu_isa": _isa.cpu(),
        "isa_forced": _os.environ.get("ATTNREF_ISA") or None,
        "extension": _extension.__name__,
    }


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
