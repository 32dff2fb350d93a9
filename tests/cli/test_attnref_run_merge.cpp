// SPDX-License-Identifier: Apache-2.0
// attnref-run --lse-out (paged, ragged) and attnref-run merge, end to end: a paged problem's
// pages split at random page boundaries, each part run by `paged --lse-out`, the parts merged by
// `merge`, equal the float64 oracle over the whole; the logsumexp files against the oracles
// (-inf for an empty sequence and for ragged padding rows); merge's errors and output files.
#include <gtest/gtest.h>
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnref/io/npy.hpp"
#include "attnref/validate/ragged.hpp"
#include "cli_harness.hpp"
#include "reference/paged.hpp"
#include "reference/ragged.hpp"

namespace attnref {
namespace {

using cli_test::Result;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

class Merge : public cli_test::CliTest {
 public:
  /// A file's values as doubles (float32 files, as attnref-run writes them).
  std::vector<double> values(const std::string& name, const std::vector<std::int64_t>& shape) {
    const NpyArray a = load(name);
    EXPECT_EQ(a.shape, shape) << name;
    EXPECT_EQ(a.dtype, DType::kFloat32) << name;
    std::vector<double> v;
    if (const float* p = a.data<float>())
      for (std::int64_t i = 0; i < a.numel(); ++i) v.push_back(static_cast<double>(p[i]));
    return v;
  }
  /// Writes raw codes (uint16 for bfloat16, uint8) as `name` [shape].
  template <class Code>
  void save_codes(const std::string& name, std::vector<std::int64_t> shape,
                  const std::vector<Code>& codes) {
    const DType raw = sizeof(Code) == 2 ? DType::kUInt16 : DType::kUInt8;
    const NpyStatus s = write_npy(path(name), make_npy_array(raw, std::move(shape), codes.data()));
    ASSERT_TRUE(s.ok()) << s.message();
  }
};

/// got against want within tol * (1 + |want|); infinities exactly.
void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " " << i;
    }
  }
}

// --- a paged problem split at page boundaries ---------------------------------------------------

struct Paged {
  std::int64_t batch = 5, hq = 4, hkv = 2, dim = 8, page_size = 3, pps = 4, pages = 20;
  std::vector<float> q, k, v;
  std::vector<std::int32_t> lengths, table;

  explicit Paged(std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t i = 0; i < batch * hq * dim; ++i) q.push_back(normal(rng));
    for (std::int64_t i = 0; i < hkv * pages * page_size * dim; ++i) {
      k.push_back(normal(rng));
      v.push_back(normal(rng));
    }
    for (std::int64_t b = 0; b < batch; ++b) {
      lengths.push_back(b == 1 ? 0 : static_cast<std::int32_t>(1 + rng() % at(pps * page_size)));
      for (std::int64_t j = 0; j < pps; ++j)
        table.push_back(static_cast<std::int32_t>((b * pps + j * 7) % pages));
    }
  }
  /// The float64 oracle's out and logsumexp for `lens` and `tab`.
  std::vector<double> oracle(const std::vector<std::int32_t>& lens,
                             const std::vector<std::int32_t>& tab, std::vector<double>* lse) const {
    PagedAttentionArgs<float, float, std::int32_t> a;
    a.q = {q.data(), {batch, hq, dim}};
    a.k_pages = {k.data(), {hkv, pages, page_size, dim}};
    a.v_pages = {v.data(), {hkv, pages, page_size, dim}};
    a.lengths = {lens.data(), {batch}};
    a.page_indices = {tab.data(), {batch, pps}};
    return reference::paged_attention(a, nullptr, lse);
  }
};

