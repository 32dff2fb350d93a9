// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of attnref-run's command line. attnref-run's subcommands are plain
// functions, `int run_<name>(int argc, char** argv)` (tools/attnref_run/cmd_*.cpp), that parse
// their arguments with cli::ParsedArgs and end with cli::Exit; main.cpp only dispatches and
// prints. So the harness calls the subcommands (and ParsedArgs itself) directly, in-process,
// with an argv built from the fuzz bytes: tokens from a dictionary (every option name, in the
// `--name value` and `--name=value` forms, hostile numbers, layout and profile names, names of
// .npy files) mixed with raw byte strings.
//
// Sandbox: the process works in a private temporary directory holding a small pool of .npy
// files (a consistent paged call in several dtypes, plus hostile ones). Tokens never contain
// '/', so every path a subcommand opens or writes (--out) stays in that directory; files a run
// creates are deleted after it. stdout is discarded.
//
// Widened draws: a second byte (after the command byte; 0 decodes as before it existed) adds
// files and values to the dictionaries: int64 .npy metadata past int32 (lengths, page indices,
// kv_lens, cu_q_lens, num_seqs), arrays with a zero extent next to extents of 2^34 or 2^40,
// 65536 query heads with 65536 1x1 mask heads, and option values such as 1e39, 1e-40 (denormal
// in float32), 2^32 and 2^40.
//
// Invariants: a subcommand returns 0 or ends with cli::Exit carrying exit code 1, 2 or 3 and a
// non-empty text; no other exception escapes (main.cpp would turn one into exit 1, but here it
// means a parsing path that forgot to validate: std::out_of_range, std::length_error, ...);
// work proportional to input bytes: a subcommand's allocations stay within the BudgetScope
// budget (fuzz_common.hpp) of the bytes of the files it may read plus what it may write.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <attnref/core/error.hpp>
#include <attnref/io/npy.hpp>

#include "cli_common.hpp"
#include "fuzz_common.hpp"

namespace attnref {
namespace cli {
int run_config(int argc, char** argv);
int run_paged(int argc, char** argv);
#if defined(ATTNREF_FUZZ_HAVE_SPLASH_CMD)
int run_splash(int argc, char** argv);
#endif
#if defined(ATTNREF_FUZZ_HAVE_RAGGED_CMD)
int run_ragged(int argc, char** argv);
#endif
#if defined(ATTNREF_FUZZ_HAVE_MERGE_CMD)
int run_merge(int argc, char** argv);
#endif
}  // namespace cli
}  // namespace attnref

