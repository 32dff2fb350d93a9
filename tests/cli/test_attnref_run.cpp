// SPDX-License-Identifier: Apache-2.0
// attnref-run, end to end: runs the built program on .npy files this test writes and checks exit
// codes, stderr/stdout text and the result against the float64 paged oracle (reference/).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>
#include <Eigen/Core>

#include "attnref/core/isa.hpp"
#include "attnref/io/npy.hpp"
#include "cli_harness.hpp"
#include "reference/paged.hpp"

namespace attnref {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// --- running the program -------------------------------------------------------------------

using cli_test::Result;

/// A fresh directory per test; `run` takes the whole command line after the program name.
class Cli : public cli_test::CliTest {
 public:
  Result run(const std::string& args) const { return run_program(args); }
};

// --- a plain float64 paged attention -------------------------------------------------------

/// A decode batch in logical coordinates: q [B, Hq, D], K/V [Hkv, P, S, D], lengths [B],
/// page table [B, pps]. Everything a kernel must not read is NaN.
struct Problem {
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, dim = 0, page_size = 0, pps = 0, pages = 0;
  std::vector<double> q, k, v;
  std::vector<std::int64_t> lengths, table;
  std::optional<double> soft_cap;
  double sm_scale = 1.0;

  std::size_t kv_index(std::int64_t h, std::int64_t p, std::int64_t s, std::int64_t d) const {
    return static_cast<std::size_t>(((h * pages + p) * page_size + s) * dim + d);
  }
  std::vector<std::int64_t> q_shape() const { return {batch, q_heads, dim}; }
};

/// Rounds x to a representable value of the file's dtype, so the reference sees what the
/// program reads.
template <class T>
double representable(double x) {
  return static_cast<double>(static_cast<float>(static_cast<T>(static_cast<float>(x))));
}
template <>
double representable<double>(double x) {
  return x;
}

template <class T = float>
Problem random_problem(std::uint32_t seed, std::int64_t batch, std::int64_t q_heads,
                       std::int64_t kv_heads, std::int64_t dim, std::int64_t page_size,
                       std::int64_t pps) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  Problem p;
  p.batch = batch;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.dim = dim;
  p.page_size = page_size;
  p.pps = pps;
  p.pages = batch * pps + 3;  // a few pages nobody uses
  p.q.resize(static_cast<std::size_t>(batch * q_heads * dim));
  for (double& x : p.q) x = representable<T>(uniform(rng));
  const std::int64_t capacity = pps * page_size;
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int64_t len = static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(capacity + 1));
    if (b == 0) len = capacity;                                         // full
    if (b == 1) len = 0;                                                // empty: a zero row
    if (b == 2) len = std::min<std::int64_t>(page_size + 1, capacity);  // one past a page
    p.lengths.push_back(len);
  }
  std::vector<std::int64_t> perm(static_cast<std::size_t>(p.pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.table.assign(perm.begin(), perm.begin() + batch * pps);
  // K/V: NaN everywhere, then values on the rows lengths make live.
  const auto kv_size = static_cast<std::size_t>(kv_heads * p.pages * page_size * dim);
  p.k.assign(kv_size, kNaN);
  p.v.assign(kv_size, kNaN);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < p.lengths[static_cast<std::size_t>(b)]; ++t) {
      const std::int64_t page = p.table[static_cast<std::size_t>(b * pps + t / page_size)];
      for (std::int64_t h = 0; h < kv_heads; ++h)
        for (std::int64_t d = 0; d < dim; ++d) {
          p.k[p.kv_index(h, page, t % page_size, d)] = representable<T>(uniform(rng));
          p.v[p.kv_index(h, page, t % page_size, d)] = representable<T>(uniform(rng));
        }
    }
  return p;
}

/// out[b, qh] = sum_{t < len} softmax_t(cap(sm_scale * q . k_t)) v_t; a zero row for len 0:
/// the paged oracle of reference/paged.hpp over the problem's logical float64 arrays (int8
/// cases store the dequantized values there).
std::vector<double> reference(const Problem& p) {
  PagedAttentionArgs<double, double, std::int64_t> a;
  a.q = {p.q.data(), {p.batch, p.q_heads, p.dim}};
  a.k_pages = {p.k.data(), {p.kv_heads, p.pages, p.page_size, p.dim}};
  a.v_pages = {p.v.data(), {p.kv_heads, p.pages, p.page_size, p.dim}};
  a.lengths = {p.lengths.data(), {p.batch}};
  a.page_indices = {p.table.data(), {p.batch, p.pps}};
  a.sm_scale = static_cast<float>(p.sm_scale);
  if (p.soft_cap) a.soft_cap = static_cast<float>(*p.soft_cap);
  return reference::paged_attention(a);
}

/// Physical shape and element order of a logical [Hkv, P, S, D] pool in `layout`.
std::vector<std::int64_t> physical_shape(const Problem& p, const std::string& layout,
                                         std::int64_t last) {
  if (layout == "nhd") return {p.pages, p.page_size, p.kv_heads, last};
  if (layout == "hnd") return {p.pages, p.kv_heads, p.page_size, last};
  return {p.kv_heads, p.pages, p.page_size, last};
}

