// SPDX-License-Identifier: Apache-2.0
// attnref-run ragged, end to end: runs the built program on .npy files this test writes and
// checks exit codes, stderr/stdout text and the result against the float64 ragged oracle
// (reference/).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "attnref/io/npy.hpp"
#include "cli_harness.hpp"
#include "reference/ragged.hpp"

namespace attnref {
namespace {

using cli_test::Result;

/// A non-negative int64 index as a container index.
std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

// A ragged batch in float64: q [T, Hq, D], pool [P, S, 2 Hkv, D], metadata padded to max_seqs.
// Everything the kernel must not read is NaN (int8: -128) or an out-of-pool page index.
struct Problem {
  std::int64_t tokens = 0, hq = 0, hkv = 0, dim = 0, page_size = 0, pages = 0, max_seqs = 0,
               pps = 0, num_seqs = 0;
  std::vector<double> q, kv;
  std::vector<std::int64_t> kv_lens, table, cu;
  double sm_scale = 1.0;
  std::optional<std::int64_t> window;
  std::optional<double> soft_cap;
  std::optional<double> k_scale, v_scale;

  std::size_t at(std::int64_t p, std::int64_t s, std::int64_t c, std::int64_t d) const {
    return static_cast<std::size_t>(((p * page_size + s) * 2 * hkv + c) * dim + d);
  }
};

Problem random_problem(std::uint32_t seed, const std::vector<std::pair<int, int>>& seqs,
                       std::int64_t hq, std::int64_t hkv, std::int64_t dim, std::int64_t page_size,
                       bool integer_kv = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  Problem p;
  p.hq = hq;
  p.hkv = hkv;
  p.dim = dim;
  p.page_size = page_size;
  p.num_seqs = static_cast<std::int64_t>(seqs.size());
  p.max_seqs = p.num_seqs + 2;
  std::int64_t max_kv = 1;
  for (const auto& s : seqs) {
    p.tokens += s.first;
    p.pages += (s.second + page_size - 1) / page_size;
    max_kv = std::max<std::int64_t>(max_kv, s.second);
  }
  p.tokens += 3;
  p.pages += 2;
  p.pps = (max_kv + page_size - 1) / page_size + 1;
  const double poison = integer_kv ? -128.0 : std::numeric_limits<double>::quiet_NaN();
  p.q.assign(static_cast<std::size_t>(p.tokens * hq * dim),
             std::numeric_limits<double>::quiet_NaN());
  for (std::int64_t i = 0; i < (p.tokens - 3) * hq * dim; ++i) p.q[ix(i)] = normal(rng);
  p.kv.assign(static_cast<std::size_t>(p.pages * page_size * 2 * hkv * dim), poison);
  std::vector<std::int64_t> order(static_cast<std::size_t>(p.pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  p.kv_lens.assign(static_cast<std::size_t>(p.max_seqs), 0);
  p.table.assign(static_cast<std::size_t>(p.max_seqs * p.pps), 1 << 30);
  p.cu.assign(static_cast<std::size_t>(p.max_seqs + 1), 0);
  std::size_t next = 0;
  for (std::int64_t i = 0; i < p.num_seqs; ++i) {
    const std::pair<int, int>& seq = seqs[ix(i)];
    p.kv_lens[ix(i)] = seq.second;
    p.cu[ix(i + 1)] = p.cu[ix(i)] + seq.first;
    for (std::int64_t j = 0; j * page_size < seq.second; ++j) {
      const std::int64_t page = order[next++];
      p.table[ix(i * p.pps + j)] = page;
      for (std::int64_t s = 0; s < page_size && j * page_size + s < seq.second; ++s)
        for (std::int64_t c = 0; c < 2 * hkv; ++c)
          for (std::int64_t d = 0; d < dim; ++d)
            p.kv[p.at(page, s, c, d)] =
                integer_kv ? std::max(-127.0, std::min(127.0, std::round(normal(rng) * 40)))
                           : normal(rng);
    }
  }
  for (std::int64_t i = p.num_seqs; i < p.max_seqs; ++i) p.cu[ix(i + 1)] = p.cu[ix(i)];
  return p;
}

// The float64 reference: the ragged oracle of reference/ragged.hpp over float32 copies of q and
// the pool (what the program reads from float32 files; int8 values are exact in float32, and the
// oracle dequantizes them in q's dtype as the kernel does).
std::vector<double> reference(const Problem& p) {
  const std::vector<float> q(p.q.begin(), p.q.end()), kv(p.kv.begin(), p.kv.end());
  const std::int64_t num_seqs = p.num_seqs;
  RaggedPagedAttentionArgs<float, float, std::int64_t> a;
  a.q = {q.data(), {p.tokens, p.hq, p.dim}};
  const TensorView<const float, 4> pool(kv.data(), {p.pages, p.page_size, 2 * p.hkv, p.dim});
  EXPECT_TRUE(ragged_kv_views(pool, &a.k_pages, &a.v_pages).ok());
  a.kv_lens = {p.kv_lens.data(), {p.max_seqs}};
  a.page_indices = {p.table.data(), {p.max_seqs, p.pps}};
  a.cu_q_lens = {p.cu.data(), {p.max_seqs + 1}};
  a.num_seqs = {&num_seqs, {1}};
  a.sm_scale = static_cast<float>(p.sm_scale);
  a.sliding_window = p.window;
  if (p.soft_cap) a.soft_cap = static_cast<float>(*p.soft_cap);
  if (p.k_scale) a.k_scale = static_cast<float>(*p.k_scale);
  if (p.v_scale) a.v_scale = static_cast<float>(*p.v_scale);
  return reference::ragged_paged_attention(a);
}

class RaggedCli : public cli_test::CliTest {
 protected:
  /// Runs `attnref-run ragged <args>`; every word ending in .npy is a file of this test.
  Result run(const std::string& args) const { return run_subcommand("ragged", args); }

  template <class T>
  static std::vector<T> cast(const std::vector<double>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
    return out;
  }

  /// Writes q.npy, kv.npy, kv_lens.npy, table.npy, cu.npy, n.npy.
  template <class F, class I = std::int32_t, class KV = F>
  void save_problem(const Problem& p) {
    save<F>("q.npy", {p.tokens, p.hq, p.dim}, cast<F>(p.q));
    save<KV>("kv.npy", {p.pages, p.page_size, 2 * p.hkv, p.dim}, cast<KV>(p.kv));
    std::vector<I> lens(p.kv_lens.begin(), p.kv_lens.end()), table(p.table.begin(), p.table.end()),
        cu(p.cu.begin(), p.cu.end());
    save<I>("kv_lens.npy", {p.max_seqs}, lens);
    save<I>("table.npy", {p.max_seqs, p.pps}, table);
    save<I>("cu.npy", {p.max_seqs + 1}, cu);
    save<std::int32_t>("n.npy", {1}, {static_cast<std::int32_t>(p.num_seqs)});
  }

  std::vector<double> read_out(const std::string& name) const {
    NpyArray a;
    const NpyStatus s = read_npy(path(name), &a);
    EXPECT_TRUE(s.ok()) << s.message();
    const float* f = a.data<float>();
    if (f == nullptr) return {};
    return std::vector<double>(f, f + a.numel());
  }
};

const char* kInputs =
    "--q q.npy --kv-pages kv.npy --kv-lens kv_lens.npy --page-indices table.npy --cu-q-lens cu.npy "
    "--num-seqs n.npy";

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
  }
  return m;
}

// Decode rows, chunked-prefill rows and a sequence with no rows this step.
const std::vector<std::pair<int, int>> kMixed = {{1, 37}, {12, 40}, {0, 9},
                                                 {1, 5},  {7, 7},   {5, 70}};

TEST_F(RaggedCli, RoundTripMatchesFloat64Reference) {
  struct Case {
    std::uint32_t seed;
    std::int64_t hq, hkv, dim, page_size;
    double sm_scale;
    std::optional<std::int64_t> window;
    std::optional<double> soft_cap;
  } cases[] = {
      {1, 8, 2, 16, 4, 0.25, std::nullopt, std::nullopt},
      {2, 4, 4, 8, 16, 1.0, 5, std::nullopt},
      {3, 8, 1, 32, 3, 0.2, std::nullopt, 5.0},
      {4, 6, 2, 8, 8, 0.5, 9, 10.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.seed);
    Problem p = random_problem(c.seed, kMixed, c.hq, c.hkv, c.dim, c.page_size);
    p.sm_scale = c.sm_scale;
    p.window = c.window;
    p.soft_cap = c.soft_cap;
    save_problem<float>(p);
    std::ostringstream args;
    args << kInputs << " --out out.npy --sm-scale " << c.sm_scale;
    if (c.window) args << " --sliding-window " << *c.window;
    if (c.soft_cap) args << " --soft-cap " << *c.soft_cap;
    const Result r = run(args.str());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "wrote " + path("out.npy") + " (float32, shape (" + std::to_string(p.tokens) +
                         ", " + std::to_string(c.hq) + ", " + std::to_string(c.dim) + "))\n");
    const std::vector<double> got = read_out("out.npy");
    EXPECT_LT(max_abs_diff(got, reference(p)), 2e-5);
    // The padding rows (the last 3) are zero.
    for (std::size_t i = got.size() - static_cast<std::size_t>(3 * c.hq * c.dim); i < got.size();
         ++i)
      ASSERT_EQ(got[i], 0.0);
  }
}

// The same batch with K and V as two engine-layout files (--k-pages, --v-pages, --kv-layout)
// gives the combined pool's numbers; mixing the two forms is a usage error.
TEST_F(RaggedCli, SeparateKvFilesInEveryLayout) {
  const Problem p = random_problem(11, kMixed, 8, 2, 16, 4);
  save_problem<float>(p);
  ASSERT_EQ(run(std::string(kInputs) + " --out want.npy").code, 0);
  const std::vector<double> want = read_out("want.npy");
  const std::string meta =
      "--q q.npy --kv-lens kv_lens.npy --page-indices table.npy --cu-q-lens cu.npy "
      "--num-seqs n.npy";
  for (const char* layout : {"jax", "nhd", "hnd"}) {
    SCOPED_TRACE(layout);
    // Physical shape and offset of (KV head h, page q, slot s, dim d) in each layout.
    const std::int64_t H = p.hkv, P = p.pages, S = p.page_size, D = p.dim;
    const std::string l = layout;
    std::vector<std::int64_t> shape = l == "jax"   ? std::vector<std::int64_t>{H, P, S, D}
                                      : l == "nhd" ? std::vector<std::int64_t>{P, S, H, D}
                                                   : std::vector<std::int64_t>{P, H, S, D};
    std::vector<float> k(p.kv.size() / 2), v(p.kv.size() / 2);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t q = 0; q < P; ++q)
        for (std::int64_t s = 0; s < S; ++s)
          for (std::int64_t d = 0; d < D; ++d) {
            const std::int64_t at = l == "jax"   ? ((h * P + q) * S + s) * D + d
                                    : l == "nhd" ? ((q * S + s) * H + h) * D + d
                                                 : ((q * H + h) * S + s) * D + d;
            k[ix(at)] = static_cast<float>(p.kv[p.at(q, s, 2 * h, d)]);
            v[ix(at)] = static_cast<float>(p.kv[p.at(q, s, 2 * h + 1, d)]);
          }
    save<float>("k.npy", shape, k);
    save<float>("v.npy", shape, v);
    const Result r =
        run(meta + " --k-pages k.npy --v-pages v.npy --kv-layout " + l + " --out got.npy");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_LE(max_abs_diff(read_out("got.npy"), want), 1e-6);
  }
  const Result both = run(std::string(kInputs) + " --k-pages k.npy --v-pages v.npy");
  EXPECT_EQ(both.code, 1) << both.err;
  EXPECT_NE(both.err.find("--kv-pages"), std::string::npos) << both.err;
  const Result layout_alone = run(std::string(kInputs) + " --kv-layout nhd");
  EXPECT_EQ(layout_alone.code, 1) << layout_alone.err;
}