namespace {

using attnref::make_npy_array;
using attnref::write_npy;

std::set<std::string>& pool_files() {
  static std::set<std::string> files;
  return files;
}

template <class T>
void put(const std::string& name, std::vector<std::int64_t> shape, const std::vector<T>& values) {
  const attnref::NpyStatus s = write_npy(name, make_npy_array<T>(std::move(shape), values.data()));
  if (!s.ok()) attnref_fuzz::fail("cannot write the fuzz pool", s.message());
  pool_files().insert(name);
}

/// The pool: one consistent paged call (Hkv 2, Hq 4, D 8, 6 pages of 4 tokens) in f32, f16,
/// f64 and int8 with scales, NHD pages, int32 and int64 indices, and hostile files.
void write_pool() {
  const std::int64_t B = 2, Hq = 4, Hkv = 2, D = 8, P = 6, S = 4;
  std::vector<float> q(B * Hq * D), k(Hkv * P * S * D), v(k.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) / 8.0f - 0.3f;
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 5) / 4.0f - 0.5f;
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 3) - 1.0f;
  put<float>("q", {B, Hq, D}, q);
  put<float>("k", {Hkv, P, S, D}, k);
  put<float>("v", {Hkv, P, S, D}, v);
  put<float>("kn", {P, S, Hkv, D}, k);  // the same pool read as nhd
  put<float>("e", {B, Hq, D}, std::vector<float>(q.size(), 0.0f));
  std::vector<float> nan_pages(k.size(), std::numeric_limits<float>::quiet_NaN());
  put<float>("knan", {Hkv, P, S, D}, nan_pages);
  std::vector<double> q64(q.begin(), q.end()), k64(k.begin(), k.end()), v64(v.begin(), v.end());
  put<double>("q64", {B, Hq, D}, q64);
  put<double>("k64", {Hkv, P, S, D}, k64);
  put<double>("v64", {Hkv, P, S, D}, v64);
  std::vector<Eigen::half> q16(q.size()), k16(k.size());
  for (std::size_t i = 0; i < q.size(); ++i) q16[i] = Eigen::half(q[i]);
  for (std::size_t i = 0; i < k.size(); ++i) k16[i] = Eigen::half(k[i]);
  put<Eigen::half>("q16", {B, Hq, D}, q16);
  put<Eigen::half>("k16", {Hkv, P, S, D}, k16);
  std::vector<std::int8_t> k8(k.size());
  for (std::size_t i = 0; i < k8.size(); ++i) k8[i] = static_cast<std::int8_t>(i % 255 - 127);
  put<std::int8_t>("k8", {Hkv, P, S, D}, k8);
  put<float>("ks", {Hkv, P, S, 1}, std::vector<float>(Hkv * P * S, 0.5f));
  put<float>("ksd", {Hkv, P, S, D}, std::vector<float>(k.size(), 0.25f));
  put<std::int32_t>("l", {B}, {5, 0});
  put<std::int32_t>("p", {B, 3}, {1, 2, -1, -1, -1, -1});
  put<std::int64_t>("l64", {B}, {5, 0});
  put<std::int64_t>("p64", {B, 3}, {1, 2, -1, -1, -1, -1});
  put<std::int32_t>("lbad", {B}, {13, -1});
  put<std::int32_t>("pbad", {B, 3}, {6, std::numeric_limits<std::int32_t>::max(), -1, -1, 0, 0});
  put<std::int32_t>("l3", {3}, {1, 1, 1});
  put<std::int32_t>("p0", {B, 0}, {});
  put<float>("q0", {0, Hq, D}, {});
  put<std::int32_t>("lz", {0}, {});
  put<std::int32_t>("pz", {0, 3}, {});
  put<float>("k0", {Hkv, 0, S, D}, {});
  bool mask[64];
  for (int i = 0; i < 64; ++i) mask[i] = (i % 9) != 3;
  if (!write_npy("mask", make_npy_array<bool>({1, 8, 8}, mask)).ok()) attnref_fuzz::fail("pool");
  pool_files().insert("mask");
  put<double>("scalar", {}, {1.0});
  // Ragged: q above as [T=2, Hq=4, D=8]; combined K/V pages [P, S, 2 * Hkv, D].
  std::vector<float> kvp(P * S * 2 * Hkv * D);
  for (std::size_t i = 0; i < kvp.size(); ++i) kvp[i] = static_cast<float>(i % 9) / 8.0f - 0.5f;
  put<float>("kvp", {P, S, 2 * Hkv, D}, kvp);
  put<std::int32_t>("kvl", {3}, {5, 2, 0});
  put<std::int32_t>("cu", {4}, {0, 1, 2, 2});
  put<std::int32_t>("cubad", {4}, {0, 2, 1, 2});
  put<std::int32_t>("ns", {1}, {2});
  put<std::int32_t>("nsbad", {1}, {4});
  put<std::int32_t>("rp", {3, 2}, {1, 2, 0, -1, -1, -1});
  // Merge: q, e, q16 and q64 above are [B, Hq, D] states; their logsumexps [B, Hq] float32
  // (an empty state, -inf, and NaN among them).
  const float inf = std::numeric_limits<float>::infinity();
  put<float>("lse", {B, Hq}, {0.5f, -inf, 2.0f, 0.0f, -1.0f, -inf, 88.0f, -88.0f});
  put<float>("lsen", {B, Hq},
             {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f});
  // Widened pool (only the Wide dictionaries name these).
  constexpr std::int64_t k32 = std::int64_t{1} << 32, k34 = std::int64_t{1} << 34;
  constexpr std::int64_t k40 = std::int64_t{1} << 40;
  put<std::int64_t>("l64big", {B}, {k32 + 5, 0});
  put<std::int64_t>("p64big", {B, 3}, {k32 + 1, 1, -1, -1, -1, -1});
  put<std::int64_t>("kvl64big", {3}, {k32 + 5, 2, 0});
  put<std::int64_t>("cu64big", {4}, {0, k32, k32, k32});
  put<std::int64_t>("ns64big", {1}, {k32 + 1});
  put<std::int64_t>("rp64big", {3, 2}, {k32, 2, 0, -1, -1, -1});
  put<std::int64_t>("cu64", {4}, {0, 1, 2, 2});
  put<std::int64_t>("kvl64", {3}, {5, 2, 0});
  put<std::int64_t>("ns64", {1}, {2});
  put<float>("q0huge", {0, k40, D}, {});
  put<float>("qhuge0", {k34, Hq, 0}, {});
  put<float>("k0huge", {k40, 0, S, D}, {});
  put<float>("kvp0huge", {0, k40, 2 * Hkv, D}, {});
  put<std::int32_t>("pzhuge", {0, k40}, {});
  put<float>("sq0huge", {k34, 0, D}, {});
  put<float>("sk0huge", {k34, 0, D}, {});
  put<float>("sk0", {1, 0, D}, {});
  const std::int64_t many = 65536;
  std::vector<float> qm(static_cast<std::size_t>(many * 2));
  for (std::size_t i = 0; i < qm.size(); ++i) qm[i] = static_cast<float>(i % 5) / 4.0f - 0.5f;
  put<float>("qmany", {many, 1, 2}, qm);
  put<float>("kmany1", {1, 1, 2}, {0.5f, -0.25f});
  put<float>("sinksmany", {many}, std::vector<float>(static_cast<std::size_t>(many), 0.5f));
  {
    std::vector<unsigned char> mm(static_cast<std::size_t>(many));
    for (std::size_t i = 0; i < mm.size(); ++i) mm[i] = static_cast<unsigned char>(i % 3 != 0);
    std::unique_ptr<bool[]> mb(new bool[mm.size()]);
    for (std::size_t i = 0; i < mm.size(); ++i) mb[i] = mm[i] != 0;
    if (!write_npy("maskmany", make_npy_array<bool>({many, 1, 1}, mb.get())).ok())
      attnref_fuzz::fail("pool");
    pool_files().insert("maskmany");
  }
  // Raw codes (bf16 and fp8 dumps): uint8 and |V1 fp8 pages (NaN codes included), |V2 and
  // uint16 bfloat16 q and pages, read with --q-dtype / --kv-dtype.
  {
    std::vector<std::uint8_t> codes(k.size());
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 37);
    std::vector<std::uint16_t> q_bits(q.size()), k_bits(k.size());
    for (std::size_t i = 0; i < q.size(); ++i)
      std::memcpy(&q_bits[i], reinterpret_cast<const char*>(&q[i]) + 2, 2);
    for (std::size_t i = 0; i < k.size(); ++i)
      std::memcpy(&k_bits[i], reinterpret_cast<const char*>(&k[i]) + 2, 2);
    const struct {
      const char* name;
      attnref::DType dtype;
      std::vector<std::int64_t> shape;
      const void* data;
    } raw[] = {{"k8u", attnref::DType::kUInt8, {Hkv, P, S, D}, codes.data()},
               {"k8v", attnref::DType::kVoid8, {Hkv, P, S, D}, codes.data()},
               {"q16v", attnref::DType::kVoid16, {B, Hq, D}, q_bits.data()},
               {"k16u", attnref::DType::kUInt16, {Hkv, P, S, D}, k_bits.data()}};
    for (const auto& x : raw) {
      if (!write_npy(x.name, make_npy_array(x.dtype, x.shape, x.data)).ok())
        attnref_fuzz::fail("pool");
      pool_files().insert(x.name);
    }
  }
  std::FILE* f = std::fopen("junk", "wb");
  if (f != nullptr) {
    std::fputs("\x93NUMPY\x01\x00\xff\x00{'descr': '<f4', 'shape': (1,), }", f);
    std::fclose(f);
  }
  pool_files().insert("junk");
}