template <class T>
std::vector<T> to_physical(const Problem& p, const std::vector<double>& logical,
                           const std::string& layout, std::int64_t last) {
  std::vector<T> out(logical.size());
  for (std::int64_t h = 0; h < p.kv_heads; ++h)
    for (std::int64_t pg = 0; pg < p.pages; ++pg)
      for (std::int64_t s = 0; s < p.page_size; ++s)
        for (std::int64_t d = 0; d < last; ++d) {
          std::int64_t i;
          if (layout == "nhd")
            i = ((pg * p.page_size + s) * p.kv_heads + h) * last + d;
          else if (layout == "hnd")
            i = ((pg * p.kv_heads + h) * p.page_size + s) * last + d;
          else
            i = ((h * p.pages + pg) * p.page_size + s) * last + d;
          out[static_cast<std::size_t>(i)] = static_cast<T>(
              logical[static_cast<std::size_t>(((h * p.pages + pg) * p.page_size + s) * last + d)]);
        }
  return out;
}

template <class Dst, class Src>
std::vector<Dst> cast(const std::vector<Src>& v) {
  std::vector<Dst> out;
  out.reserve(v.size());
  for (const Src& x : v) out.push_back(static_cast<Dst>(x));
  return out;
}

/// Writes q, K, V, lengths and the page table (T for q/K/V, I for the indices).
template <class T, class I = std::int32_t>
void save_problem(Cli& t, const Problem& p, const std::string& layout = "jax") {
  const auto shape = physical_shape(p, layout, p.dim);
  if constexpr (std::is_same<T, double>::value) {
    t.save<T>("q.npy", p.q_shape(), p.q);
    t.save<T>("k.npy", shape, to_physical<double>(p, p.k, layout, p.dim));
    t.save<T>("v.npy", shape, to_physical<double>(p, p.v, layout, p.dim));
  } else {
    t.save<T>("q.npy", p.q_shape(), cast<T>(cast<float>(p.q)));
    t.save<T>("k.npy", shape, cast<T>(to_physical<float>(p, p.k, layout, p.dim)));
    t.save<T>("v.npy", shape, cast<T>(to_physical<float>(p, p.v, layout, p.dim)));
  }
  t.save<I>("lengths.npy", {p.batch}, cast<I>(p.lengths));
  t.save<I>("table.npy", {p.batch, p.pps}, cast<I>(p.table));
}

const char* kInputs =
    "--q q.npy --k-pages k.npy --v-pages v.npy --lengths lengths.npy --page-indices table.npy";

/// The program's paths are relative to the test directory: run it there.
std::string in_dir(const Cli& t, const std::string& args) { return t.with_paths(args); }

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return std::isfinite(m) ? m : std::numeric_limits<double>::infinity();
}

std::vector<double> read_out(const Cli& t, const std::string& name, const Problem& p) {
  const NpyArray out = t.load(name);
  EXPECT_EQ(out.dtype, DType::kFloat32);
  EXPECT_EQ(out.shape, p.q_shape());
  return cast<double>(out.to_vector<float>());
}

// --- config --------------------------------------------------------------------------------

TEST_F(Cli, ConfigOk) {
  const Result r = run("config --q-heads 32 --kv-heads 8 --head-dim 128 --page-size 16");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "ok\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(run("config --q-heads=32 --kv-heads=8 --head-dim=128 --kv-head-dim=128").code, 0);
}

TEST_F(Cli, ConfigGqaErrorAndHint) {
  const Result r = run("config --q-heads 8 --kv-heads 6 --head-dim 128");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "attnref: error[gqa_not_divisible] Number of Q heads must be divisible by number of "
            "KV heads. Got 8 and 6.\n"
            "valid num_kv_heads for 8 query heads: 1, 2, 4, 8\n"
            "JAX check P2\n");
}

TEST_F(Cli, ConfigSeedScenarios) {
  struct Case {
    const char* args;
    const char* line0;
    const char* line1;
  } cases[] = {
      {"--q-heads 8 --kv-heads 3 --head-dim 128",
       "attnref: error[gqa_not_divisible] Number of Q heads must be divisible by number of KV "
       "heads. Got 8 and 3.",
       "valid num_kv_heads for 8 query heads: 1, 2, 4, 8"},
      {"--q-heads 12 --kv-heads 8 --head-dim 128",
       "attnref: error[gqa_not_divisible] Number of Q heads must be divisible by number of KV "
       "heads. Got 12 and 8.",
       "valid num_kv_heads for 12 query heads: 1, 2, 3, 4, 6, 12"},
      {"--q-heads 48 --kv-heads 32 --head-dim 128",
       "attnref: error[gqa_not_divisible] Number of Q heads must be divisible by number of KV "
       "heads. Got 48 and 32.",
       "valid num_kv_heads for 48 query heads: 1, 2, 3, 4, 6, 8, 12, 16, 24, 48"},
      {"--q-heads 32 --kv-heads 8 --head-dim 128 --kv-head-dim 64",
       "attnref: error[head_dim_mismatch] head_dim of Q must be the same as that of K/V. Got 128 "
       "and 64.",
       nullptr},
      {"--q-heads 32 --kv-heads 8 --head-dim 128 --kv-head-dim 256",
       "attnref: error[head_dim_mismatch] head_dim of Q must be the same as that of K/V. Got 128 "
       "and 256.",
       nullptr},
      {"--q-heads 0 --kv-heads 8 --head-dim 128",
       "attnref: error[invalid_head_count] num_q_heads must be positive. Got 0.", nullptr},
      {"--q-heads 8 --kv-heads -2 --head-dim 128",
       "attnref: error[invalid_head_count] num_kv_heads must be positive. Got -2.",
       "valid num_kv_heads for 8 query heads: 1, 2, 4, 8"},
      {"--q-heads 8 --kv-heads 8 --head-dim 0",
       "attnref: error[invalid_head_dim] head_dim must be positive. Got 0.", nullptr},
      {"--q-heads 8 --kv-heads 8 --head-dim 64 --page-size 0",
       "attnref: error[invalid_page_size] page_size must be positive. Got 0.", nullptr},
      {"--q-heads 8 --kv-heads 8 --head-dim 64 --page-size -1",
       "attnref: error[invalid_page_size] page_size must be positive. Got -1.",
       "leave page_size unset for a non-paged cache"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = run(std::string("config ") + c.args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0), c.line0);
    if (c.line1 != nullptr) {
      EXPECT_EQ(r.err_line(1), c.line1);
    }
    EXPECT_FALSE(r.err_line(1).empty());  // always a hint
  }
}