TEST_F(RaggedCli, Float64WithExpectAndMismatch) {
  Problem p = random_problem(5, kMixed, 4, 2, 16, 4);
  p.sm_scale = 0.3;
  p.window = 20;
  save_problem<double>(p);
  std::vector<double> want = reference(p);
  // The reference reads inputs as float32; the program reads float64: well within 1e-5.
  save<double>("expected.npy", {p.tokens, p.hq, p.dim}, want);
  Result r =
      run(std::string(kInputs) +
          " --sm-scale 0.3 --sliding-window 20 --expect expected.npy --atol 1e-5 --rtol 1e-5");
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(r.out.rfind("match: ", 0), 0u) << r.out;
  want[7] += 1.0;
  save<double>("expected.npy", {p.tokens, p.hq, p.dim}, want);
  r = run(std::string(kInputs) + " --sm-scale 0.3 --sliding-window 20 --expect expected.npy");
  EXPECT_EQ(r.code, 3) << r.err << r.out;
}

TEST_F(RaggedCli, Int8PagesWithScales) {
  Problem p = random_problem(6, kMixed, 8, 2, 16, 4, /*integer_kv=*/true);
  p.sm_scale = 0.25;
  p.k_scale = 0.025;
  p.v_scale = 0.05;
  save_problem<float, std::int32_t, std::int8_t>(p);
  const Result r =
      run(std::string(kInputs) + " --sm-scale 0.25 --k-scale 0.025 --v-scale 0.05 --out out.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(max_abs_diff(read_out("out.npy"), reference(p)), 2e-5);
}

TEST_F(RaggedCli, CheckOnlyBothProfiles) {
  const Problem p = random_problem(7, kMixed, 8, 2, 16, 4);
  save_problem<float>(p);
  for (const char* profile : {"reference", "jax"}) {
    const Result r = run(std::string(kInputs) + " --check-only --profile " + profile);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "ok\n");
    EXPECT_EQ(r.err, "");
  }
  const Result r = run(std::string(kInputs) + " --check-only --out o.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err_line(0),
            "attnref-run ragged: --check-only runs nothing, so it takes no --out, --lse-out or "
            "--expect");
}

