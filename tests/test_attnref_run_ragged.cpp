// SPDX-License-Identifier: Apache-2.0
// attnref-run ragged, end to end: runs the built program on .npy files this test writes and
// checks exit codes, stderr/stdout text and the result against a plain float64 ragged paged
// attention written here.
#include <sys/stat.h>
#include <sys/wait.h>

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

#ifndef ATTNREF_RUN_PATH
#error "ATTNREF_RUN_PATH must name the attnref-run executable"
#endif

namespace attnref {
namespace {

struct Result {
  int code = -1;
  std::string out, err;
  std::string err_line(std::size_t i) const {
    std::istringstream in(err);
    std::string line;
    for (std::size_t k = 0; k <= i; ++k)
      if (!std::getline(in, line)) return "";
    return line;
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

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
  for (std::int64_t i = 0; i < (p.tokens - 3) * hq * dim; ++i) p.q[i] = normal(rng);
  p.kv.assign(static_cast<std::size_t>(p.pages * page_size * 2 * hkv * dim), poison);
  std::vector<std::int64_t> order(static_cast<std::size_t>(p.pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  p.kv_lens.assign(static_cast<std::size_t>(p.max_seqs), 0);
  p.table.assign(static_cast<std::size_t>(p.max_seqs * p.pps), 1 << 30);
  p.cu.assign(static_cast<std::size_t>(p.max_seqs + 1), 0);
  std::size_t next = 0;
  for (std::int64_t i = 0; i < p.num_seqs; ++i) {
    p.kv_lens[i] = seqs[i].second;
    p.cu[i + 1] = p.cu[i] + seqs[i].first;
    for (std::int64_t j = 0; j * page_size < seqs[i].second; ++j) {
      const std::int64_t page = order[next++];
      p.table[i * p.pps + j] = page;
      for (std::int64_t s = 0; s < page_size && j * page_size + s < seqs[i].second; ++s)
        for (std::int64_t c = 0; c < 2 * hkv; ++c)
          for (std::int64_t d = 0; d < dim; ++d)
            p.kv[p.at(page, s, c, d)] =
                integer_kv ? std::max(-127.0, std::min(127.0, std::round(normal(rng) * 40)))
                           : normal(rng);
    }
  }
  for (std::int64_t i = p.num_seqs; i < p.max_seqs; ++i) p.cu[i + 1] = p.cu[i];
  return p;
}

// The float64 reference: per live row and query head, every key with the causal/window mask.
// K/V values are taken as the float32 the program reads (then scaled, as float32).
std::vector<double> reference(const Problem& p) {
  std::vector<double> out(p.q.size(), 0.0);
  const std::int64_t g = p.hq / p.hkv;
  auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  auto value = [&](std::int64_t page, std::int64_t s, std::int64_t c, std::int64_t d) {
    const double x = f32(p.kv[p.at(page, s, c, d)]);
    const std::optional<double>& scale = c % 2 == 0 ? p.k_scale : p.v_scale;
    return scale ? f32(static_cast<float>(x) * static_cast<float>(*scale)) : x;
  };
  for (std::int64_t i = 0; i < p.num_seqs; ++i) {
    const std::int64_t q_len = p.cu[i + 1] - p.cu[i], kv_len = p.kv_lens[i];
    for (std::int64_t r = 0; r < q_len; ++r) {
      const std::int64_t t = p.cu[i] + r, pos = kv_len - q_len + r;
      for (std::int64_t h = 0; h < p.hq; ++h) {
        const std::int64_t kh = h / g;
        std::vector<double> w(static_cast<std::size_t>(kv_len), 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t c = 0; c < kv_len; ++c) {
          if (c > pos || (p.window && c <= pos - *p.window)) continue;
          const std::int64_t page = p.table[i * p.pps + c / p.page_size];
          double x = 0;
          for (std::int64_t d = 0; d < p.dim; ++d)
            x += f32(p.q[(t * p.hq + h) * p.dim + d]) * value(page, c % p.page_size, 2 * kh, d);
          x *= f32(p.sm_scale);
          if (p.soft_cap) x = f32(*p.soft_cap) * std::tanh(x / f32(*p.soft_cap));
          w[c] = x;
          mx = std::max(mx, x);
        }
        double sum = 0;
        for (std::int64_t c = 0; c < kv_len; ++c) {
          const bool masked = c > pos || (p.window && c <= pos - *p.window);
          w[c] = masked ? 0.0 : std::exp(w[c] - mx);
          sum += w[c];
        }
        for (std::int64_t c = 0; c < kv_len; ++c) {
          if (w[c] == 0.0) continue;
          const std::int64_t page = p.table[i * p.pps + c / p.page_size];
          for (std::int64_t d = 0; d < p.dim; ++d)
            out[(t * p.hq + h) * p.dim + d] +=
                w[c] / sum * value(page, c % p.page_size, 2 * kh + 1, d);
        }
      }
    }
  }
  return out;
}

class RaggedCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "attnref_run_ragged_" + info->name();
    std::system(("rm -rf '" + dir_ + "'").c_str());
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << dir_;
  }
  void TearDown() override {
    if (!HasFailure()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  /// Runs `attnref-run ragged <args>`; every word ending in .npy is a file of this test.
  Result run(const std::string& args) const {
    std::string cmd = std::string("'") + ATTNREF_RUN_PATH + "' ragged";
    std::istringstream in(args);
    std::string word;
    while (in >> word) {
      if (word.size() > 4 && word.compare(word.size() - 4, 4, ".npy") == 0) word = path(word);
      cmd += " '" + word + "'";
    }
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const int status = std::system((cmd + " >'" + out + "' 2>'" + err + "'").c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  template <class T>
  void save(const std::string& name, std::vector<std::int64_t> shape, const std::vector<T>& v) {
    const NpyStatus s = write_npy(path(name), make_npy_array<T>(std::move(shape), v.data()));
    ASSERT_TRUE(s.ok()) << s.message();
  }

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

 private:
  std::string dir_;
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
            "attnref-run ragged: --check-only runs nothing, so it takes neither --out nor "
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