/// Deletes what a run created (--out files), keeping the pool.
void clean_sandbox() {
  DIR* d = opendir(".");
  if (d == nullptr) return;
  std::vector<std::string> extra;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != ".." && pool_files().count(name) == 0) extra.push_back(name);
  }
  closedir(d);
  for (const std::string& name : extra) {
    if (std::remove(name.c_str()) != 0) rmdir(name.c_str());
  }
}

const char* const kOptions[] = {"--q",
                                "--k-pages",
                                "--v-pages",
                                "--lengths",
                                "--page-indices",
                                "--k-scales",
                                "--v-scales",
                                "--soft-cap",
                                "--mask-value",
                                "--sm-scale",
                                "--pages-per-compute-block",
                                "--kv-layout",
                                "--profile",
                                "--check-only",
                                "--out",
                                "--expect",
                                "--atol",
                                "--rtol",
                                "--help",
                                "-h",
                                "--q-heads",
                                "--kv-heads",
                                "--head-dim",
                                "--kv-head-dim",
                                "--page-size",
                                "--k",
                                "--v",
                                "--mask",
                                "--causal",
                                "--local",
                                "--chunked",
                                "--offset",
                                "--sinks",
                                "--block-q",
                                "--block-kv",
                                "--block-kv-compute",
                                "--dout",
                                "--lse-out",
                                "--",
                                "-",
                                "---",
                                "--kv-pages",
                                "--kv-lens",
                                "--cu-q-lens",
                                "--num-seqs",
                                "--sliding-window",
                                "--k-scale",
                                "--v-scale",
                                "--q-dtype",
                                "--kv-dtype",
                                "--megacore-mode",
                                "--round-kv-to-bf16",
                                "--num-kv-pages-per-block",
                                "--num-queries-per-block",
                                "--vmem-limit-bytes",
                                "--out-a",
                                "--lse-a",
                                "--out-b",
                                "--lse-b",
                                "--state-dtype",
                                "--expect-lse"};
