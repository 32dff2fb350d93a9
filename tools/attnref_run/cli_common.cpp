// SPDX-License-Identifier: Apache-2.0
// Shared machinery of attnref-run's subcommands (see cli_common.hpp).
#include "cli_common.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>

#include <Eigen/Core>

#include "attnref/validate/paged.hpp"

namespace attnref {
namespace cli {

const OptionSpec kOutOption{"--out", "OUT.npy", "write the result as float32 .npy"};
const OptionSpec kExpectOption{
    "--expect", "EXP.npy",
    "compare the result with this array; exit 3 when it differs, saying where and why"};
const OptionSpec kAtolOption{"--atol", "A",
                             "absolute tolerance of --expect (default by dtype: f16 1e-2, f32 "
                             "1e-5, f64 1e-10)"};
const OptionSpec kRtolOption{"--rtol", "R",
                             "relative tolerance of --expect (same defaults as --atol)"};

const OptionSpec kQDtypeOption{"--q-dtype", "T",
                               "bf16: q holds raw bfloat16 codes (uint16, or |V2 as np.save "
                               "writes ml_dtypes.bfloat16)"};
const OptionSpec kStateDtypeOption{"--state-dtype", "T",
                                   "bf16: out_a and out_b hold raw bfloat16 codes (uint16, or "
                                   "|V2 as np.save writes ml_dtypes.bfloat16)"};
const OptionSpec kKvDtypeOption{"--kv-dtype", "T",
                                "bf16, e4m3 or e5m2: the pages hold raw bfloat16 (uint16 or "
                                "|V2) or fp8 e4m3fn / e5m2 (uint8 or |V1) codes"};

std::string format_error(const Status& status) {
  std::string text =
      std::string("attnref: error[") + error_code_name(status.code()) + "] " + status.message();
  const std::string hint = status.hint();
  if (!hint.empty()) text += "\n" + hint;
  if (status.jax_check()[0] != '\0') text += std::string("\nJAX check ") + status.jax_check();
  return text;
}

std::string format_error(const NpyStatus& status) {
  std::string text =
      std::string("attnref: error[") + error_code_name(status.code()) + "] " + status.message();
  if (!status.hint().empty()) text += "\n" + status.hint();
  return text;
}

std::string format_error(const frontend::Error& error) {
  std::string text = "attnref: error[" + error.code + "] " + error.message;
  if (!error.hint.empty()) text += "\n" + error.hint;
  if (!error.jax_check.empty()) text += "\nJAX check " + error.jax_check;
  return text;
}

frontend::CommonOptions frontend_options(const CommonOptions& o) {
  frontend::CommonOptions f;
  f.profile = o.profile;
  f.data = o.check_data;
  f.sm_scale = o.sm_scale;
  f.soft_cap = o.soft_cap;
  f.mask_value = o.mask_value;
  f.alibi_convention = o.alibi_convention;
  f.soft_cap_order = o.soft_cap_order;
  return f;
}

void fail_status(const Status& status) { throw Exit(kExitValidation, format_error(status)); }

void fail_file(const NpyStatus& status) { throw Exit(kExitUsage, format_error(status)); }

int print_help(const CommandSpec& spec) {
  std::cout << "usage: attnref-run " << spec.name << " " << spec.synopsis << "\n\n"
            << spec.description << "\n\noptions:\n";
  for (const OptionSpec& o : spec.options) {
    std::string left = std::string("  ") + o.name;
    if (o.value_name != nullptr) left += std::string(" ") + o.value_name;
    if (left.size() < 30)
      left.resize(30, ' ');
    else
      left += "\n" + std::string(30, ' ');
    std::cout << left << o.help << "\n";
  }
  std::cout << "  --help                      show this help\n\n"
               "exit status: 0 success, 1 usage or I/O error, 2 validation error, 3 --expect "
               "mismatch\n";
  return kExitOk;
}

ParsedArgs::ParsedArgs(const CommandSpec& spec, int argc, char** argv) : spec_(&spec) {
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      usage_error("unexpected argument '" + arg + "'");
    }
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const OptionSpec* option = find(name);
    if (option == nullptr) usage_error("unknown option " + name);
    for (const auto& g : given_) {
      if (g.first == name) usage_error(name + " is given more than once");
    }
    std::string value;
    if (option->value_name == nullptr) {
      if (eq != std::string::npos) usage_error(name + " takes no value");
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error(name + " needs a value (" + option->value_name + ")");
    }
    if (option->value_name != nullptr && value.empty()) {
      usage_error(name + " needs a non-empty value (" + option->value_name + ")");
    }
    given_.emplace_back(name, value);
  }
}

