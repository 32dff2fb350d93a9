// SPDX-License-Identifier: Apache-2.0
// attnref-run: validate attention inputs against JAX's Pallas TPU rules and compute reference
// results from .npy files. `attnref-run --help` lists the subcommands.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "attnref/core/error.hpp"
#include "attnref/core/isa.hpp"
#include "attnref/version.hpp"
#include "cli_common.hpp"

#if defined(ATTNREF_RUN_ISA_VARIANTS) && defined(__linux__)
#include <unistd.h>
#endif

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

// Starts the program beside this one built for the level this CPU should run
// (attnref-run-avx2, attnref-run-avx512, attnref-run for baseline), or for the next lower level
// a build lacks, when that is not this program's level. Returns when this program runs the
// call: its level is the one found, or no such program is there. False for an ATTNREF_ISA that
// names no level.
bool start_program_for_cpu(char** argv) {
  attnref::IsaLevel chosen = attnref::IsaLevel::kBaseline;
  if (!attnref::choose_isa(std::getenv("ATTNREF_ISA"), chosen)) return false;
#if defined(ATTNREF_RUN_ISA_VARIANTS) && defined(__linux__)
  std::string dir(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", &dir[0], dir.size() - 1);
  if (n <= 0) return true;
  dir.resize(static_cast<std::size_t>(n));
  dir.resize(dir.rfind('/') + 1);
  for (int level = static_cast<int>(chosen); level >= 0; --level) {
    const auto isa = static_cast<attnref::IsaLevel>(level);
    if (isa == attnref::compiled_isa()) return true;
    const std::string path =
        dir + (isa == attnref::IsaLevel::kBaseline ? std::string("attnref-run")
                                                   : "attnref-run-" + std::string(isa_name(isa)));
    if (access(path.c_str(), X_OK) == 0) execv(path.c_str(), argv);
  }
#else
  (void)argv;
#endif
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!start_program_for_cpu(argv)) {
    std::cerr << "attnref-run: ATTNREF_ISA='" << std::getenv("ATTNREF_ISA")
              << "' names no instruction-set level; use baseline, avx2 or avx512\n";
    return attnref::cli::kExitUsage;
  }
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
    std::cout << "attnref-run " << ATTNREF_VERSION_STRING << "\n"
              << "kernels: " << attnref::isa_name(attnref::compiled_isa())
              << " (this CPU: " << attnref::isa_name(attnref::cpu_isa()) << ")\n";
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