const char* const kFiles[] = {
    "q",   "k",   "v",   "kn",    "e",    "knan",   "q64",  "k64",     "v64",  "q16", "k16",
    "k8",  "ks",  "ksd", "l",     "p",    "l64",    "p64",  "lbad",    "pbad", "l3",  "p0",
    "q0",  "lz",  "pz",  "k0",    "mask", "scalar", "junk", "missing", ".",    "..",  "o.npy",
    "kvp", "kvl", "cu",  "cubad", "ns",   "nsbad",  "rp",   "lse",     "lsen"};
const char* const kValues[] = {"0",
                               "1",
                               "2",
                               "4",
                               "8",
                               "-1",
                               "3",
                               "6",
                               "16",
                               "128",
                               "9223372036854775807",
                               "9223372036854775808",
                               "-9223372036854775808",
                               "2147483647",
                               "2147483648",
                               "1e309",
                               "nan",
                               "inf",
                               "-inf",
                               "-0",
                               "0.5",
                               "1e-45",
                               " 1",
                               "1 ",
                               "0x10",
                               "",
                               "jax",
                               "nhd",
                               "hnd",
                               "reference",
                               "none",
                               "1,2",
                               "none,none",
                               "-1,0",
                               "3.4028235e38",
                               "+5",
                               "08",
                               "1e-320"};

const char* const kWideFiles[] = {"l64big",   "p64big", "kvl64big", "cu64big", "ns64big",
                                  "rp64big",  "cu64",   "kvl64",    "ns64",    "q0huge",
                                  "qhuge0",   "k0huge", "kvp0huge", "pzhuge",  "sq0huge",
                                  "sk0huge",  "sk0",    "qmany",    "kmany1",  "sinksmany",
                                  "maskmany", "k8u",    "k8v",      "q16v",    "k16u"};
const char* const kWideValues[] = {
    "1e39",        "-1e39",       "1e-40",      "-1e-40",  "1099511627776", "4294967296",
    "-4294967296", "17179869184", "0.0",        "-0.0",    "1e-45",         "3.4028236e38",
    "9e18",        "-2147483649", "4294967297", "65536",   "none,0",        "0,none",
    "bf16",        "e4m3",        "e5m2",       "kv_head", "batch"};