const OptionSpec* ParsedArgs::find(const std::string& name) const {
  for (const OptionSpec& o : spec_->options)
    if (name == o.name) return &o;
  return nullptr;
}

void ParsedArgs::usage_error(const std::string& problem) const {
  throw Exit(kExitUsage, std::string("attnref-run ") + spec_->name + ": " + problem +
                             "\nusage: attnref-run " + spec_->name + " " + spec_->synopsis +
                             "\n(attnref-run " + spec_->name + " --help for details)");
}

bool ParsedArgs::has(const char* name) const {
  for (const auto& g : given_)
    if (g.first == name) return true;
  return false;
}

std::optional<std::string> ParsedArgs::value(const char* name) const {
  for (const auto& g : given_)
    if (g.first == name) return g.second;
  return std::nullopt;
}

std::string ParsedArgs::required(const char* name) const {
  std::optional<std::string> v = value(name);
  if (!v) usage_error(std::string("missing required option ") + name);
  return *v;
}

std::optional<std::int64_t> ParsedArgs::int64(const char* name) const {
  std::optional<std::string> v = value(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0' || std::isspace(static_cast<unsigned char>((*v)[0]))) {
    usage_error(std::string(name) + " takes an integer; got '" + *v + "'");
  }
  if (errno == ERANGE) usage_error(std::string(name) + " is out of the int64 range: " + *v);
  return static_cast<std::int64_t>(parsed);
}

std::int64_t ParsedArgs::required_int64(const char* name) const {
  required(name);
  return *int64(name);
}

std::optional<double> ParsedArgs::real(const char* name) const {
  std::optional<std::string> v = value(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double parsed = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || std::isspace(static_cast<unsigned char>((*v)[0]))) {
    usage_error(std::string(name) + " takes a number; got '" + *v + "'");
  }
  return parsed;
}

std::string ParsedArgs::choice(const char* name, const std::vector<std::string>& choices,
                               const std::string& fallback) const {
  std::optional<std::string> v = value(name);
  if (!v) return fallback;
  std::string list;
  for (const std::string& c : choices) {
    if (*v == c) return c;
    list += (list.empty() ? "" : ", ") + c;
  }
  usage_error(std::string(name) + " must be one of " + list + "; got '" + *v + "'");
}

namespace {

/// "a FIFO", "a directory", ... for a message about a file that is not a regular file.
std::string file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

/// The directory part of `path` ("." when there is none) and the name in it.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

/// What a path names, for telling whether two options name one file: an existing file by
/// device and inode, a file still to be created by its directory's device and inode and its
/// name. `known` is false when neither can be found out (the open or the write reports it).
struct FileKey {
  bool known = false;
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;
  bool operator==(const FileKey& o) const {
    return known && o.known && exists == o.exists && dev == o.dev && ino == o.ino && name == o.name;
  }
};

FileKey file_key(const std::string& path, struct stat* st) {
  FileKey key;
  const bool found = ::stat(path.c_str(), st) == 0;
  const int error = errno;
  if (found) {
    key.known = key.exists = true;
    key.dev = st->st_dev;
    key.ino = st->st_ino;
    return key;
  }
  struct stat dir {};
  const std::pair<std::string, std::string> parts = split_path(path);
  if (error == ENOENT && ::stat(parts.first.c_str(), &dir) == 0) {
    key.known = true;
    key.dev = dir.st_dev;
    key.ino = dir.st_ino;
    key.name = parts.second;
  }
  return key;
}

/// True for the options that name an output file: --out and --<name>-out.
bool is_output_option(const std::string& name) {
  return name == "--out" || (name.size() > 4 && name.compare(name.size() - 4, 4, "-out") == 0);
}

}  // namespace