// JAX's validation tests, through the program.
TEST_F(RaggedCli, JaxValidationMessages) {
  const Problem p = random_problem(8, kMixed, 8, 2, 16, 4);
  save_problem<float>(p);
  for (const char* w : {"0", "-1"}) {
    const Result r = run(std::string(kInputs) + " --sliding-window " + w);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0), std::string("attnref: error[invalid_sliding_window] sliding_window=") +
                                 w + " must be positive.");
  }
  const Result r = run(std::string(kInputs) + " --soft-cap 0.0 --profile jax");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[invalid_soft_cap] soft_cap=0.0 must not be 0.0.");
}

// JAX's blocking knobs (R9..R11), as the Python module takes them: checked, no numerical effect.
TEST_F(RaggedCli, BlockingOptionsAreCheckedAndChangeNothing) {
  const Problem p = random_problem(8, kMixed, 8, 2, 16, 4);
  save_problem<float>(p);
  const std::string pps = std::to_string(p.pps);
  Result r = run(std::string(kInputs) + " --num-kv-pages-per-block " + std::to_string(p.pps + 1));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[invalid_block_size] num_kv_pages_per_block=" +
                               std::to_string(p.pps + 1) + " must be in range (0, " + pps + "].");
  r = run(std::string(kInputs) + " --num-queries-per-block 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[invalid_block_size] num_queries_per_block=0 must be positive.");
  r = run(std::string(kInputs) + " --vmem-limit-bytes -1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[invalid_block_size] vmem_limit_bytes=-1 must be positive.");
  r = run(std::string(kInputs) + " --out plain.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run(std::string(kInputs) + " --num-kv-pages-per-block " + pps +
          " --num-queries-per-block 3 --vmem-limit-bytes 65536 --out blocked.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(load("blocked.npy").bytes, load("plain.npy").bytes);
}