template <size_t N, size_t M>
std::string pick_from(attnref_fuzz::Reader& r, const char* const (&table)[N],
                      const char* const (&wide)[M], bool widened) {
  const size_t i = r.u8() % (widened ? N + M : N);
  return std::string(i < N ? table[i] : wide[i - N]);
}

std::string token(attnref_fuzz::Reader& r, bool widened) {
  const std::uint8_t kind = r.u8();
  auto pick = [&](const auto& table) {
    if (&table[0] == &kFiles[0]) return pick_from(r, kFiles, kWideFiles, widened);
    if (&table[0] == &kValues[0]) return pick_from(r, kValues, kWideValues, widened);
    return std::string(table[r.u8() % (sizeof(table) / sizeof(table[0]))]);
  };
  switch (kind % 8) {
    case 0:
    case 1:
      return pick(kOptions);
    case 2:
      return pick(kOptions) + "=" + (r.flag() ? pick(kFiles) : pick(kValues));
    case 3:
    case 4:
      return pick(kFiles);
    case 5:
      return pick(kValues);
    case 6:
      return std::to_string(attnref_fuzz::hostile_int(r, 4));
    default: {  // raw bytes: no NUL (argv strings) and no '/' (stay in the sandbox)
      std::string s = r.bytes(24);
      for (char& c : s)
        if (c == '\0' || c == '/') c = '_';
      return s;
    }
  }
}