Input load_input(const ParsedArgs& args, const char* option, bool required) {
  Input input;
  input.option = option;
  std::optional<std::string> path = args.value(option);
  if (!path) {
    if (required) args.usage_error(std::string("missing required option ") + option);
    return input;
  }
  input.path = *path;
  // Opened without blocking (a FIFO with no writer would block in a plain open) and refused
  // unless it is a regular file; the descriptor stays open while read_npy reads the path, and
  // the file read must be the one checked.
  const int fd = ::open(input.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    fail_file(NpyStatus(input.path, std::string("cannot open: ") + std::strerror(errno),
                        "check the path and the file's permissions"));
  }
  struct stat checked {};
  const bool regular = ::fstat(fd, &checked) == 0 && S_ISREG(checked.st_mode);
  if (!regular) {
    ::close(fd);
    fail_file(NpyStatus(
        input.path,
        std::string(option) + " names " + file_kind(checked.st_mode) + ", not a regular file",
        "attnref-run reads .npy inputs from regular files only (never from a "
        "pipe or a device); save the array to a file"));
  }
  const NpyStatus s = read_npy(input.path, &input.array);
  struct stat now {};
  const bool same = ::stat(input.path.c_str(), &now) == 0 && now.st_dev == checked.st_dev &&
                    now.st_ino == checked.st_ino;
  ::close(fd);
  if (!s.ok() && !s.unread_dtype().empty()) {
    // A well-formed file of a dtype attnref does not read is the argument's dtype error, as
    // in the Python module (exit 2), not a bad file.
    std::string name = std::string(option).substr(2);
    std::replace(name.begin(), name.end(), '-', '_');
    throw Exit(kExitValidation,
               "attnref: error[dtype_not_supported] " + name + " has dtype " + s.unread_dtype() +
                   ", which attnref does not read\nattnref-run reads .npy files of float16, "
                   "float32, float64, int8, int32, int64 and bool, and raw bfloat16 and fp8 "
                   "codes (uint16 or |V2, uint8 or |V1) with --q-dtype and --kv-dtype");
  }
  if (!s.ok()) fail_file(s);
  if (!same) {
    fail_file(NpyStatus(input.path, "the file was replaced while being read",
                        "run again once nothing else writes to the path"));
  }
  return input;
}

std::optional<float> float_option(const ParsedArgs& args, const char* option, ErrorCode code) {
  const std::optional<double> parsed = args.real(option);  // the syntax check (exit 1)
  if (!parsed) return std::nullopt;
  const std::string text = *args.value(option);
  // strtod again for its range verdict: ERANGE with an infinity is a finite number past double.
  errno = 0;
  const double d = std::strtod(text.c_str(), nullptr);
  const bool range_error = errno == ERANGE;
  const bool past_double = range_error && std::isinf(d);
  const auto f = static_cast<float>(d);
  const std::string head =
      std::string("attnref: error[") + error_code_name(code) + "] " + option + " " + text + " ";
  if (past_double || (std::isfinite(d) && std::isinf(f))) {
    throw Exit(kExitValidation,
               head + "is outside the float32 range (it would become " + (d < 0 ? "-inf" : "inf") +
                   ")\nthe kernels take it as float32, whose largest finite magnitude is "
                   "3.4028235e+38");
  }
  // A zero with ERANGE is a non-zero number past double's smallest.
  if (f == 0.0f && (d != 0.0 || range_error)) {
    throw Exit(kExitValidation,
               head +
                   "underflows to 0 in float32\nthe kernels take it as float32, whose "
                   "smallest non-zero magnitude is about 1.4e-45; give 0 if you mean 0");
  }
  return f;
}

void check_output_paths(const ParsedArgs& args) {
  struct Named {
    std::string option, path;
    FileKey key;
  };
  std::vector<Named> inputs, outputs;
  for (const OptionSpec& o : args.spec().options) {
    const std::optional<std::string> path = args.value(o.name);
    if (!path || o.value_name == nullptr) continue;
    const std::string value_name = o.value_name;
    if (is_output_option(o.name)) {
      struct stat st {};
      Named n{o.name, *path, file_key(*path, &st)};
      if (n.key.exists && !S_ISREG(st.st_mode)) {
        fail_file(NpyStatus(*path,
                            n.option + " names " + file_kind(st.st_mode) + ", not a regular file",
                            "attnref-run writes outputs to regular files only (a temporary file "
                            "renamed onto the path); name a file"));
      }
      outputs.push_back(std::move(n));
    } else if (value_name.size() > 4 && value_name.compare(value_name.size() - 4, 4, ".npy") == 0) {
      struct stat st {};
      Named n{o.name, *path, file_key(*path, &st)};
      if (n.key.exists) inputs.push_back(std::move(n));
    }
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Named& out = outputs[i];
    for (const Named& in : inputs) {
      if (!(out.key == in.key)) continue;
      throw Exit(kExitUsage, "attnref: error[bad_file] " + out.path + ": " + out.option +
                                 " names the same file as " + in.option + " (" + in.path +
                                 ")\nan output must not replace an input: write " + out.option +
                                 " to another file");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (!(out.key == outputs[j].key)) continue;
      throw Exit(kExitUsage, "attnref: error[bad_file] " + out.path + ": " + outputs[j].option +
                                 " and " + out.option + " name the same file" +
                                 "\ngive each output its own file");
    }
  }
}

