// SPDX-License-Identifier: Apache-2.0
/// @file cli_common.hpp
/// What every attnref-run subcommand shares: the exit codes and how errors end a subcommand,
/// option parsing with typed values, the options every kernel subcommand takes (one table),
/// the one map from runtime dtypes to kernel instantiations, loading `.npy` inputs with rank and
/// dtype checks, and the `--out` / `--expect --atol --rtol` handling of a result.
///
/// A subcommand is `int run_<name>(int argc, char** argv)` (the arguments after its name):
/// @code
///   int run_example(int argc, char** argv) {
///     static const CommandSpec kSpec{"example", "--x X.npy [--out OUT.npy]", "Does X.",
///                                    with_common_options({{"--x", "X.npy", "input [n, d]"}})};
///     const ParsedArgs args(kSpec, argc, argv);
///     if (args.help_requested()) return print_help(kSpec);
///     const CommonOptions common = parse_common_options(args);
///     const Input x = load_input(args, "--x", true);
///     fail_if_error(check_rank(x, 2, "x", "x is [n, d]"));
///     fail_if_error(check_q_dtype(x));
///     const Input expect = load_expect(args, x.array.shape);
///     return dispatch_float(x.array.dtype, [&](auto q) {
///       using Q = typename decltype(q)::type;
///       ...
///       return finish_output(args, shape, values, expect, default_tolerance(x.array.dtype));
///     });
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

/// Exit 2 with the validation error.
[[noreturn]] void fail_status(const Status& status);
/// Exit 2 when `status` is an error; nothing otherwise.
inline void fail_if_error(const Status& status) {
  if (!status.ok()) fail_status(status);
}
/// Exit 2 for index arrays of a bad runtime dtype (`dtypes`, the library's verdict) in JAX's
/// order: `shapes` (the shape tier run on stand-in index views) is reported first when it
/// failed at a check other than the dtype check `dtype_check` ("P7", "R5"), which it would
/// report with the stand-in's dtype.
[[noreturn]] inline void fail_index_dtypes_after(const Status& shapes, const char* dtype_check,
                                                 const Status& dtypes) {
  if (!shapes.ok() && std::string(shapes.jax_check()) != dtype_check) fail_status(shapes);
  fail_status(dtypes);
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

/// A per-query-head vector (`--sinks`, `--alibi-slopes`): a 1-dim float16/32/64 `.npy`, cast
/// to float32 for the kernel's f32 view; `view()` is empty when the option was not given.
struct HeadValues {
  Input input;
  std::vector<float> values;
  bool present() const noexcept { return input.present(); }
  TensorView<const float, 1> view() const {
    if (!present()) return {};
    return TensorView<const float, 1>(values.data(), {static_cast<std::int64_t>(values.size())});
  }
};

/// Loads a `HeadValues` option: exit 2 for a rank other than 1 (`rank_mismatch`), a dtype other
/// than float (`dtype_not_supported`) or a finite value past float32's range (`range_code`); the
/// library checks the length against num_q_heads and the values. `name` and `shape_hint` are
/// literals ("sinks", "sinks are [num_q_heads]").
HeadValues load_head_values(const ParsedArgs& args, const char* option, const char* name,
                            const char* shape_hint, ErrorCode range_code);

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

/// `ErrorCode::kRankMismatch` when `input` does not have `rank` dimensions. `name` (a string
/// literal, as Status keeps it) names the tensor; `shape_hint` (a literal) describes its shape.
Status check_rank(const Input& input, std::size_t rank, const char* name, const char* shape_hint);

/// `ErrorCode::kDtypeNotSupported` naming the tensor and its dtype, with `hint` (a literal).
Status dtype_error(const Input& input, const char* name, const char* hint);

/// `ErrorCode::kDtypeNotSupported` unless q is float16, float32 or float64 (the dtypes every
/// kernel subcommand instantiates).
Status check_q_dtype(const Input& q);

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

/// Reads the raw codes of `input` as `as` when a dtype option named it: `option` ("--q-dtype",
/// "--kv-dtype" or "--state-dtype", a literal) applies to `input`, named `name` (a literal) in
/// messages. `as` kUnknown (no option): an array of raw codes (uint8, uint16, `|V1`, `|V2`) is an
/// error naming the option to give. Otherwise the array must hold codes of `as`'s size (2 bytes for
/// bfloat16, 1 for fp8), else an error naming the option and the array's dtype; then only its
/// dtype tag changes. Errors are `kDtypeNotSupported`.
Status apply_dtype_option(Input* input, DType as, const char* name, const char* option);

/// The options paged, splash and ragged share, parsed.
struct CommonOptions {
  Profile profile = Profile::kReference;
  std::optional<float> soft_cap;
  float mask_value;  ///< JAX's default unless --mask-value is given
  float sm_scale = 1.0f;
  bool check_only = false;
  /// Run the family's data tier (check_*_data) after the shape and metadata tiers.
  bool check_data = false;
};

/// A kernel subcommand's options: `own`, then the shared ones (--soft-cap, --mask-value,
/// --sm-scale, --profile, --check-only, --check-data, --out, --expect, --atol, --rtol).
std::vector<OptionSpec> with_common_options(std::vector<OptionSpec> own);

/// Parses the shared options before any file is read. `--check-only` excludes every result
/// option the subcommand has (--out, --lse-out, --expect, --dout); --atol/--rtol need --expect.
/// Usage errors and bad output paths (`check_output_paths`) exit 1; float values that do not
/// fit float32 exit 2 (`float_option`).
CommonOptions parse_common_options(const ParsedArgs& args);

/// Calls `f(DTypeTag<T>{})` with T = Eigen::half, float, double or Eigen::bfloat16 for `t`
/// (splash and merge, whose inputs share one dtype; paged and ragged use the library's
/// `dispatch_query_and_kv`). Precondition: `t` is one of the four.
template <class F>
int dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16:
      return f(DTypeTag<Eigen::half>{});
    case DType::kBFloat16:
      return f(DTypeTag<Eigen::bfloat16>{});
    case DType::kFloat64:
      return f(DTypeTag<double>{});
    default:
      return f(DTypeTag<float>{});
  }
}

