// SPDX-License-Identifier: Apache-2.0
/// @file cli_common.hpp
/// What every attnref-run subcommand shares: the exit codes and how errors end a subcommand,
/// option parsing with typed values, the options every kernel subcommand takes (one table),
/// loading `.npy` inputs as the front end's arrays (tools/frontend/, whose builders check and
/// dispatch them, as for the Python module), and the `--out` / `--expect --atol --rtol`
/// handling of a result.
///
/// A subcommand is `int run_<name>(int argc, char** argv)` (the arguments after its name):
/// @code
///   int run_paged(int argc, char** argv) {
///     const ParsedArgs args(paged_spec(), argc, argv);
///     if (args.help_requested()) return print_help(paged_spec());
///     frontend::PagedInputs in;
///     in.common = frontend_options(parse_common_options(args));   // options first
///     const Input q = load_input(args, "--q", true);              // then the files
///     in.q = to_array(q, "q");
///     ...
///     frontend::check_paged_ranks(in, hints);
///     frontend::with_paged_run_args(in, [&](const auto& a) { ...run, finish_output(...) });
///   }
/// @endcode
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../frontend/array.hpp"
#include "../frontend/options.hpp"
#include "attnref/compare/report.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/io/npy.hpp"

namespace attnref {
namespace cli {

/// attnref-run's exit codes.
enum ExitCode : int {
  kExitOk = 0,          ///< success
  kExitUsage = 1,       ///< usage error, unreadable or malformed file, I/O error
  kExitValidation = 2,  ///< the inputs fail a check: `attnref: error[<code>] <message>`
  kExitMismatch = 3,    ///< `--expect` differs beyond tolerance
};

/// Ends a subcommand: `main` prints `text()` on stderr (when not empty) and exits with `code()`.
class Exit : public std::exception {
 public:
  Exit(int code, std::string text) : code_(code), text_(std::move(text)) {}
  int code() const noexcept { return code_; }
  const std::string& text() const noexcept { return text_; }
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  int code_;
  std::string text_;
};

/// `attnref: error[<code name>] <message>` and, when there is one, the hint on the next line.
std::string format_error(const Status& status);
/// The same for a file error.
std::string format_error(const NpyStatus& status);

/// The same for a check the front end's builders threw.
std::string format_error(const frontend::Error& error);

/// Exit 2 with the validation error.
[[noreturn]] void fail_status(const Status& status);
/// Exit 2 when `status` is an error; nothing otherwise.
inline void fail_if_error(const Status& status) {
  if (!status.ok()) fail_status(status);
}
/// Exit 1 with the file error.
[[noreturn]] void fail_file(const NpyStatus& status);

/// One option of a subcommand. `value_name == nullptr` makes it a flag without a value.
struct OptionSpec {
  const char* name;        ///< "--q-heads"
  const char* value_name;  ///< "N", "Q.npy"; nullptr for a flag
  const char* help;        ///< one line
};

/// A subcommand's name, synopsis, description and options (for parsing and for --help).
struct CommandSpec {
  const char* name;         ///< "paged"
  const char* synopsis;     ///< what follows `attnref-run <name>` in the usage line
  const char* description;  ///< a few lines
  std::vector<OptionSpec> options;
};

/// The shared options of subcommands that produce a result.
extern const OptionSpec kOutOption;
extern const OptionSpec kExpectOption;
extern const OptionSpec kAtolOption;
extern const OptionSpec kRtolOption;

/// Prints `attnref-run <name> --help` on stdout; returns kExitOk.
int print_help(const CommandSpec& spec);

/// The parsed command line of one subcommand. Accepts `--name value` and `--name=value`;
/// `--help`/`-h` anywhere asks for help. Unknown options, positional arguments, repeated
/// options, missing values and values given to flags end the subcommand with exit 1.
class ParsedArgs {
 public:
  ParsedArgs(const CommandSpec& spec, int argc, char** argv);

