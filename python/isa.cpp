// SPDX-License-Identifier: Apache-2.0
// attnref._isa: which instruction-set level this CPU runs (include/attnref/core/isa.hpp).
// attnref/__init__.py asks it before importing the extension built for that level, so it is
// built for baseline and holds nothing else.
#include <pybind11/pybind11.h>

#include <string>

#include "attnref/core/isa.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_isa, m) {
  m.doc() = "The instruction-set level this CPU runs, and the one attnref's kernels start with.";
  m.def(
      "cpu", [] { return attnref::isa_name(attnref::cpu_isa()); },
      "The best level this CPU and its operating system run: baseline, avx2 or avx512.");
  m.def(
      "choose",
      [](const py::object& forced) {
        const std::string text = forced.is_none() ? std::string() : std::string(py::str(forced));
        attnref::IsaLevel level = attnref::IsaLevel::kBaseline;
        if (!attnref::choose_isa(text.c_str(), level)) {
          throw py::value_error("ATTNREF_ISA='" + text +
                                "' names no instruction-set level; use baseline, avx2 or avx512");
        }
        return attnref::isa_name(level);
      },
      py::arg("forced"),
      "The level to run: this CPU's, or the lower one `forced` names (ATTNREF_ISA).");
}
