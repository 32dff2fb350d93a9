// SPDX-License-Identifier: Apache-2.0
/// @file version.hpp
/// attnref's version as macros.
#pragma once

#define ATTNREF_VERSION_MAJOR 0
#define ATTNREF_VERSION_MINOR 1
#define ATTNREF_VERSION_PATCH 0
#define ATTNREF_VERSION_STRING "0.1.0"