  bool help_requested() const noexcept { return help_; }
  /// True when the option (flag or valued) was given.
  bool has(const char* name) const;
  /// The raw value of an option, if given.
  std::optional<std::string> value(const char* name) const;
  /// The raw value of a required option (exit 1 when missing).
  std::string required(const char* name) const;
  /// A base-10 int64 value (exit 1 when not an integer or out of range).
  std::optional<std::int64_t> int64(const char* name) const;
  std::int64_t required_int64(const char* name) const;
  /// A real value parsed as double ("inf" and "nan" are accepted; the validators judge them).
  std::optional<double> real(const char* name) const;
  /// One of `choices` (exit 1 otherwise); `fallback` when not given.
  std::string choice(const char* name, const std::vector<std::string>& choices,
                     const std::string& fallback) const;

  /// Exit 1: `attnref-run <cmd>: <problem>` and a pointer to --help.
  [[noreturn]] void usage_error(const std::string& problem) const;
  const CommandSpec& spec() const noexcept { return *spec_; }

 private:
  const OptionSpec* find(const std::string& name) const;

  const CommandSpec* spec_;
  std::vector<std::pair<std::string, std::string>> given_;  // name, value ("" for flags)
  bool help_ = false;
};

/// A `.npy` input named by an option.
struct Input {
  std::string option;  ///< "--q"
  std::string path;    ///< "" when an optional input was not given
  NpyArray array;
  bool present() const noexcept { return !path.empty(); }
};

/// Loads the `.npy` file an option names. A required option that is missing is a usage error
/// (exit 1); an unreadable or malformed file, or a path that is not a regular file (a FIFO, a
/// device, a directory: opened without blocking and refused), exits 1 with a `bad_file` message.
Input load_input(const ParsedArgs& args, const char* option, bool required);

/// The front end's array over a loaded input, named `name` (a literal such as "k_pages") in
/// messages; absent when the input was not given. It shares the input's buffer, so the input
/// outlives it; `buffer_size` bounds its views.
frontend::Array to_array(const Input& input, const char* name);

/// A float option (--soft-cap, --sm-scale, ...) parsed and checked as double, then narrowed:
/// a finite value outside float32's range, or a non-zero one that rounds to 0, exits 2 with
/// `code` naming `option` and the value as given ("inf" and "nan" pass through, for the
/// library's checks to judge).
std::optional<float> float_option(const ParsedArgs& args, const char* option, ErrorCode code);

/// Checks the paths of the outputs (`--out` and the `--*-out` options) before any file is read:
/// an existing output must be a regular file, must not be the same file (device and inode) as
/// an input (`--q`, `--expect`, ...) and two outputs must not name one file (exit 1, `bad_file`,
/// naming both options). `parse_common_options` calls it.
void check_output_paths(const ParsedArgs& args);

/// `--q-dtype bf16` and `--kv-dtype bf16|e4m3|e5m2`: what the raw codes of a bf16 or fp8 dump
/// (uint16 or `|V2`, uint8 or `|V1`) are. Paged and ragged take both; merge takes
/// `--state-dtype bf16` for its two states.
extern const OptionSpec kQDtypeOption;
extern const OptionSpec kStateDtypeOption;
extern const OptionSpec kKvDtypeOption;

/// The element type a dtype option names (bf16: kBFloat16, e4m3: kFloat8E4M3FN, e5m2:
/// kFloat8E5M2; exit 1 for anything else), or kUnknown when it was not given. `--q-dtype` and
/// `--state-dtype` take bf16 only.
DType dtype_option(const ParsedArgs& args, const char* option);

/// Reads the raw codes of `array` as `as` when a dtype option named it: `option` ("--q-dtype",
/// "--kv-dtype" or "--state-dtype", a literal) applies to the array (named by its `name` in
/// messages). `as` kUnknown (no option): an array of raw codes (uint8, uint16, `|V1`, `|V2`) is
/// an error naming the option to give. Otherwise the array must hold codes of `as`'s size (2
/// bytes for bfloat16, 1 for fp8), else an error naming the option and the array's dtype; then
/// only its dtype tag changes. Errors are `kDtypeNotSupported`.
Status apply_dtype_option(frontend::Array* array, DType as, const char* option);

/// The options paged, splash and ragged share, parsed.
struct CommonOptions {
  Profile profile = Profile::kReference;
  std::optional<float> soft_cap;
  float mask_value;  ///< JAX's default unless --mask-value is given
  float sm_scale = 1.0f;
  bool check_only = false;
  /// Run the family's data tier (check_*_data) after the shape and metadata tiers.
  bool check_data = false;
  AlibiConvention alibi_convention = AlibiConvention::kSigned;
  SoftCapOrder soft_cap_order = SoftCapOrder::kCapThenAlibi;
};

/// The options the front end's builders take: the profile, the data tier with --check-data,
/// and the logit options.
frontend::CommonOptions frontend_options(const CommonOptions& o);

/// A kernel subcommand's options: `own`, then the shared ones (--soft-cap, --mask-value,
/// --sm-scale, --profile, --check-only, --check-data, --out, --expect, --atol, --rtol).
std::vector<OptionSpec> with_common_options(std::vector<OptionSpec> own);

/// Parses the shared options before any file is read. `--check-only` excludes every result
/// option the subcommand has (--out, --lse-out, --expect, --dout); --atol/--rtol need --expect.
/// Usage errors and bad output paths (`check_output_paths`) exit 1; float values that do not
/// fit float32 exit 2 (`float_option`).
CommonOptions parse_common_options(const ParsedArgs& args);

/// The `--kv-layout` option (jax, nhd or hnd; `fallback` when not given; exit 1 otherwise).
KvLayout kv_layout_option(const ParsedArgs& args, KvLayout fallback = KvLayout::kJax);

/// Absolute and relative tolerance of `--expect`: |got - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double atol;
  double rtol;
};

/// Defaults by the output's dtype: float16 1e-2/1e-2, float32 1e-5/1e-5, float64 1e-10/1e-10.
Tolerance default_tolerance(DType output_dtype);

/// The outcome of comparing a result with an expected array of the same shape.
struct Comparison {
  std::int64_t count = 0;
  std::int64_t mismatches = 0;
  double max_abs = 0.0;
  std::int64_t max_abs_index = -1;
  double max_rel = 0.0;  ///< |got - expected| / |expected|; inf where expected is 0 and got not
  std::int64_t max_rel_index = -1;
  std::int64_t first_mismatch = -1;
};

/// Elementwise comparison. Non-finite values match only the same non-finite value (NaN = NaN).
Comparison compare(const std::vector<double>& got, const std::vector<double>& expected,
                   Tolerance tol);

/// `[i, j, k]` of flat index `flat` in a C-order array of `shape`.
std::string index_string(std::int64_t flat, const std::vector<std::int64_t>& shape);

/// The elements of a float array (float16, float32 or float64) as doubles.
std::vector<double> to_doubles(const NpyArray& array);

/// A kernel's output (float, double, Eigen::half or Eigen::bfloat16) as doubles.
template <class T>
std::vector<double> to_doubles(const std::vector<T>& x) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same<T, double>::value) {
      out[i] = x[i];
    } else {
      out[i] = static_cast<double>(static_cast<float>(x[i]));
    }
  }
  return out;
}