/// ParsedArgs on its own, with every typed accessor on every option.
void fuzz_parsed_args(int argc, char** argv) {
  static const attnref::cli::CommandSpec kSpec{"fuzz",
                                               "[options]",
                                               "ParsedArgs under fuzzing",
                                               {{"--q", "Q.npy", "a file"},
                                                {"--k-pages", "K.npy", "a file"},
                                                {"--soft-cap", "C", "a real"},
                                                {"--sm-scale", "S", "a real"},
                                                {"--pages-per-compute-block", "N", "an int"},
                                                {"--page-size", "N", "an int"},
                                                {"--kv-layout", "L", "a choice"},
                                                {"--profile", "P", "a choice"},
                                                {"--check-only", nullptr, "a flag"},
                                                attnref::cli::kOutOption,
                                                attnref::cli::kExpectOption,
                                                attnref::cli::kAtolOption,
                                                attnref::cli::kRtolOption}};
  try {
    const attnref::cli::ParsedArgs args(kSpec, argc, argv);
    for (const auto& o : kSpec.options) {
      const bool has = args.has(o.name);
      ATTNREF_FUZZ_CHECK(has == args.value(o.name).has_value(), "has() and value() disagree");
      if (has && o.value_name != nullptr) {
        ATTNREF_FUZZ_CHECK(!args.value(o.name)->empty(), "an empty value was accepted");
      }
      try {
        if (o.name == std::string("--soft-cap") || o.name == std::string("--sm-scale") ||
            o.name == std::string("--atol") || o.name == std::string("--rtol")) {
          (void)args.real(o.name);
        } else if (o.name == std::string("--pages-per-compute-block") ||
                   o.name == std::string("--page-size")) {
          (void)args.int64(o.name);
        } else if (o.name == std::string("--kv-layout")) {
          (void)attnref::cli::kv_layout_option(args);
        } else if (o.name == std::string("--profile")) {
          (void)args.choice(o.name, {"jax", "reference"}, "reference");
        }
      } catch (const attnref::cli::Exit& e) {
        ATTNREF_FUZZ_CHECK(e.code() == attnref::cli::kExitUsage && !e.text().empty(),
                           "a typed accessor ended with " + std::to_string(e.code()));
      }
    }
    try {
      attnref::cli::check_result_options(args);
    } catch (const attnref::cli::Exit& e) {
      ATTNREF_FUZZ_CHECK(e.code() == attnref::cli::kExitUsage, "check_result_options exit code");
    }
  } catch (const attnref::cli::Exit& e) {
    ATTNREF_FUZZ_CHECK(e.code() == attnref::cli::kExitUsage && !e.text().empty(),
                       "ParsedArgs ended with exit " + std::to_string(e.code()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char dir[] = "/tmp/attnref_fuzz_cli_XXXXXX";
  if (mkdtemp(dir) == nullptr || chdir(dir) != 0) attnref_fuzz::fail("cannot make the sandbox");
  write_pool();
  std::cout.rdbuf(nullptr);  // subcommands print "ok", help and reports on stdout
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  attnref_fuzz::Reader r(data, size);
  // config, paged, splash, ParsedArgs, ragged; merge (added later) takes the bytes 250-255, so
  // the rest of the corpus keeps its meaning.
  const std::uint8_t command_byte = r.u8();
  const int command = command_byte >= 250 ? 5 : command_byte % 5;
  const bool widened = r.u8() != 0;
  std::vector<std::string> tokens;
  const int n = static_cast<int>(r.range(0, 24));
  for (int i = 0; i < n && !r.empty(); ++i) tokens.push_back(token(r, widened));
  std::vector<char*> argv;
  for (std::string& t : tokens) argv.push_back(&t[0]);
  argv.push_back(nullptr);
  const int argc = static_cast<int>(tokens.size());

  if (command == 3) {
    fuzz_parsed_args(argc, argv.data());
    return 0;
  }
  int code = -1;
  std::string what;
  // Budget: the pool files the arguments name (each read once; a token may be `--opt=file`),
  // plus 1 MiB for the tool's own state and messages. --out files hold what was read.
  static const std::map<std::string, std::int64_t> file_bytes = [] {
    std::map<std::string, std::int64_t> sizes;
    for (const std::string& name : pool_files()) {
      struct stat st;
      if (stat(name.c_str(), &st) == 0) sizes[name] = static_cast<std::int64_t>(st.st_size);
    }
    return sizes;
  }();
  std::set<std::string> named;
  for (const std::string& t : tokens) {
    const size_t eq = t.find('=');
    const auto it = file_bytes.find(eq == std::string::npos ? t : t.substr(eq + 1));
    if (it != file_bytes.end()) named.insert(it->first);
  }
  attnref_fuzz::DataSize budget_data;
  budget_data.add_raw(1 << 20, 1);
  for (const std::string& name : named) budget_data.add_raw(file_bytes.at(name), 1);
  attnref_fuzz::BudgetScope budget("attnref-run subcommand", budget_data);
  try {
    switch (command) {
      case 0:
        code = attnref::cli::run_config(argc, argv.data());
        break;
#if defined(ATTNREF_FUZZ_HAVE_SPLASH_CMD)
      case 2:
        code = attnref::cli::run_splash(argc, argv.data());
        break;
#endif
#if defined(ATTNREF_FUZZ_HAVE_RAGGED_CMD)
      case 4:
        code = attnref::cli::run_ragged(argc, argv.data());
        break;
#endif
#if defined(ATTNREF_FUZZ_HAVE_MERGE_CMD)
      case 5:
        code = attnref::cli::run_merge(argc, argv.data());
        break;
#endif
      default:
        code = attnref::cli::run_paged(argc, argv.data());
        break;
    }
    ATTNREF_FUZZ_CHECK(code == attnref::cli::kExitOk,
                       "a subcommand returned " + std::to_string(code));
  } catch (const attnref::cli::Exit& e) {
    ATTNREF_FUZZ_CHECK(e.code() >= 1 && e.code() <= 3, "exit code " + std::to_string(e.code()));
    ATTNREF_FUZZ_CHECK(!e.text().empty(), "an exit without a message");
  } catch (const attnref::ShapeError& e) {
    (void)e;  // main.cpp maps it to exit 2 with the status
  } catch (const attnref::frontend::Error& e) {
    // main.cpp maps it to exit 2 with the rendered check.
    ATTNREF_FUZZ_CHECK(!e.code.empty() && !e.message.empty(),
                       "a front-end error without a message");
  } catch (const std::exception& e) {
    attnref_fuzz::fail("an exception other than cli::Exit escaped a subcommand", e.what());
  }
  clean_sandbox();
  return 0;
}