TEST_F(RaggedCli, MetadataErrors) {
  Problem p = random_problem(9, kMixed, 8, 2, 16, 4);
  p.kv_lens[1] = 11;  // 12 query rows, 11 keys
  save_problem<float>(p);
  Result r = run(std::string(kInputs) + " --out out.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[query_longer_than_kv] q_len=12 must be less or equal to kv_len=11 at "
            "sequence 1.");
  p.kv_lens[1] = 40;
  p.table[0] = -1;  // sequence 0, page 0: live
  save_problem<float>(p);
  r = run(std::string(kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[page_index_out_of_range] page_indices[0, 0]=-1 is outside [0, " +
                std::to_string(p.pages) + ") (total_pages)");
  p.table[0] = 0;
  save_problem<float>(p);
  save<std::int32_t>("n.npy", {2}, {6, 6});
  r = run(std::string(kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[shape_mismatch] num_seqs.shape=(2,) must be (1,)");
  save<std::int32_t>("n.npy", {1}, {9});
  r = run(std::string(kInputs) + " --profile jax");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[num_seqs_out_of_range] num_seqs[0]=9 must be less or equal to "
            "max_num_seqs=8");
}

TEST_F(RaggedCli, JaxOnlyRules) {
  // f32 with 3 KV heads: 6 combined heads are not "XLA fully tiled" (R14); int64 metadata is
  // JAX's R5. The reference profile runs both.
  const Problem p = random_problem(10, kMixed, 3, 3, 8, 4);
  save_problem<float, std::int64_t>(p);
  Result r = run(std::string(kInputs) + " --profile jax");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] The dtype of `kv_lens`, `page_indices`, and "
            "`cu_q_lens` must be int32. Got kv_lens.dtype=dtype('int64'), "
            "page_indices.dtype=dtype('int64'), cu_q_lens.dtype=dtype('int64').");
  save_problem<float>(p);
  r = run(std::string(kInputs) + " --profile jax");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[tiling_rule] Not implemented: num_combined_kv_heads=6 can not be XLA "
            "fully tiled.");
  r = run(std::string(kInputs) + " --out out.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(max_abs_diff(read_out("out.npy"), reference(p)), 2e-5);
}

TEST_F(RaggedCli, MixedIndexDtypes) {
  const Problem p = random_problem(11, kMixed, 4, 2, 8, 4);
  save_problem<float>(p);
  std::vector<std::int64_t> cu(p.cu.begin(), p.cu.end());
  save<std::int64_t>("cu.npy", {p.max_seqs + 1}, cu);
  Result r = run(std::string(kInputs) + " --profile jax");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] The dtype of `kv_lens`, `page_indices`, and "
            "`cu_q_lens` must be int32. Got kv_lens.dtype=dtype('int32'), "
            "page_indices.dtype=dtype('int32'), cu_q_lens.dtype=dtype('int64').");
  r = run(std::string(kInputs));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0),
            "attnref: error[dtype_not_supported] kv_lens (int32), page_indices (int32) and "
            "cu_q_lens (int64) must have the same dtype");
}