/// The output files of one run, written all or nothing: `stage` writes each to a temporary
/// file beside its target, `commit` renames them onto their targets, and whatever was not
/// committed is removed by the destructor (also when an `Exit` unwinds the run). A write error
/// (a full disk, `ulimit -f`: SIGXFSZ is ignored so the write fails with EFBIG) exits 1 and
/// leaves an existing file at the target untouched.
class OutputFiles {
 public:
  OutputFiles() = default;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  ~OutputFiles();

  /// Writes `values` [shape] as float32 `.npy` to a temporary file for `path` (exit 1 on I/O
  /// error); `note` is printed on stdout once it is committed.
  void stage(const std::string& path, const std::vector<std::int64_t>& shape,
             const std::vector<double>& values, std::string note);
  /// Renames every staged file onto its target, in order, and prints the notes (exit 1 when a
  /// rename fails; the files not yet renamed are removed).
  void commit();

 private:
  struct Staged {
    std::string temp, target, path, note;
  };
  std::vector<Staged> staged_;
};

/// Stages `values` [shape] as float32 for the file that `option` (an output option such as
/// `--lse-out`) names, if it was given; `outputs` commits it with the run's other outputs.
void stage_option_output(const ParsedArgs& args, OutputFiles* outputs, const char* option,
                         const std::vector<std::int64_t>& shape, const std::vector<double>& values);