std::vector<OptionSpec> with_common_options(std::vector<OptionSpec> own) {
  static const OptionSpec kCommon[] = {
      {"--soft-cap", "C", "soft cap c: logits become c * tanh(x / c)"},
      {"--alibi-slopes", "A.npy",
       "ALiBi slopes [num_q_heads] (float): logits + slope * (key - query position), after the "
       "soft cap"},
      {"--alibi-convention", "C",
       "signed (default): slope * (key - query); absolute: -slope * |key - query|, as "
       "FlashAttention-2 without a causal mask"},
      {"--soft-cap-order", "O",
       "cap_then_alibi (default): cap(x) + bias; alibi_then_cap: cap(x + bias), as FlashInfer"},
      {"--mask-value", "M", "JAX's additive mask value (default -2.3819763e+38)"},
      {"--sm-scale", "S", "scale of q.k (default 1.0)"},
      {"--profile", "P", "jax or reference (default reference)"},
      {"--check-only", nullptr, "validate only and print ok"},
      {"--check-data", nullptr,
       "also scan what the kernel reads for NaN/Inf (the data tier) and report where"},
      kOutOption,
      kExpectOption,
      kAtolOption,
      kRtolOption,
  };
  own.insert(own.end(), std::begin(kCommon), std::end(kCommon));
  return own;
}

CommonOptions parse_common_options(const ParsedArgs& args) {
  CommonOptions o;
  o.mask_value = kDefaultMaskValue;
  o.profile = args.choice("--profile", {"jax", "reference"}, "reference") == "jax"
                  ? Profile::kJax
                  : Profile::kReference;
  o.check_only = args.has("--check-only");
  o.alibi_convention = *frontend::alibi_convention_named(
      args.choice("--alibi-convention", {"signed", "absolute"}, "signed"));
  o.soft_cap_order = *frontend::soft_cap_order_named(
      args.choice("--soft-cap-order", {"cap_then_alibi", "alibi_then_cap"}, "cap_then_alibi"));
  o.check_data = args.has("--check-data");
  if (o.check_only) {
    // The result options this subcommand has.
    std::vector<std::string> results;
    bool given = false;
    for (const char* name : {"--out", "--lse-out", "--expect", "--dout"}) {
      for (const OptionSpec& spec : args.spec().options) {
        if (std::strcmp(spec.name, name) != 0) continue;
        results.emplace_back(name);
        given = given || args.has(name);
      }
    }
    if (given) {
      std::string list;
      if (results.size() == 2) {
        list = "neither " + results[0] + " nor " + results[1];
      } else {
        list = "no ";
        for (std::size_t i = 0; i < results.size(); ++i) {
          list += (i == 0 ? "" : (i + 1 == results.size() ? " or " : ", ")) + results[i];
        }
      }
      args.usage_error("--check-only runs nothing, so it takes " + list);
    }
  }
  check_result_options(args);
  check_output_paths(args);
  // After the usage checks (exit 1), which come first.
  o.soft_cap = float_option(args, "--soft-cap", ErrorCode::kInvalidSoftCap);
  o.mask_value =
      float_option(args, "--mask-value", ErrorCode::kInvalidMaskValue).value_or(kDefaultMaskValue);
  o.sm_scale = float_option(args, "--sm-scale", ErrorCode::kInvalidScale).value_or(1.0f);
  return o;
}

DType dtype_option(const ParsedArgs& args, const char* option) {
  const bool kv = std::strcmp(option, "--kv-dtype") == 0;
  const std::string t =
      kv ? args.choice(option, {"bf16", "e4m3", "e5m2"}, "") : args.choice(option, {"bf16"}, "");
  if (t == "bf16") return DType::kBFloat16;
  if (t == "e4m3") return DType::kFloat8E4M3FN;
  if (t == "e5m2") return DType::kFloat8E5M2;
  return DType::kUnknown;
}