/// Calls `f(DTypeTag<Index>{})` with Index = std::int32_t or std::int64_t. Precondition: `t` is
/// one of the two (the library's index dtype checks passed).
template <class F>
int dispatch_index(DType t, F&& f) {
  if (t == DType::kInt32) return f(DTypeTag<std::int32_t>{});
  return f(DTypeTag<std::int64_t>{});
}

/// The elements of an int32 or int64 array as `Index` (empty for other dtypes).
template <class Index>
std::vector<Index> ints_as(const NpyArray& a) {
  std::vector<Index> out;
  if (const std::int32_t* p = a.data<std::int32_t>()) {
    out.assign(p, p + a.numel());
  } else if (const std::int64_t* p64 = a.data<std::int64_t>()) {
    for (std::int64_t i = 0; i < a.numel(); ++i) out.push_back(static_cast<Index>(p64[i]));
  }
  return out;
}

/// A row-major view of an input. Preconditions: `input.array.dtype == dtype_of<T>` and
/// `input.array.rank() == Rank`. `buffer_size` is set, so `check_view` bounds it.
template <class T, std::size_t Rank>
TensorView<const T, Rank> view_of(const Input& input) {
  std::array<std::int64_t, Rank> extents{};
  for (std::size_t i = 0; i < Rank; ++i) extents[i] = input.array.shape[i];
  return TensorView<const T, Rank>(input.array.data<T>(), extents, input.array.numel());
}

/// The `--kv-layout` option (jax, nhd or hnd; `fallback` when not given; exit 1 otherwise).
KvLayout kv_layout_option(const ParsedArgs& args, KvLayout fallback = KvLayout::kJax);

/// The logical `[num_kv_heads, total_pages, page_size, last]` view of a 4-d page pool (or of its
/// scales) stored in `layout`. Preconditions: rank 4 and dtype `T`.
template <class T>
TensorView<const T, 4> layout_pages_view(const Input& input, KvLayout layout) {
  const std::vector<std::int64_t>& s = input.array.shape;
  return kv_pages_view(input.array.data<T>(), layout, {s[0], s[1], s[2], s[3]},
                       input.array.numel());
}

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

}  // namespace cli
}  // namespace attnref