TEST_F(RaggedCli, MetadataOfRankTwoGetsJaxShapeTexts) {
  // max_seqs = 8: JAX's R1, R3 and R4 print the real shape, in JAX's order.
  const Problem p = random_problem(13, kMixed, 4, 2, 8, 4);
  save_problem<float>(p);
  save<std::int32_t>("n2.npy", {1, 1}, {static_cast<std::int32_t>(p.num_seqs)});
  std::vector<std::int32_t> lens(p.kv_lens.begin(), p.kv_lens.end()), cu(p.cu.begin(), p.cu.end());
  save<std::int32_t>("kv_lens2.npy", {p.max_seqs, 1}, lens);
  save<std::int32_t>("cu2.npy", {p.max_seqs + 1, 1}, cu);
  const std::string base = "--q q.npy --kv-pages kv.npy --page-indices table.npy";
  for (const char* profile : {"reference", "jax"}) {
    SCOPED_TRACE(profile);
    const std::string tail = std::string(" --profile ") + profile;
    Result r = run(base + " --kv-lens kv_lens.npy --cu-q-lens cu.npy --num-seqs n2.npy" + tail);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0), "attnref: error[shape_mismatch] num_seqs.shape=(1, 1) must be (1,)");
    r = run(base + " --kv-lens kv_lens2.npy --cu-q-lens cu2.npy --num-seqs n.npy" + tail);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0),
              "attnref: error[shape_mismatch] Expected kv_lens.shape=(8, 1) to be (8,) where "
              "`max_num_seqs` is `page_indices.shape[0]`.");
    r = run(base + " --kv-lens kv_lens.npy --cu-q-lens cu2.npy --num-seqs n.npy" + tail);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0),
              "attnref: error[shape_mismatch] Expected cu_q_lens.shape=(9, 1) to be (9,)  where "
              "`max_num_seqs` is `page_indices.shape[0]`.");
  }
  // Another first extent: a rank error, in the singular for 1.
  save<std::int32_t>("kv_lens2.npy", {p.max_seqs + 1, 1}, std::vector<std::int32_t>(9, 1));
  Result r = run(base + " --kv-lens kv_lens2.npy --cu-q-lens cu.npy --num-seqs n.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err_line(0), "attnref: error[rank_mismatch] kv_lens must have 1 dimension; got 2");
  EXPECT_EQ(r.err_line(1), "kv_lens is [max_num_seqs]");
}