frontend::Array to_array(const Input& input, const char* name) {
  frontend::Array a;
  a.name = name;
  if (!input.present()) return a;
  a.given = true;
  a.dtype = input.array.dtype;
  a.shape = input.array.shape;
  a.data = input.array.bytes.data();
  a.buffer_size = input.array.numel();
  return a;
}

Status apply_dtype_option(frontend::Array* array, DType as, const char* option) {
  const DType t = array->dtype;
  const char* name = array->name.c_str();
  const bool raw8 = t == DType::kUInt8 || t == DType::kVoid8;
  const bool raw16 = t == DType::kUInt16 || t == DType::kVoid16;
  const bool q = std::strcmp(option, "--q-dtype") == 0;
  const bool state = std::strcmp(option, "--state-dtype") == 0;  // merge's out_a and out_b
  const Status::Ints ints{static_cast<std::int64_t>(t), static_cast<std::int64_t>(as)};
  if (as == DType::kUnknown) {
    if (!raw8 && !raw16) return Status();
    const char* hint =
        "np.save writes ml_dtypes' bfloat16 arrays as |V2 and its float8 arrays as |V1; the "
        "option names what the codes are";
    if ((q || state) && raw16) {
      return Status(ErrorCode::kDtypeNotSupported, "",
                    q ? "{f} has dtype {d0}: raw 16-bit codes; pass --q-dtype bf16 if they are "
                        "bfloat16"
                      : "{f} has dtype {d0}: raw 16-bit codes; pass --state-dtype bf16 if they "
                        "are bfloat16",
                    hint, ints, {}, name);
    }
    if (q || state) {
      return Status(ErrorCode::kDtypeNotSupported, "",
                    q ? "{f} has dtype {d0}: raw 8-bit codes; queries are float16, float32, "
                        "float64 or bfloat16 (--q-dtype bf16 with uint16 or |V2 codes)"
                      : "{f} has dtype {d0}: raw 8-bit codes; states are float16, float32, "
                        "float64 or bfloat16 (--state-dtype bf16 with uint16 or |V2 codes)",
                    hint, ints, {}, name);
    }
    if (raw16) {
      return Status(ErrorCode::kDtypeNotSupported, "",
                    "{f} has dtype {d0}: raw 16-bit codes; pass --kv-dtype bf16 if they are "
                    "bfloat16",
                    hint, ints, {}, name);
    }
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "{f} has dtype {d0}: raw 8-bit codes; pass --kv-dtype e4m3 or --kv-dtype e5m2 "
                  "if they are fp8 (float8_e4m3fn or float8_e5m2)",
                  hint, ints, {}, name);
  }
  const bool wants16 = as == DType::kBFloat16;
  if (wants16 ? !raw16 : !raw8) {
    const char* hint = wants16 ? "save the bfloat16 array itself (|V2) or x.view(numpy.uint16); "
                                 "drop the option for float16/float32/float64 arrays"
                               : "save the float8 array itself (|V1) or x.view(numpy.uint8); "
                                 "drop --kv-dtype for float or int8 pages";
    if (q || state) {
      return Status(ErrorCode::kDtypeNotSupported, "",
                    q ? "--q-dtype bf16 reads raw 16-bit codes (uint16 or |V2), but {f} has "
                        "dtype {d0}"
                      : "--state-dtype bf16 reads raw 16-bit codes (uint16 or |V2), but {f} has "
                        "dtype {d0}",
                    hint, ints, {}, name);
    }
    if (wants16) {
      return Status(ErrorCode::kDtypeNotSupported, "",
                    "--kv-dtype bf16 reads raw 16-bit codes (uint16 or |V2), but {f} has dtype "
                    "{d0}",
                    hint, ints, {}, name);
    }
    return Status(ErrorCode::kDtypeNotSupported, "",
                  as == DType::kFloat8E4M3FN
                      ? "--kv-dtype e4m3 reads raw 8-bit codes (uint8 or |V1), but {f} has dtype "
                        "{d0}"
                      : "--kv-dtype e5m2 reads raw 8-bit codes (uint8 or |V1), but {f} has dtype "
                        "{d0}",
                  hint, ints, {}, name);
  }
  array->dtype = as;  // the bytes are the codes: only the tag changes
  return Status();
}

KvLayout kv_layout_option(const ParsedArgs& args, KvLayout fallback) {
  KvLayout layout = fallback;
  parse_kv_layout(args.choice("--kv-layout", {"jax", "nhd", "hnd"}, to_string(fallback)).c_str(),
                  &layout);
  return layout;
}

