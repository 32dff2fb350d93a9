// SPDX-License-Identifier: Apache-2.0
/// @file version.hpp
/// attnref's version as macros: the one place it is set. CMakeLists.txt (project version,
/// attnref.pc, attnrefConfigVersion.cmake, the Python module's __version__) and pyproject.toml
/// (the wheel's version) read ATTNREF_VERSION_STRING here, and the command-line tool prints it.
#pragma once

#define ATTNREF_VERSION_MAJOR 0
#define ATTNREF_VERSION_MINOR 1
#define ATTNREF_VERSION_PATCH 0
#define ATTNREF_VERSION_STRING "0.1.0"