/// Handles a result of `shape`: `--out` writes it as float32 (staged in `outputs` with the
/// run's other outputs, then all committed; exit 1 on I/O error); `--expect` (loaded and
/// checked before the run with `load_expect`) compares it with `--atol`/`--rtol` (defaults
/// `tol`) and exits 3 with a report when it differs. Prints what it did on stdout; returns
/// kExitOk.
/// With `explain` (paged, splash, ragged), a mismatch also prints the comparison report's likely
/// causes and localization, and the report decides: `--expect-lse` and `--ignore-padding`
/// count as it says.
using ExplainMismatch = std::function<compare::Report(Tolerance tol)>;
int finish_output(const ParsedArgs& args, const std::vector<std::int64_t>& shape,
                  const std::vector<double>& values, const Input& expect, Tolerance tol,
                  OutputFiles* outputs = nullptr, const ExplainMismatch& explain = {});

/// `--expect-lse LSE.npy` (compare the logsumexp too) and `--ignore-padding` (leave padding
/// rows out of the comparison), for the subcommands with a comparison report.
extern const OptionSpec kExpectLseOption;
extern const OptionSpec kIgnorePaddingOption;

/// Loads `--expect-lse` (if given; it needs `--expect`) and checks that it is a float array of
/// `shape` (exit 1 if not).
Input load_expect_lse(const ParsedArgs& args, const std::vector<std::int64_t>& shape);

/// The comparison options of `--expect`: the tolerance (`--atol`/`--rtol`, defaults `tol`) and
/// `--ignore-padding`.
compare::Options compare_options(const ParsedArgs& args, Tolerance tol);

/// The attnref-run options that make a report's change: "--soft-cap 30", "no --sinks".
std::string reproduce_options(const compare::Reproduce& r);

/// Checks the options of a result before any file is read: `--atol`/`--rtol` need `--expect`
/// and must be non-negative numbers (exit 1 otherwise).
void check_result_options(const ParsedArgs& args);

/// Loads `--expect` (if given) and checks that it is a float array of `shape` (exit 1 if not),
/// so a bad expectation fails before any work is done.
Input load_expect(const ParsedArgs& args, const std::vector<std::int64_t>& shape);

/// Runs a validated paged or ragged call, `kernel(out, lse)` into `[rows, heads, dim_v]` outputs
/// and a `[rows, heads]` logsumexp, stages `--lse-out`, and finishes the output; on a mismatch
/// `compare(got, got_lse, options, report)` explains it (`got`: `--expect`, the outputs of the
/// kernel under test).
template <class Q, class Kernel, class Compare>
int run_and_finish(const ParsedArgs& args, const Input& expect, const Input& expect_lse,
                   DType q_dtype, const std::array<std::int64_t, 3>& shape, Kernel&& kernel,
                   Compare&& compare) {
  const std::int64_t rows = shape[0], heads = shape[1];
  std::vector<Q> out(static_cast<std::size_t>(rows * heads * shape[2]));
  std::vector<float> lse(static_cast<std::size_t>(rows * heads));
  fail_if_error(
      kernel(TensorView<Q, 3>(out.data(), shape), TensorView<float, 2>(lse.data(), {rows, heads})));
  OutputFiles outputs;  // all written, or none
  stage_option_output(args, &outputs, "--lse-out", {rows, heads}, to_doubles(lse));
  const auto explain = [&](Tolerance tol) {
    compare::Report report;
    const std::vector<double> got_lse =
        expect_lse.present() ? to_doubles(expect_lse.array) : std::vector<double>{};
    fail_if_error(compare(to_doubles(expect.array), got_lse, compare_options(args, tol), &report));
    return report;
  };
  return finish_output(args, {shape.begin(), shape.end()}, to_doubles(out), expect,
                       default_tolerance(q_dtype), &outputs, explain);
}

}  // namespace cli
}  // namespace attnref