Tolerance default_tolerance(DType output_dtype) {
  switch (output_dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return {1e-2, 1e-2};
    case DType::kFloat64:
      return {1e-10, 1e-10};
    default:
      return {1e-5, 1e-5};
  }
}

Comparison compare(const std::vector<double>& got, const std::vector<double>& expected,
                   Tolerance tol) {
  Comparison c;
  c.count = static_cast<std::int64_t>(got.size());
  for (std::size_t i = 0; i < got.size() && i < expected.size(); ++i) {
    const double g = got[i], e = expected[i];
    const auto index = static_cast<std::int64_t>(i);
    bool match;
    double abs_err, rel_err;
    if (!std::isfinite(g) || !std::isfinite(e)) {
      match = (std::isnan(g) && std::isnan(e)) || g == e;
      abs_err = rel_err = match ? 0.0 : INFINITY;
    } else {
      abs_err = std::fabs(g - e);
      rel_err = e != 0.0 ? abs_err / std::fabs(e) : (abs_err == 0.0 ? 0.0 : INFINITY);
      match = abs_err <= tol.atol + tol.rtol * std::fabs(e);
    }
    if (c.max_abs_index < 0 || abs_err > c.max_abs) {
      c.max_abs = abs_err;
      c.max_abs_index = index;
    }
    if (c.max_rel_index < 0 || rel_err > c.max_rel) {
      c.max_rel = rel_err;
      c.max_rel_index = index;
    }
    if (!match) {
      ++c.mismatches;
      if (c.first_mismatch < 0) c.first_mismatch = index;
    }
  }
  return c;
}

std::string index_string(std::int64_t flat, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] > 0) {
      idx[i] = flat % shape[i];
      flat /= shape[i];
    }
  }
  std::string s = "[";
  for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + "]";
}

std::vector<double> to_doubles(const NpyArray& array) {
  std::vector<double> out;
  const auto n = static_cast<std::size_t>(array.numel());
  out.reserve(n);
  if (const float* p = array.data<float>()) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<double>(p[i]));
  } else if (const double* pd = array.data<double>()) {
    out.assign(pd, pd + n);
  } else if (const Eigen::half* ph = array.data<Eigen::half>()) {
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(static_cast<double>(static_cast<float>(ph[i])));
  }
  return out;
}

namespace {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

Tolerance tolerance_of(const ParsedArgs& args, Tolerance tol) {
  if (std::optional<double> a = args.real("--atol")) tol.atol = *a;
  if (std::optional<double> r = args.real("--rtol")) tol.rtol = *r;
  if (!(tol.atol >= 0.0) || !(tol.rtol >= 0.0)) {
    args.usage_error("--atol and --rtol must be non-negative numbers");
  }
  return tol;
}

}  // namespace

void check_result_options(const ParsedArgs& args) {
  if (!args.has("--expect") && (args.has("--atol") || args.has("--rtol"))) {
    args.usage_error("--atol and --rtol need --expect");
  }
  tolerance_of(args, Tolerance{0.0, 0.0});
}

namespace {

/// Loads a float array named by `option` and checks its shape against `shape`.
Input load_float_of_shape(const ParsedArgs& args, const char* option,
                          const std::vector<std::int64_t>& shape) {
  Input expect = load_input(args, option, false);
  if (!expect.present()) return expect;
  const DType t = expect.array.dtype;
  if (t != DType::kFloat16 && t != DType::kFloat32 && t != DType::kFloat64) {
    throw Exit(kExitUsage, std::string("attnref: error[bad_file] ") + expect.path + ": " + option +
                               " has dtype " + dtype_name(t) + "; it must be a float array" +
                               "\nsave the expected output as float16, float32 or float64");
  }
  if (expect.array.shape != shape) {
    throw Exit(kExitUsage, std::string("attnref: error[bad_file] ") + expect.path + ": " + option +
                               " has shape " + shape_string(expect.array.shape) +
                               "; the result has shape " + shape_string(shape) +
                               "\nthe expected array must have the result's shape");
  }
  return expect;
}

}  // namespace

Input load_expect(const ParsedArgs& args, const std::vector<std::int64_t>& shape) {
  check_result_options(args);
  return load_float_of_shape(args, "--expect", shape);
}

