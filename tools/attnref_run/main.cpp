// SPDX-License-Identifier: Apache-2.0
// attnref-run: validate attention inputs against JAX's Pallas TPU rules and compute reference
// results from .npy files. `attnref-run --help` lists the subcommands.
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "attnref/core/error.hpp"
#include "attnref/version.hpp"
#include "cli_common.hpp"

// The subcommands, one line each: X(name, summary). Subcommand `name` is the function
// `int attnref::cli::run_<name>(int argc, char** argv)` (the arguments after the name), defined
// in cmd_<name>.cpp, which tools/attnref_run/CMakeLists.txt lists.
#define ATTNREF_RUN_SUBCOMMANDS(X)                                                             \
  X(config, "check an attention configuration: head counts, head_dim, page size")              \
  X(paged, "validate and run paged attention (decode) on .npy files")                          \
  X(splash, "validate and run splash attention (prefill/training) on .npy files")              \
  X(ragged, "validate and run ragged paged attention (continuous batching) on .npy files")     \
  X(merge, "merge two results over disjoint key sets (out + logsumexp) into one")              \
  X(engines, "which engine kernels (FlashInfer, vLLM, FlashAttention, FlashMLA) take a model") \
  /* add a subcommand above this line */

namespace attnref {
namespace cli {
#define ATTNREF_RUN_DECLARE(name, summary) int run_##name(int argc, char** argv);
ATTNREF_RUN_SUBCOMMANDS(ATTNREF_RUN_DECLARE)
#undef ATTNREF_RUN_DECLARE
}  // namespace cli
}  // namespace attnref

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Subcommand kSubcommands[] = {
#define ATTNREF_RUN_ENTRY(name, summary) {#name, summary, &attnref::cli::run_##name},
    ATTNREF_RUN_SUBCOMMANDS(ATTNREF_RUN_ENTRY)
#undef ATTNREF_RUN_ENTRY
};

void print_usage(std::ostream& os) {
  os << "usage: attnref-run <subcommand> [options]\n"
        "       attnref-run <subcommand> --help\n"
        "       attnref-run --version\n\n"
        "Validates attention inputs against JAX's Pallas TPU kernel rules and computes exact\n"
        "reference results with attnref (inputs and outputs are .npy files).\n\n"
        "subcommands:\n";
  for (const Subcommand& s : kSubcommands) {
    std::string name = s.name;
    name.resize(10, ' ');
    os << "  " << name << s.summary << "\n";
  }
  os << "\nexit status: 0 success, 1 usage or I/O error, 2 validation error\n"
        "             (stderr: attnref: error[<code>] <message>, then a hint), 3 --expect "
        "mismatch\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "attnref-run: missing subcommand\n";
    print_usage(std::cerr);
    return attnref::cli::kExitUsage;
  }
  const char* first = argv[1];
  if (std::strcmp(first, "--help") == 0 || std::strcmp(first, "-h") == 0 ||
      std::strcmp(first, "help") == 0) {
    print_usage(std::cout);
    return attnref::cli::kExitOk;
  }
  if (std::strcmp(first, "--version") == 0) {
    std::cout << "attnref-run " << ATTNREF_VERSION_STRING << "\n";
    return attnref::cli::kExitOk;
  }
  for (const Subcommand& s : kSubcommands) {
    if (std::strcmp(first, s.name) != 0) continue;
    try {
      return s.run(argc - 2, argv + 2);
    } catch (const attnref::cli::Exit& e) {
      if (!e.text().empty()) std::cerr << e.text() << "\n";
      return e.code();
    } catch (const attnref::frontend::Error& e) {
      std::cerr << attnref::cli::format_error(e) << "\n";
      return attnref::cli::kExitValidation;
    } catch (const attnref::ShapeError& e) {
      std::cerr << attnref::cli::format_error(e.status()) << "\n";
      return attnref::cli::kExitValidation;
    } catch (const std::bad_alloc&) {
      std::cerr << "attnref: out of memory\n";
      return attnref::cli::kExitUsage;
    } catch (const std::exception& e) {
      std::cerr << "attnref: " << e.what() << "\n";
      return attnref::cli::kExitUsage;
    }
  }
  std::cerr << "attnref-run: unknown subcommand '" << first << "'\n";
  print_usage(std::cerr);
  return attnref::cli::kExitUsage;
}