TEST_F(Cli, ConfigUsageErrorsExit1) {
  struct Case {
    const char* args;
    const char* message;
  } cases[] = {
      {"--kv-heads 8 --head-dim 128", "attnref-run config: missing required option --q-heads"},
      {"--q-heads eight --kv-heads 8 --head-dim 128",
       "attnref-run config: --q-heads takes an integer; got 'eight'"},
      {"--q-heads 8x --kv-heads 8 --head-dim 128",
       "attnref-run config: --q-heads takes an integer; got '8x'"},
      {"--q-heads 99999999999999999999 --kv-heads 8 --head-dim 128",
       "attnref-run config: --q-heads is out of the int64 range: 99999999999999999999"},
      {"--q-heads 8 --kv-heads 8 --head-dim 128 --bogus 1",
       "attnref-run config: unknown option --bogus"},
      {"--q-heads 8 --q-heads 8 --kv-heads 8 --head-dim 128",
       "attnref-run config: --q-heads is given more than once"},
      {"--q-heads 8 --kv-heads 8 --head-dim", "attnref-run config: --head-dim needs a value (N)"},
      {"--q-heads 8 --kv-heads 8 --head-dim 128 extra",
       "attnref-run config: unexpected argument 'extra'"},
      {"--q-heads= --kv-heads 8 --head-dim 128",
       "attnref-run config: --q-heads needs a non-empty value (N)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = run(std::string("config ") + c.args);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err_line(0), c.message);
    EXPECT_EQ(r.err_line(1).rfind("usage: attnref-run config --q-heads N", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(Cli, HelpVersionAndSubcommands) {
  Result r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("attnref-run 0.1.0\nkernels: ", 0), 0u) << r.out;
  const std::string cpu =
      std::string("(this CPU: ") + attnref::isa_name(attnref::cpu_isa()) + ")\n";
  EXPECT_NE(r.out.find(cpu), std::string::npos) << r.out;
  r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\n  config    "), std::string::npos);
  EXPECT_NE(r.out.find("\n  paged     "), std::string::npos);
  r = run("");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref-run: missing subcommand");
  r = run("bogus");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref-run: unknown subcommand 'bogus'");
  r = run("config --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("usage: attnref-run config --q-heads N --kv-heads N --head-dim N", 0), 0u);
  r = run("paged --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--kv-layout"), std::string::npos);
}

// --- paged: results ------------------------------------------------------------------------

TEST_F(Cli, PagedRoundTripMatchesFloat64Reference) {
  struct Case {
    std::uint32_t seed;
    std::int64_t batch, q_heads, kv_heads, dim, page_size, pps;
    std::optional<double> soft_cap;
    double sm_scale;
  } cases[] = {
      {1, 4, 8, 2, 16, 4, 3, std::nullopt, 1.0},
      {2, 3, 4, 4, 3, 1, 5, 5.0, 1.0},                // G = 1, page size 1, soft cap
      {3, 5, 16, 1, 64, 16, 2, std::nullopt, 0.125},  // G = 16, sm_scale
      {4, 3, 6, 2, 8, 3, 4, 2.0, 0.5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.seed);
    Problem p = random_problem(c.seed, c.batch, c.q_heads, c.kv_heads, c.dim, c.page_size, c.pps);
    p.soft_cap = c.soft_cap;
    p.sm_scale = c.sm_scale;
    save_problem<float>(*this, p);
    std::string args =
        std::string("paged ") + kInputs + " --out out.npy --sm-scale " + std::to_string(c.sm_scale);
    if (c.soft_cap) args += " --soft-cap " + std::to_string(*c.soft_cap);
    const Result r = run(in_dir(*this, args));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "wrote " + path("out.npy") + " (float32, shape (" + std::to_string(c.batch) +
                         ", " + std::to_string(c.q_heads) + ", " + std::to_string(c.dim) + "))\n");
    const std::vector<double> got = read_out(*this, "out.npy", p);
    const std::vector<double> want = reference(p);
    EXPECT_LT(max_abs_diff(got, want), 2e-5);
    // Sequence 1 has length 0: a zero row.
    for (std::int64_t i = 0; i < c.q_heads * c.dim; ++i)
      EXPECT_EQ(got[static_cast<std::size_t>(c.q_heads * c.dim + i)], 0.0);
  }
}

TEST_F(Cli, PagedEveryKvLayoutGivesTheSameOutput) {
  const Problem p = random_problem(7, 4, 8, 4, 32, 4, 3);
  const std::vector<double> want = reference(p);
  std::vector<std::vector<double>> outputs;
  for (const std::string layout : {"jax", "nhd", "hnd"}) {
    SCOPED_TRACE(layout);
    save_problem<float>(*this, p, layout);
    const Result r = run(in_dir(*this, std::string("paged ") + kInputs + " --kv-layout " + layout +
                                           " --out out_" + layout + ".npy"));
    ASSERT_EQ(r.code, 0) << r.err;
    outputs.push_back(read_out(*this, "out_" + layout + ".npy", p));
    EXPECT_LT(max_abs_diff(outputs.back(), want), 2e-5);
  }
  EXPECT_LT(max_abs_diff(outputs[0], outputs[1]), 1e-6);
  EXPECT_LT(max_abs_diff(outputs[0], outputs[2]), 1e-6);
}

TEST_F(Cli, PagedFloat64WithExpectAtTightTolerance) {
  const Problem p = random_problem<double>(11, 3, 4, 2, 16, 4, 2);
  save_problem<double, std::int64_t>(*this, p);
  save<double>("expected.npy", p.q_shape(), reference(p));
  const Result r = run(in_dir(*this, std::string("paged ") + kInputs +
                                         " --expect expected.npy --atol 1e-12 "
                                         "--rtol 0"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("match: 192 elements within atol 1e-12, rtol 0 of ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nmax abs error: "), std::string::npos);
  EXPECT_NE(r.out.find("\nmax rel error: "), std::string::npos);
}

TEST_F(Cli, PagedFloat16) {
  const Problem p = random_problem<Eigen::half>(12, 3, 4, 2, 16, 4, 2);
  save_problem<Eigen::half>(*this, p, "nhd");
  const Result r =
      run(in_dir(*this, std::string("paged ") + kInputs + " --kv-layout nhd --out out.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(max_abs_diff(read_out(*this, "out.npy", p), reference(p)), 2e-3);
}

TEST_F(Cli, PagedInt8PagesWithScales) {
  // Quantized pages in every layout, with one scale per (head, page, slot) ([..., 1]) or one per
  // element ([..., head_dim]); the reference dequantizes as JAX does, w * s / 127.5.
  for (const std::string layout : {"jax", "nhd", "hnd"}) {
    for (const std::int64_t per_row : {1, 0}) {
      SCOPED_TRACE(layout + (per_row ? " [..., 1]" : " [..., head_dim]"));
      Problem p = random_problem(13, 3, 4, 2, 8, 4, 2);
      const std::int64_t last = per_row ? 1 : p.dim;
      std::mt19937 rng(5);
      std::vector<double> kw(p.k.size()), vw(p.v.size());
      std::vector<double> ks(p.k.size() / static_cast<std::size_t>(p.dim / last)), vs(ks.size());
      for (double& x : ks) x = static_cast<float>(0.5 + static_cast<double>(rng() % 100) / 100.0);
      for (double& x : vs) x = static_cast<float>(0.5 + static_cast<double>(rng() % 100) / 100.0);
      for (std::size_t i = 0; i < kw.size(); ++i) {
        kw[i] = static_cast<double>(static_cast<int>(rng() % 255) - 127);
        vw[i] = static_cast<double>(static_cast<int>(rng() % 255) - 127);
        const std::size_t si = per_row ? i / static_cast<std::size_t>(p.dim) : i;
        p.k[i] = kw[i] * ks[si] / 127.5;
        p.v[i] = vw[i] * vs[si] / 127.5;
      }
      save_problem<float>(*this, p, layout);
      const std::vector<std::int64_t> shape = physical_shape(p, layout, p.dim);
      save<std::int8_t>("k.npy", shape, to_physical<std::int8_t>(p, kw, layout, p.dim));
      save<std::int8_t>("v.npy", shape, to_physical<std::int8_t>(p, vw, layout, p.dim));
      const std::vector<std::int64_t> scales_shape = physical_shape(p, layout, last);
      save<float>("ks.npy", scales_shape, to_physical<float>(p, ks, layout, last));
      save<float>("vs.npy", scales_shape, to_physical<float>(p, vs, layout, last));
      const Result r =
          run(in_dir(*this, std::string("paged ") + kInputs + " --kv-layout " + layout +
                                " --k-scales ks.npy --v-scales vs.npy --out out.npy"));
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_LT(max_abs_diff(read_out(*this, "out.npy", p), reference(p)), 2e-5);
    }
  }
}

TEST_F(Cli, PagedScalesErrors) {
  const Problem p = random_problem(14, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p);
  const std::vector<std::int64_t> shape = physical_shape(p, "jax", p.dim);
  save<std::int8_t>("k8.npy", shape, std::vector<std::int8_t>(p.k.size(), 1));
  save<std::int8_t>("v8.npy", shape, std::vector<std::int8_t>(p.k.size(), 1));
  const std::vector<double> ones(p.k.size() / static_cast<std::size_t>(p.dim), 1.0);
  save<float>("ks.npy", physical_shape(p, "jax", 1), cast<float>(ones));
  save<float>("vs.npy", physical_shape(p, "jax", 1), cast<float>(ones));
  const std::string int8_inputs =
      "paged --q q.npy --k-pages k8.npy --v-pages v8.npy --lengths lengths.npy "
      "--page-indices table.npy";

  // Scales with float pages.
  Result r =
      run(in_dir(*this, std::string("paged ") + kInputs + " --k-scales ks.npy --v-scales vs.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[quantization_mismatch] k_scales/v_scales were given but the K/V "
            "pages are not int8 or fp8");
  // int8 pages without scales.
  r = run(in_dir(*this, int8_inputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[quantization_mismatch] int8 K/V pages need both k_scales and "
            "v_scales; got k_scales: 0, v_scales: 0");
  // Scales of the wrong shape: [Hkv, P, S, 2].
  save<float>("vs2.npy", physical_shape(p, "jax", 2), std::vector<float>(2 * ones.size(), 1.0f));
  r = run(in_dir(*this, int8_inputs + " --k-scales ks.npy --v-scales vs2.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[scales_shape] v_scales has shape (2, 9, 4, 2); expected (2, 9, 4, 1) "
            "or (2, 9, 4, 8)");
  save<float>("vs3.npy", {2, 9, 4}, std::vector<float>(72, 1.0f));
  r = run(in_dir(*this, int8_inputs + " --k-scales ks.npy --v-scales vs3.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[rank_mismatch] v_scales must have 4 dimensions; got 3");
  // Only K quantized.
  r = run(in_dir(*this,
                 "paged --q q.npy --k-pages k8.npy --v-pages v.npy --lengths lengths.npy "
                 "--page-indices table.npy --k-scales ks.npy --v-scales vs.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[quantization_mismatch] k_pages (int8) and v_pages (float32) must have "
            "the same dtype");
  // One scale file missing.
  r = run(in_dir(*this, int8_inputs + " --k-scales ks.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[quantization_mismatch] int8 K/V pages need both k_scales and "
            "v_scales; got k_scales: 1, v_scales: 0");
  // float64 scales.
  save<double>("ks64.npy", physical_shape(p, "jax", 1), ones);
  r = run(in_dir(*this, int8_inputs + " --k-scales ks64.npy --v-scales vs.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] k_scales has dtype float64, which "
            "is not supported here");
  EXPECT_EQ(r.err_line(1), "dequantization scales must be float32");
}

TEST_F(Cli, PagedEmptyBatch) {
  save<float>("q.npy", {0, 4, 8}, std::vector<float>{});
  save<float>("k.npy", {2, 3, 4, 8}, std::vector<float>(192, 1.0f));
  save<float>("v.npy", {2, 3, 4, 8}, std::vector<float>(192, 1.0f));
  save<std::int32_t>("lengths.npy", {0}, std::vector<std::int32_t>{});
  save<std::int32_t>("table.npy", {0, 2}, std::vector<std::int32_t>{});
  const Result r = run(in_dir(*this, std::string("paged ") + kInputs + " --out out.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  const NpyArray out = load("out.npy");
  EXPECT_EQ(out.shape, (std::vector<std::int64_t>{0, 4, 8}));
  EXPECT_EQ(out.numel(), 0);
}

// --- paged: --expect, --check-only, profiles ---------------------------------------------------

TEST_F(Cli, PagedExpectPassAndMismatch) {
  const Problem p = random_problem(21, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p);
  std::vector<double> want = reference(p);
  save<float>("expected.npy", p.q_shape(), cast<float>(want));
  Result r = run(in_dir(*this, std::string("paged ") + kInputs + " --expect expected.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("match: 96 elements within atol 1e-05, rtol 1e-05 of ", 0), 0u) << r.out;

  // One element off by 0.5 at [2, 1, 3] (flat 2*32 + 1*8 + 3 = 75).
  want[75] += 0.5;
  save<float>("expected.npy", p.q_shape(), cast<float>(want));
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --expect expected.npy --out out.npy"));
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err_line(0), "attnref: mismatch: 1 of 96 elements differ from " +
                               path("expected.npy") + " beyond atol 1e-05, rtol 1e-05");
  EXPECT_EQ(r.err_line(1).rfind("max abs error: 0.5", 0), 0u) << r.err;
  EXPECT_NE(r.err_line(1).find(" at [2, 1, 3]"), std::string::npos) << r.err;
  EXPECT_EQ(r.err_line(2).rfind("max rel error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err_line(3), "mismatches: 1");
  EXPECT_EQ(r.err_line(4).rfind("first mismatch: [2, 1, 3]: got ", 0), 0u) << r.err;
  EXPECT_NE(load("out.npy").numel(), 0);  // --out is written before the comparison

  // A loose tolerance accepts it.
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --expect expected.npy --atol 0.6"));
  EXPECT_EQ(r.code, 0) << r.err;

  // An expectation of the wrong shape or dtype is a bad file.
  save<float>("wrong.npy", {3, 4, 7}, std::vector<float>(84, 0.0f));
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --expect wrong.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("wrong.npy") +
                               ": --expect has shape (3, 4, 7); the result has shape (3, 4, 8)");
  save<std::int32_t>("ints.npy", p.q_shape(), std::vector<std::int32_t>(96, 0));
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --expect ints.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("ints.npy") +
                               ": --expect has dtype int32; it must be a float array");
}

TEST_F(Cli, PagedCheckOnly) {
  const Problem p = random_problem(22, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p);
  for (const char* profile : {"reference", "jax"}) {
    const Result r =
        run(in_dir(*this, std::string("paged ") + kInputs + " --check-only --profile " + profile));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "ok\n");
    EXPECT_EQ(r.err, "");
  }
  const Result r =
      run(in_dir(*this, std::string("paged ") + kInputs + " --check-only --out o.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0),
            "attnref-run paged: --check-only runs nothing, so it takes no --out, --lse-out or "
            "--expect");
}

TEST_F(Cli, PagedShapeOnlyJaxRejects) {
  // pages_per_sequence 3 is not a multiple of pages_per_compute_block 2: JAX's P4 (TPU
  // blocking), no problem for the reference kernel, whose result does not depend on it.
  const Problem p = random_problem(23, 3, 4, 2, 8, 4, 3);
  save_problem<float>(*this, p);
  const std::string args = std::string("paged ") + kInputs + " --pages-per-compute-block 2";
  Result r = run(in_dir(*this, args + " --profile jax"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[block_not_divisible] pages_per_sequence must be divisible by "
            "pages_per_compute_block. Got 3 pages per sequence and pages_per_compute_block 2.");
  EXPECT_EQ(r.err_line(1), "pick pages_per_compute_block among the divisors of 3: 1, 3");
  r = run(in_dir(*this, args + " --profile jax --check-only"));
  EXPECT_EQ(r.code, 2);
  r = run(in_dir(*this, args + " --check-only"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
  r = run(in_dir(*this, args + " --profile reference --out out.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(max_abs_diff(read_out(*this, "out.npy", p), reference(p)), 2e-5);
}

TEST_F(Cli, PagedIndexDtypes) {
  const Problem p = random_problem(24, 3, 4, 2, 8, 4, 2);
  save_problem<float, std::int64_t>(*this, p);
  // int64 indices: fine for the reference profile, JAX's P7 under jax.
  Result r = run(in_dir(*this, std::string("paged ") + kInputs + " --out out.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(max_abs_diff(read_out(*this, "out.npy", p), reference(p)), 2e-5);
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --profile jax"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] The dtype of `lengths` must be "
            "int32. Got int64");

  // float32 lengths: P7 with the real dtype under jax, a dtype error under reference.
  save<float>("lengths.npy", {p.batch}, cast<float>(p.lengths));
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --profile jax"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] The dtype of `lengths` must be "
            "int32. Got float32");
  r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] lengths has dtype float32, which "
            "is not supported here");
  EXPECT_EQ(r.err_line(1), "lengths must be int32 or int64 (int32 under the jax profile)");

  // JAX's order: a P5 batch mismatch comes before the P7 dtype check.
  save<float>("lengths.npy", {p.batch + 1}, std::vector<float>(4, 1.0f));
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --profile jax"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[batch_mismatch] `lengths` and `q` must have the same "
            "batch size. Got 4 and 3.");

  // int32 lengths with an int64 page table.
  save<std::int32_t>("lengths.npy", {p.batch}, cast<std::int32_t>(p.lengths));
  r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] lengths (int32) and page_indices "
            "(int64) must have the same dtype");
  // A float page table.
  save<float>("table.npy", {p.batch, p.pps}, cast<float>(p.table));
  r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] page_indices has dtype float32, "
            "which is not supported here");
}

// --- paged: validation errors (exit 2) -------------------------------------------------------

TEST_F(Cli, PagedBadPageIndex) {
  Problem p = random_problem(25, 3, 4, 2, 8, 4, 2);
  // Sequence 0 is full: its second page is live. Point it past the pool.
  p.table[1] = p.pages;
  save_problem<float>(*this, p);
  Result r = run(in_dir(*this, std::string("paged ") + kInputs + " --out out.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[page_index_out_of_range] page_indices[0, 1]=" +
                               std::to_string(p.pages) + " is outside [0, " +
                               std::to_string(p.pages) + ") (total_pages)");
  EXPECT_EQ(r.err_line(1),
            "page 1 of sequence 0 is read because lengths[0]=8; point it at an "
            "allocated page");
  EXPECT_EQ(r.out, "");

  // Sequence 1 is empty: its pages are never read, so garbage there is fine.
  p.table[1] = 0;
  p.table[2] = -7;
  p.table[3] = 1 << 30;
  save_problem<float>(*this, p);
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --out out.npy"));
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(Cli, PagedValidationErrors) {
  const Problem p = random_problem(26, 3, 6, 4, 8, 4, 2);  // 6 query heads, 4 KV heads
  save_problem<float>(*this, p);
  Result r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[gqa_not_divisible] Number of Q heads must be divisible "
            "by number of KV heads. Got 6 and 4.");
  EXPECT_EQ(r.err_line(1), "valid num_kv_heads for 6 query heads: 1, 2, 3, 6");

  const Problem ok = random_problem(27, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, ok);
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --soft-cap 0"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[invalid_soft_cap] soft_cap=0.0 must not be 0.0 and "
            "must be finite.");
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --mask-value 1"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[invalid_mask_value] mask_value=1.0 must be a finite "
            "negative number.");
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --sm-scale inf"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[invalid_scale] sm_scale=inf must be finite.");
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --pages-per-compute-block 0"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[invalid_block_size] pages_per_compute_block must be "
            "positive. Got 0.");

  // K pages of another dtype than q, and K/V of different dtypes.
  const auto shape = physical_shape(ok, "jax", ok.dim);
  save<double>("k.npy", shape, to_physical<double>(ok, ok.k, "jax", ok.dim));
  r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] k_pages has dtype float64; a float32 query "
            "reads K/V pages of its own dtype or int8 with scales (float32 and bfloat16 queries "
            "also read float32, bfloat16, float16 and fp8 pages)");
  save<std::int8_t>("k.npy", shape, std::vector<std::int8_t>(ok.k.size(), 0));
  r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[quantization_mismatch] k_pages (int8) and v_pages "
            "(float32) must have the same dtype");
  save<std::int32_t>("q.npy", ok.q_shape(), std::vector<std::int32_t>(ok.q.size(), 0));
  r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] q has dtype int32, which is not "
            "supported here");

  // A length past the page table's capacity.
  save_problem<float>(*this, ok);
  std::vector<std::int32_t> lengths = cast<std::int32_t>(ok.lengths);
  lengths[2] = 9;
  save<std::int32_t>("lengths.npy", {ok.batch}, lengths);
  r = run(in_dir(*this, std::string("paged ") + kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[length_out_of_range] lengths[2]=9 is outside [0, 8] "
            "(pages_per_sequence 2 x page_size 4)");
}

TEST_F(Cli, PagedWrongRank) {
  const Problem p = random_problem(28, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p, "nhd");
  save<float>("q2.npy", {p.batch * p.q_heads, p.dim}, cast<float>(p.q));
  Result r = run(in_dir(*this, std::string("paged ") + kInputs + " --q q2.npy"));
  // --q given twice is a usage error; replace the option instead.
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref-run paged: --q is given more than once");

  r = run(in_dir(*this,
                 "paged --q q2.npy --k-pages k.npy --v-pages v.npy --lengths lengths.npy "
                 "--page-indices table.npy --kv-layout nhd"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[rank_mismatch] q must have 3 dimensions; got 2");
  EXPECT_EQ(r.err_line(1), "q is [batch, num_q_heads, head_dim]");

  save<float>("k3.npy", {p.pages * p.page_size, p.kv_heads, p.dim},
              std::vector<float>(p.k.size(), 0.0f));
  r = run(in_dir(*this,
                 "paged --q q.npy --k-pages k3.npy --v-pages v.npy --lengths lengths.npy "
                 "--page-indices table.npy --kv-layout nhd"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[rank_mismatch] k_pages must have 4 dimensions; got 3");
  EXPECT_EQ(r.err_line(1),
            "with --kv-layout nhd the pages are [total_pages, page_size, "
            "num_kv_heads, head_dim]");

  save<std::int32_t>("l2.npy", {p.batch, 1}, cast<std::int32_t>(p.lengths));
  r = run(in_dir(*this,
                 "paged --q q.npy --k-pages k.npy --v-pages v.npy --lengths l2.npy "
                 "--page-indices table.npy --kv-layout nhd"));
  // lengths [batch, 1]: JAX compares its shape with (batch,), so this is P5 in JAX's words.
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[batch_mismatch] `lengths` and `q` must have the same batch size");
  EXPECT_EQ(r.err_line(1), "lengths has shape (3, 1); it holds one entry per sequence: shape (3,)");
}

TEST_F(Cli, PagedLengthsOfRankTwo) {
  const Problem p = random_problem(31, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p);
  const std::string inputs =
      "paged --q q.npy --k-pages k.npy --v-pages v.npy --lengths l2.npy --page-indices table.npy";
  // [batch, 1] under both profiles: JAX's P5 text, as JAX gives it.
  save<std::int32_t>("l2.npy", {p.batch, 1}, cast<std::int32_t>(p.lengths));
  for (const char* profile : {"reference", "jax"}) {
    SCOPED_TRACE(profile);
    const Result r = run(in_dir(*this, inputs + " --profile " + profile));
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0),
              "attnref: error[batch_mismatch] `lengths` and `q` must have the same batch size");
    EXPECT_EQ(r.err_line(1),
              "lengths has shape (3, 1); it holds one entry per sequence: shape (3,)");
  }
  // A float [batch, 1] is still P5: JAX's dtype check (P7) comes later.
  save<float>("l2.npy", {p.batch, 1}, cast<float>(p.lengths));
  Result r = run(in_dir(*this, inputs + " --profile jax"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[batch_mismatch] `lengths` and `q` must have the same batch size");
  // JAX's order: P2 (GQA) comes before P5.
  save<float>("q3.npy", {p.batch, 3, p.dim},
              std::vector<float>(static_cast<std::size_t>(p.batch * 3 * p.dim), 0.0f));
  r = run(in_dir(*this,
                 "paged --q q3.npy --k-pages k.npy --v-pages v.npy --lengths l2.npy "
                 "--page-indices table.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[gqa_not_divisible] Number of Q heads must be divisible by number of "
            "KV heads. Got 3 and 2.");
  // Another first extent, or another rank: a rank error, in the singular for 1.
  save<std::int32_t>("l2.npy", {p.batch + 1, 1}, std::vector<std::int32_t>(4, 1));
  r = run(in_dir(*this, inputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[rank_mismatch] lengths must have 1 dimension; got 2");
  EXPECT_EQ(r.err_line(1), "lengths is [batch]");
  save<std::int32_t>("l2.npy", {p.batch, 1, 1}, cast<std::int32_t>(p.lengths));
  r = run(in_dir(*this, inputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[rank_mismatch] lengths must have 1 dimension; got 3");
}

TEST_F(Cli, PagedIndexDtypeTextsComeFromTheLibrary) {
  const Problem p = random_problem(32, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p);
  struct Case {
    DType lengths, table;
    Profile profile;
  } cases[] = {
      {DType::kFloat32, DType::kInt32, Profile::kJax},
      {DType::kInt64, DType::kInt64, Profile::kJax},
      {DType::kFloat32, DType::kInt32, Profile::kReference},
      {DType::kInt32, DType::kFloat64, Profile::kReference},
      {DType::kInt32, DType::kInt64, Profile::kReference},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.lengths)) + " " + dtype_name(c.table));
    const auto write = [&](const char* name, DType t, std::vector<std::int64_t> shape,
                           const std::vector<std::int64_t>& v) {
      if (t == DType::kInt32) save<std::int32_t>(name, shape, cast<std::int32_t>(v));
      if (t == DType::kInt64) save<std::int64_t>(name, shape, v);
      if (t == DType::kFloat32) save<float>(name, shape, cast<float>(v));
      if (t == DType::kFloat64) save<double>(name, shape, cast<double>(v));
    };
    write("lengths.npy", c.lengths, {p.batch}, p.lengths);
    write("table.npy", c.table, {p.batch, p.pps}, p.table);
    const Status want = check_paged_index_dtypes(c.lengths, c.table, c.profile);
    ASSERT_FALSE(want.ok());
    const Result r = run(in_dir(*this, std::string("paged ") + kInputs + " --profile " +
                                           (c.profile == Profile::kJax ? "jax" : "reference")));
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0), std::string("attnref: error[") + error_code_name(want.code()) + "] " +
                                 want.message());
    EXPECT_EQ(r.err_line(1), want.hint());
  }
}

// --- paged: files and usage (exit 1) ---------------------------------------------------------

TEST_F(Cli, PagedBadFiles) {
  const Problem p = random_problem(29, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p);
  Result r = run(in_dir(*this,
                        "paged --q missing.npy --k-pages k.npy --v-pages v.npy "
                        "--lengths lengths.npy --page-indices table.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("missing.npy") +
                               ": cannot open: No such file or directory");

  std::ofstream(path("garbage.npy")) << "this is not numpy";
  r = run(in_dir(*this,
                 "paged --q q.npy --k-pages garbage.npy --v-pages v.npy "
                 "--lengths lengths.npy --page-indices table.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0).rfind(
                "attnref: error[bad_file] " + path("garbage.npy") + ": not a .npy file", 0),
            0u)
      << r.err;

  // Fortran order (np.save of a column-major array) reads as the same array in C order: q's
  // bytes under a fortran_order header are the array whose element (b, h, d) is
  // q[b + B * (h + H * d)] of the flat data.
  std::string bytes = cli_test::slurp(path("q.npy"));
  bytes.replace(bytes.find("False"), 5, "True ");
  std::ofstream(path("fortran.npy"), std::ios::binary) << bytes;
  std::vector<float> c_order(p.q.size());
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.q_heads; ++h) {
      for (std::int64_t d = 0; d < p.dim; ++d) {
        c_order[static_cast<std::size_t>((b * p.q_heads + h) * p.dim + d)] =
            static_cast<float>(p.q[static_cast<std::size_t>(b + p.batch * (h + p.q_heads * d))]);
      }
    }
  }
  save<float>("c_order.npy", p.q_shape(), c_order);
  const std::string rest =
      " --k-pages k.npy --v-pages v.npy --lengths lengths.npy --page-indices table.npy";
  r = run(in_dir(*this, "paged --q fortran.npy --out from_fortran.npy" + rest));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run(in_dir(*this, "paged --q c_order.npy --out from_c.npy" + rest));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(cli_test::slurp(path("from_fortran.npy")), cli_test::slurp(path("from_c.npy")));

  // A well-formed file of a dtype attnref does not read is that argument's dtype error (exit
  // 2), as in the Python module: the page table's int32 header relabelled uint32.
  bytes = cli_test::slurp(path("table.npy"));
  bytes.replace(bytes.find("<i4"), 3, "<u4");
  std::ofstream(path("table_u4.npy"), std::ios::binary) << bytes;
  r = run(in_dir(*this,
                 "paged --q q.npy --k-pages k.npy --v-pages v.npy --lengths lengths.npy "
                 "--page-indices table_u4.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] page_indices has dtype uint32, which attnref "
            "does not read");

  // Truncated data.
  bytes = cli_test::slurp(path("v.npy"));
  std::ofstream(path("short.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  r = run(in_dir(*this,
                 "paged --q q.npy --k-pages k.npy --v-pages short.npy "
                 "--lengths lengths.npy --page-indices table.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err_line(0).find(": data is truncated: shape (2, 9, 4, 8) of float32 needs 2304 "
                               "bytes, the file has 2300 after the header"),
            std::string::npos)
      << r.err;

  // --out into a directory that does not exist.
  r = run(in_dir(*this, std::string("paged ") + kInputs + " --out nodir/out.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("nodir/out.npy") +
                               ": cannot create: No such file or directory");
}

TEST_F(Cli, PagedUsageErrors) {
  struct Case {
    const char* args;
    const char* message;
  } cases[] = {
      {"--k-pages k.npy", "attnref-run paged: missing required option --q"},
      {"--q q.npy --k-pages k.npy --v-pages v.npy --lengths l.npy --page-indices t.npy "
       "--kv-layout xyz",
       "attnref-run paged: --kv-layout must be one of jax, nhd, hnd; got 'xyz'"},
      {"--q q.npy --k-pages k.npy --v-pages v.npy --lengths l.npy --page-indices t.npy "
       "--profile tpu",
       "attnref-run paged: --profile must be one of jax, reference; got 'tpu'"},
      {"--q q.npy --k-pages k.npy --v-pages v.npy --lengths l.npy --page-indices t.npy "
       "--sm-scale half",
       "attnref-run paged: --sm-scale takes a number; got 'half'"},
      {"--q q.npy --k-pages k.npy --v-pages v.npy --lengths l.npy --page-indices t.npy "
       "--atol 1e-3",
       "attnref-run paged: --atol and --rtol need --expect"},
      {"--q q.npy --k-pages k.npy --v-pages v.npy --lengths l.npy --page-indices t.npy "
       "--check-only=yes",
       "attnref-run paged: --check-only takes no value"},
      {"--q q.npy --k-pages k.npy --v-pages v.npy --lengths l.npy --page-indices t.npy "
       "--pages-per-compute-block 1.5",
       "attnref-run paged: --pages-per-compute-block takes an integer; got '1.5'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = run(in_dir(*this, std::string("paged ") + c.args));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err_line(0), c.message);
  }
  // A negative --atol is a usage error too (checked before any file is read).
  const Problem p = random_problem(30, 3, 4, 2, 8, 4, 2);
  save_problem<float>(*this, p);
  save<float>("e.npy", p.q_shape(), cast<float>(reference(p)));
  const Result r =
      run(in_dir(*this, std::string("paged ") + kInputs + " --expect e.npy --atol -1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0), "attnref-run paged: --atol and --rtol must be non-negative numbers");
}

}  // namespace
}  // namespace attnref