const OptionSpec kExpectLseOption{
    "--expect-lse", "LSE.npy",
    "compare the natural logsumexp too (with --expect; shape of --lse-out)"};
const OptionSpec kIgnorePaddingOption{
    "--ignore-padding", nullptr,
    "with --expect: leave padding rows (no query or no key) out of the comparison"};

Input load_expect_lse(const ParsedArgs& args, const std::vector<std::int64_t>& shape) {
  for (const char* option : {"--expect-lse", "--ignore-padding"}) {
    if (args.has(option) && !args.has("--expect"))
      args.usage_error(std::string(option) + " needs --expect");
  }
  return load_float_of_shape(args, "--expect-lse", shape);
}

namespace {

/// The option for a field of the args: "soft_cap" -> "--soft-cap".
std::string flag_of(const std::string& field) {
  std::string flag = "--" + field;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace

std::string reproduce_options(const compare::Reproduce& r) {
  using K = compare::Reproduce::Kind;
  switch (r.kind) {
    case K::kSet:
      if (r.field == "local_left") return "--local LEFT,RIGHT with LEFT " + r.value;
      return flag_of(r.field) + " " + r.value;
    case K::kUnset:
      return "no " + flag_of(r.field);
    case K::kEnable:
      return flag_of(r.field);
    case K::kSwap:
      if (r.other.empty()) return "swapping K and V in the combined pool";
      return "swapping " + flag_of(r.field) + " and " + flag_of(r.other) +
             (r.value == "scales" ? " (and their scales)" : "");
    case K::kInterleaveQueryHeads:
      return flag_of(r.field) +
             " with its heads reordered (head h * group + g := query head g * num_kv_heads + "
             "h) and the output's heads put back";
    case K::kRelayout: {
      const std::size_t slash = r.other.find('/');
      const std::string inputs =
          slash == std::string::npos
              ? flag_of(r.other)
              : flag_of(r.other.substr(0, slash)) + "/" + flag_of(r.other.substr(slash + 1));
      return flag_of(r.field) + " " + r.value + " with " + inputs +
             " reshaped (same bytes) to the " + r.value + " shape";
    }
    case K::kShiftEach:
      return flag_of(r.field) + " with each length " + r.value.substr(0, 1) + " " +
             r.value.substr(1);
    case K::kQueryLengths:
      return flag_of(r.field) + " set to each sequence's query length";
    case K::kLseLog2:
      return "--lse-out, divided by ln 2";
    case K::kNone:
      break;
  }
  return "";
}

compare::Options compare_options(const ParsedArgs& args, Tolerance tol) {
  compare::Options o;
  const Tolerance t = tolerance_of(args, tol);
  o.tol = compare::Tolerance{t.atol, t.rtol};
  o.ignore_padding = args.has("--ignore-padding");
  return o;
}

OutputFiles::~OutputFiles() {
  for (const Staged& f : staged_) ::unlink(f.temp.c_str());
}

void OutputFiles::stage(const std::string& path, const std::vector<std::int64_t>& shape,
                        const std::vector<double>& values, std::string note) {
  // Past `ulimit -f` a write fails with EFBIG instead of the process dying of SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  std::vector<float> f32(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) f32[i] = static_cast<float>(values[i]);
  std::vector<unsigned char> bytes;
  NpyStatus s = encode_npy(make_npy_array<float>(shape, f32.data()), &bytes, path);
  if (!s.ok()) fail_file(s);
  // A symlink is written through: the rename replaces the file it points to.
  std::string target = path;
  struct stat entry {};
  if (::lstat(path.c_str(), &entry) == 0 && S_ISLNK(entry.st_mode)) {
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      target = real;
      std::free(real);
    }
  }
  const std::pair<std::string, std::string> parts = split_path(target);
  std::string temp = parts.first + "/." + parts.second + ".tmp-XXXXXX";
  const int fd = ::mkstemp(&temp[0]);
  if (fd < 0) {
    fail_file(NpyStatus(path, std::string("cannot create: ") + std::strerror(errno),
                        "check that the directory exists and is writable"));
  }
  staged_.push_back({temp, target, path, std::move(note)});
  // The mode a plain create would give: the old file's, else 0666 less the umask.
  struct stat old {};
  mode_t mode = 0;
  if (::stat(target.c_str(), &old) == 0) {
    mode = old.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  int error = ::fchmod(fd, mode) == 0 ? 0 : errno;
  for (std::size_t done = 0; error == 0 && done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno != EINTR) error = errno;
    } else {
      done += static_cast<std::size_t>(n);
    }
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    fail_file(NpyStatus(
        path,
        std::string("cannot write: ") + std::strerror(error) + "; nothing was written to the path",
        "check the free space and the file size limit (ulimit -f)"));
  }
}