TEST_F(RaggedCli, IndexDtypeTextsComeFromTheLibrary) {
  const Problem p = random_problem(14, kMixed, 4, 2, 8, 4);
  save_problem<float>(p);
  struct Case {
    DType kv_lens, num_seqs;
    Profile profile;
  } cases[] = {
      {DType::kFloat32, DType::kInt32, Profile::kJax},
      {DType::kInt64, DType::kInt32, Profile::kJax},
      {DType::kFloat32, DType::kInt32, Profile::kReference},
      {DType::kInt32, DType::kFloat32, Profile::kReference},
      {DType::kInt32, DType::kFloat64, Profile::kJax},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.kv_lens)) + " " + dtype_name(c.num_seqs));
    if (c.kv_lens == DType::kFloat32)
      save<float>("kv_lens.npy", {p.max_seqs},
                  cast<float>(std::vector<double>(p.kv_lens.begin(), p.kv_lens.end())));
    if (c.kv_lens == DType::kInt64) save<std::int64_t>("kv_lens.npy", {p.max_seqs}, p.kv_lens);
    if (c.kv_lens == DType::kInt32) {
      save<std::int32_t>("kv_lens.npy", {p.max_seqs},
                         std::vector<std::int32_t>(p.kv_lens.begin(), p.kv_lens.end()));
    }
    if (c.num_seqs == DType::kFloat32) save<float>("n.npy", {1}, {static_cast<float>(p.num_seqs)});
    if (c.num_seqs == DType::kFloat64)
      save<double>("n.npy", {1}, {static_cast<double>(p.num_seqs)});
    if (c.num_seqs == DType::kInt32) {
      save<std::int32_t>("n.npy", {1}, {static_cast<std::int32_t>(p.num_seqs)});
    }
    const Status want =
        check_ragged_index_dtypes(c.kv_lens, DType::kInt32, DType::kInt32, c.num_seqs, c.profile);
    ASSERT_FALSE(want.ok());
    const Result r = run(std::string(kInputs) + " --profile " +
                         (c.profile == Profile::kJax ? "jax" : "reference"));
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err_line(0), std::string("attnref: error[") + error_code_name(want.code()) + "] " +
                                 want.message());
    EXPECT_EQ(r.err_line(1), want.hint());
  }
}

TEST_F(RaggedCli, UsageErrorsAndHelp) {
  const Problem p = random_problem(12, kMixed, 4, 2, 8, 4);
  save_problem<float>(p);
  Result r =
      run("--q q.npy --kv-pages kv.npy --kv-lens kv_lens.npy --page-indices table.npy "
          "--cu-q-lens cu.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err_line(0).find("missing required option --num-seqs"), std::string::npos) << r.err;
  r = run(std::string(kInputs) + " --sliding-window five");
  EXPECT_EQ(r.code, 1);
  r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("usage: attnref-run ragged --q Q.npy --kv-pages KV.npy", 0), 0u) << r.out;
}

}  // namespace
}  // namespace attnref