TEST_F(Merge, PagedPartsOverRandomPageRangesMergeToTheWhole) {
  const Paged p(51);
  std::mt19937 rng(52);
  // Part A: the first c pages of each sequence; part B: the rest (a page table shifted by c).
  std::vector<std::int32_t> len_a, len_b, table_b;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int32_t len = p.lengths[at(b)];
    const std::int64_t used = (len + p.page_size - 1) / p.page_size;
    const std::int64_t c =
        b == 0 ? 0 : (b == 2 ? used : static_cast<std::int64_t>(rng() % at(used + 1)));
    len_a.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(len, c * p.page_size)));
    len_b.push_back(len - len_a.back());
    for (std::int64_t j = 0; j < p.pps; ++j)
      table_b.push_back(j + c < p.pps ? p.table[at(b * p.pps + j + c)] : 0);
  }
  save("q.npy", {p.batch, p.hq, p.dim}, p.q);
  save("k.npy", {p.hkv, p.pages, p.page_size, p.dim}, p.k);
  save("v.npy", {p.hkv, p.pages, p.page_size, p.dim}, p.v);
  save("len_a.npy", {p.batch}, len_a);
  save("len_b.npy", {p.batch}, len_b);
  save("table_a.npy", {p.batch, p.pps}, p.table);
  save("table_b.npy", {p.batch, p.pps}, table_b);
  const std::string common = "--q q.npy --k-pages k.npy --v-pages v.npy ";
  Result r = run_subcommand("paged", common +
                                         "--lengths len_a.npy --page-indices table_a.npy "
                                         "--out a.npy --lse-out la.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + path("la.npy") + " (float32, lse-out, shape (5, 4))"),
            std::string::npos)
      << r.out;
  r = run_subcommand("paged", common +
                                  "--lengths len_b.npy --page-indices table_b.npy --out b.npy "
                                  "--lse-out lb.npy");
  ASSERT_EQ(r.code, 0) << r.err;

  std::vector<double> want_lse;
  const std::vector<double> want = p.oracle(p.lengths, p.table, &want_lse);
  ASSERT_EQ(want_lse[4], kNegInf);  // sequence 1 is empty
  // Each part's logsumexp against the oracle of that part (-inf where a part is empty).
  std::vector<double> want_la, want_lb;
  p.oracle(len_a, p.table, &want_la);
  p.oracle(len_b, table_b, &want_lb);
  expect_near(values("la.npy", {5, 4}), want_la, 2e-6, "la");
  expect_near(values("lb.npy", {5, 4}), want_lb, 2e-6, "lb");
  ASSERT_EQ(want_la[0], kNegInf);  // sequence 0: part A empty
  ASSERT_EQ(want_lb[8], kNegInf);  // sequence 2: part B empty

  std::vector<float> whole(want.begin(), want.end());
  save("whole.npy", {p.batch, p.hq, p.dim}, whole);
  r = run_subcommand("merge",
                     "--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy --out o.npy "
                     "--lse-out l.npy --expect whole.npy --atol 1e-5 --rtol 1e-5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("match: 160 elements"), std::string::npos) << r.out;
  expect_near(values("o.npy", {5, 4, 8}), want, 1e-5, "merged out");
  expect_near(values("l.npy", {5, 4}), want_lse, 4e-6, "merged lse");
  // The other order gives the same file contents.
  r = run_subcommand("merge",
                     "--out-a b.npy --lse-a lb.npy --out-b a.npy --lse-b la.npy --out o2.npy "
                     "--lse-out l2.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(cli_test::slurp(path("o2.npy")), cli_test::slurp(path("o.npy")));
  EXPECT_EQ(cli_test::slurp(path("l2.npy")), cli_test::slurp(path("l.npy")));
}

TEST_F(Merge, RaggedLseOutMatchesTheOraclePaddingRowsAreMinusInf) {
  // Two sequences (q_len, kv_len) = (1, 3) and (3, 5), pages of 2 tokens, 2 padding rows.
  const std::int64_t tokens = 6, hq = 2, hkv = 1, dim = 4, page_size = 2, pages = 6;
  std::mt19937 rng(53);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(at(tokens * hq * dim)), kv(at(pages * page_size * 2 * hkv * dim));
  for (float& x : q) x = normal(rng);
  for (float& x : kv) x = normal(rng);
  const std::vector<std::int32_t> kv_lens{3, 5, 0}, table{4, 1, 0, 2, 5, 3, 0, 0, 0},
      cu{0, 1, 4, 4}, num_seqs{2};
  save("q.npy", {tokens, hq, dim}, q);
  save("kv.npy", {pages, page_size, 2 * hkv, dim}, kv);
  save("kv_lens.npy", {3}, kv_lens);
  save("table.npy", {3, 3}, table);
  save("cu.npy", {4}, cu);
  save("num_seqs.npy", {1}, num_seqs);
  const Result r = run_subcommand(
      "ragged",
      "--q q.npy --kv-pages kv.npy --kv-lens kv_lens.npy --page-indices table.npy --cu-q-lens "
      "cu.npy --num-seqs num_seqs.npy --sm-scale 0.5 --lse-out lse.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  RaggedPagedAttentionArgs<float, float, std::int32_t> a;
  a.q = {q.data(), {tokens, hq, dim}};
  ASSERT_TRUE(ragged_kv_views(TensorView<const float, 4>(kv.data(), {pages, page_size, 2, dim}),
                              &a.k_pages, &a.v_pages)
                  .ok());
  a.kv_lens = {kv_lens.data(), {3}};
  a.page_indices = {table.data(), {3, 3}};
  a.cu_q_lens = {cu.data(), {4}};
  a.num_seqs = {num_seqs.data(), {1}};
  a.sm_scale = 0.5f;
  std::vector<double> want_lse;
  reference::ragged_paged_attention(a, nullptr, &want_lse);
  for (std::int64_t i = 4 * hq; i < tokens * hq; ++i) ASSERT_EQ(want_lse[at(i)], kNegInf);
  expect_near(values("lse.npy", {tokens, hq}), want_lse, 2e-6, "ragged lse");
}

// --- merge on hand-made states
// --------------------------------------------------------------------

TEST_F(Merge, HandWorkedStatesMinusInfAndNanRows) {
  // Row 0: (1, 2) at lse 0 and (3, 4) at lse log 3 give (2.5, 3.5) at log 4. Row 1: b is empty
  // (-inf, garbage out): a exactly. Row 2: a NaN logsumexp: a NaN row.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  save("a.npy", {3, 1, 2}, std::vector<float>{1, 2, 5, 6, 1, 1});
  save("la.npy", {3, 1}, std::vector<float>{0.0f, 0.75f, nan});
  save("b.npy", {3, 1, 2}, std::vector<float>{3, 4, nan, nan, 2, 2});
  save("lb.npy", {3, 1},
       std::vector<float>{std::log(3.0f), -std::numeric_limits<float>::infinity(), 0.0f});
  const Result r = run_subcommand(
      "merge",
      "--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy --out o.npy --lse-out l.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<double> o = values("o.npy", {3, 1, 2}), l = values("l.npy", {3, 1});
  EXPECT_NEAR(o[0], 2.5, 1e-6);
  EXPECT_NEAR(o[1], 3.5, 1e-6);
  EXPECT_NEAR(l[0], std::log(4.0), 1e-6);
  EXPECT_EQ(o[2], 5.0);
  EXPECT_EQ(o[3], 6.0);
  EXPECT_EQ(l[1], 0.75);
  EXPECT_TRUE(std::isnan(o[4]) && std::isnan(o[5]) && std::isnan(l[2]));
}

TEST_F(Merge, FloatSixteenAndSixtyFourStatesAreMergedInTheirDtype) {
  // Equal logsumexps: out = (a + b) / 2 exactly, so float64's default tolerance (1e-10) holds.
  save("a.npy", {1, 1, 2}, std::vector<double>{1, 2});
  save("b.npy", {1, 1, 2}, std::vector<double>{3, 4});
  save("la.npy", {1, 1}, std::vector<float>{0.5f});
  save("lb.npy", {1, 1}, std::vector<float>{0.5f});
  save("want.npy", {1, 1, 2}, std::vector<double>{2, 3});
  Result r = run_subcommand("merge",
                            "--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy "
                            "--expect want.npy --lse-out l.npy");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NEAR(values("l.npy", {1, 1})[0], 0.5 + std::log(2.0), 1e-7);
  save("ah.npy", {1, 1, 2}, std::vector<Eigen::half>{Eigen::half(1), Eigen::half(2)});
  save("bh.npy", {1, 1, 2}, std::vector<Eigen::half>{Eigen::half(3), Eigen::half(4)});
  r = run_subcommand("merge",
                     "--out-a ah.npy --lse-a la.npy --out-b bh.npy --lse-b lb.npy --expect "
                     "want.npy");
  EXPECT_EQ(r.code, 0) << r.err;
  save("wrong.npy", {1, 1, 2}, std::vector<double>{2, 3.1});
  r = run_subcommand("merge",
                     "--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy --expect "
                     "wrong.npy");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.first_err_line().rfind("attnref: mismatch: 1 of 2 elements differ", 0), 0u) << r.err;
}

TEST_F(Merge, Bf16StatesAreReadAsCodesAndTheResultRoundedToBf16) {
  // Equal logsumexps: out = (a + b) / 2, exact in float32, then rounded to bfloat16 (to nearest,
  // ties to even): (1 + 1.0078125) / 2 = 1.00390625 -> 1 and (1.0078125 + 1.015625) / 2 =
  // 1.01171875 -> 1.015625. Codes: 1 = 0x3f80, 1.0078125 = 0x3f81, 1.015625 = 0x3f82.
  save_codes<std::uint16_t>("a.npy", {1, 1, 2}, {0x3f80, 0x3f81});
  save_codes<std::uint16_t>("b.npy", {1, 1, 2}, {0x3f81, 0x3f82});
  save_codes<std::uint8_t>("a8.npy", {1, 1, 2}, {0x38, 0x40});
  save("la.npy", {1, 1}, std::vector<float>{0.5f});
  save("lb.npy", {1, 1}, std::vector<float>{0.5f});
  const std::string states = "--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy ";
  Result r = run_subcommand("merge", states + "--state-dtype bf16 --out o.npy --lse-out l.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<double> o = values("o.npy", {1, 1, 2});
  EXPECT_EQ(o[0], 1.0);
  EXPECT_EQ(o[1], 1.015625);
  EXPECT_NEAR(values("l.npy", {1, 1})[0], 0.5 + std::log(2.0), 1e-7);
  // The same values as float32 states merge to the unrounded means.
  save("af.npy", {1, 1, 2}, std::vector<float>{1.0f, 1.0078125f});
  save("bf.npy", {1, 1, 2}, std::vector<float>{1.0078125f, 1.015625f});
  r = run_subcommand("merge",
                     "--out-a af.npy --lse-a la.npy --out-b bf.npy --lse-b lb.npy --out o32.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<double> o32 = values("o32.npy", {1, 1, 2});
  EXPECT_EQ(o32[0], 1.00390625);
  EXPECT_EQ(o32[1], 1.01171875);

  struct Case {
    std::string args;
    int code;
    std::string first_line;
  };
  const std::vector<Case> cases = {
      {states, 2,
       "attnref: error[dtype_not_supported] out_a has dtype uint16: raw 16-bit codes; pass "
       "--state-dtype bf16 if they are bfloat16"},
      {"--out-a af.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy --state-dtype bf16", 2,
       "attnref: error[dtype_not_supported] --state-dtype bf16 reads raw 16-bit codes (uint16 or "
       "|V2), but out_a has dtype float32"},
      {"--out-a a.npy --lse-a la.npy --out-b bf.npy --lse-b lb.npy --state-dtype bf16", 2,
       "attnref: error[dtype_not_supported] --state-dtype bf16 reads raw 16-bit codes (uint16 or "
       "|V2), but out_b has dtype float32"},
      {"--out-a a8.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy", 2,
       "attnref: error[dtype_not_supported] out_a has dtype uint8: raw 8-bit codes; states are "
       "float16, float32, float64 or bfloat16 (--state-dtype bf16 with uint16 or |V2 codes)"},
      {states + "--state-dtype e4m3", 1,
       "attnref-run merge: --state-dtype must be one of bf16; got 'e4m3'"},
  };
  for (const Case& c : cases) {
    r = run_subcommand("merge", c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_EQ(r.first_err_line(), c.first_line) << c.args;
  }
}

TEST_F(Merge, ErrorsComeWithTheirCodesAndNoFileIsWritten) {
  save("a.npy", {2, 3, 4}, std::vector<float>(24, 1.0f));
  save("b.npy", {2, 3, 4}, std::vector<float>(24, 2.0f));
  save("b5.npy", {2, 3, 5}, std::vector<float>(30, 2.0f));
  save("b64.npy", {2, 3, 4}, std::vector<double>(24, 2.0));
  save("la.npy", {2, 3}, std::vector<float>(6, 0.0f));
  save("lb.npy", {2, 3}, std::vector<float>(6, 0.0f));
  save("lb3.npy", {2, 3, 1}, std::vector<float>(6, 0.0f));
  save("lb32.npy", {3, 2}, std::vector<float>(6, 0.0f));
  save("lb64.npy", {2, 3}, std::vector<double>(6, 0.0));
  save("ai.npy", {2, 3, 4}, std::vector<std::int32_t>(24, 1));
  // head_dim 0: no element, whatever rows and heads claim (the fuzzer's 256 GiB logsumexp).
  save("a0.npy", {1 << 20, 1 << 20, 0}, std::vector<float>{});
  struct Case {
    std::string args;
    int code;
    std::string first_line;
  };
  const std::string out = " --out o.npy --lse-out l.npy";
  const std::vector<Case> cases = {
      {"--out-a a.npy --lse-a la.npy --out-b b5.npy --lse-b lb.npy" + out, 2,
       "attnref: error[shape_mismatch] out_b has shape (2, 3, 5); expected out_a's shape (2, 3, "
       "4)"},
      {"--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb32.npy" + out, 2,
       "attnref: error[shape_mismatch] lse_b has shape (3, 2); expected (2, 3) (out_a's first "
       "two dimensions)"},
      {"--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb3.npy" + out, 2,
       "attnref: error[rank_mismatch] lse_b must have 2 dimensions; got 3"},
      {"--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb64.npy" + out, 2,
       "attnref: error[dtype_not_supported] lse_b has dtype float64, which is not supported "
       "here"},
      {"--out-a a.npy --lse-a la.npy --out-b b64.npy --lse-b lb.npy" + out, 2,
       "attnref: error[dtype_not_supported] out_b has dtype float64; expected float32"},
      {"--out-a ai.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy" + out, 2,
       "attnref: error[dtype_not_supported] out_a has dtype int32, which is not supported here"},
      {"--out-a a0.npy --lse-a la.npy --out-b a0.npy --lse-b lb.npy" + out, 2,
       "attnref: error[shape_mismatch] lse_a has shape (2, 3); expected (1048576, 1048576) "
       "(out_a's first two dimensions)"},
      {"--out-a a.npy --lse-a la.npy --out-b b.npy" + out, 1,
       "attnref-run merge: missing required option --lse-b"},
      {"--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy --atol 1" + out, 1,
       "attnref-run merge: --atol and --rtol need --expect"},
  };
  for (const Case& c : cases) {
    const Result r = run_subcommand("merge", c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_EQ(r.first_err_line(), c.first_line) << c.args;
    EXPECT_FALSE(std::ifstream(path("o.npy")).good()) << c.args;
    EXPECT_FALSE(std::ifstream(path("l.npy")).good()) << c.args;
  }
  // An output may not replace an input: merging into a.npy is refused before anything runs.
  const Result r = run_subcommand("merge",
                                  "--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy --out "
                                  "a.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.first_err_line(), "attnref: error[bad_file] " + path("a.npy") +
                                    ": --out names the same file as --out-a (" + path("a.npy") +
                                    ")");
  EXPECT_EQ(load("a.npy").data<float>()[0], 1.0f);
}

TEST_F(Merge, HelpAndCheckOnlyLseOut) {
  Result r = run_subcommand("merge", "--help");
  EXPECT_EQ(r.code, 0);
  for (const char* option :
       {"--out-a", "--lse-a", "--out-b", "--lse-b", "--state-dtype", "--lse-out", "--expect"})
    EXPECT_NE(r.out.find(option), std::string::npos) << option;
  r = run_program("--help");
  EXPECT_NE(r.out.find("  merge     merge two results"), std::string::npos) << r.out;
  r = run_subcommand("paged", "--help");
  EXPECT_NE(r.out.find("--lse-out LSE.npy"), std::string::npos);
  r = run_subcommand("ragged", "--help");
  EXPECT_NE(r.out.find("--lse-out LSE.npy"), std::string::npos);
  // --check-only runs nothing, so it writes no logsumexp either.
  r = run_subcommand("paged", "--q q.npy --check-only --lse-out l.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.first_err_line(),
            "attnref-run paged: --check-only runs nothing, so it takes no --out, --lse-out or "
            "--expect");
}

}  // namespace
}  // namespace attnref