void OutputFiles::commit() {
  for (std::size_t i = 0; i < staged_.size(); ++i) {
    if (::rename(staged_[i].temp.c_str(), staged_[i].target.c_str()) != 0) {
      const int error = errno;
      const std::string path = staged_[i].path;
      // The renamed ones are in place; the destructor removes the rest.
      staged_.erase(staged_.begin(), staged_.begin() + static_cast<std::ptrdiff_t>(i));
      fail_file(NpyStatus(path, std::string("cannot replace: ") + std::strerror(error),
                          "check that the directory is writable"));
    }
    std::cout << staged_[i].note << "\n";
  }
  staged_.clear();
}

void stage_option_output(const ParsedArgs& args, OutputFiles* outputs, const char* option,
                         const std::vector<std::int64_t>& shape,
                         const std::vector<double>& values) {
  const std::optional<std::string> path = args.value(option);
  if (!path) return;
  outputs->stage(*path, shape, values,
                 "wrote " + *path + " (float32, " + std::string(option + 2) + ", shape " +
                     shape_string(shape) + ")");
}

int finish_output(const ParsedArgs& args, const std::vector<std::int64_t>& shape,
                  const std::vector<double>& values, const Input& expect, Tolerance tol,
                  OutputFiles* outputs, const ExplainMismatch& explain) {
  OutputFiles own;
  OutputFiles& files = outputs != nullptr ? *outputs : own;
  if (std::optional<std::string> out_path = args.value("--out")) {
    files.stage(*out_path, shape, values,
                "wrote " + *out_path + " (float32, shape " + shape_string(shape) + ")");
  }
  files.commit();
  if (expect.present()) {
    tol = tolerance_of(args, tol);
    const std::vector<double> expected = to_doubles(expect.array);
    const Comparison c = compare(values, expected, tol);
    const std::string tolerances = "atol " + number(tol.atol) + ", rtol " + number(tol.rtol);
    const std::string errors =
        "max abs error: " + number(c.max_abs) +
        (c.max_abs_index >= 0 ? " at " + index_string(c.max_abs_index, shape) : "") +
        "\nmax rel error: " + number(c.max_rel) +
        (c.max_rel_index >= 0 ? " at " + index_string(c.max_rel_index, shape) : "");
    std::optional<compare::Report> report;
    // The report re-runs the reference: only when it can say something.
    if (explain && (c.mismatches > 0 || args.has("--expect-lse"))) report = explain(tol);
    if (report ? !report->ok() : c.mismatches > 0) {
      std::string text;
      if (c.mismatches > 0) {
        const auto i = static_cast<std::size_t>(c.first_mismatch);
        text = "attnref: mismatch: " + std::to_string(c.mismatches) + " of " +
               std::to_string(c.count) + " elements differ from " + expect.path + " beyond " +
               tolerances + "\n" + errors + "\nmismatches: " + std::to_string(c.mismatches) +
               "\nfirst mismatch: " + index_string(c.first_mismatch, shape) + ": got " +
               number(values[i]) + ", expected " + number(expected[i]);
      } else {
        text = "attnref: mismatch: the output matches " + expect.path + " within " + tolerances +
               " but not everywhere the report compares";
      }
      if (report) {
        if (report->lse_mismatches > 0) {
          text += "\nlogsumexp mismatches: " + std::to_string(report->lse_mismatches) +
                  " (max abs error " + number(report->lse_max_abs) + ")";
        }
        std::string causes = compare::format_causes(*report, reproduce_options);
        if (!causes.empty() && causes.back() == '\n') causes.pop_back();
        text += "\n" + causes;
      }
      throw Exit(kExitMismatch, text);
    }
    std::cout << "match: " << c.count << " elements within " << tolerances << " of " << expect.path
              << "\n"
              << errors << "\n";
    if (report && c.mismatches > 0) {
      std::cout << "ignored: " << report->ignored_padding
                << " padding values (--ignore-padding); the other elements match\n";
    }
  }
  if (!args.has("--out") && !expect.present()) {
    std::cout << "ok (no --out or --expect given: the result was computed and discarded)\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace attnref
