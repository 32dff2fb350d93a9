// SPDX-License-Identifier: Apache-2.0
// attnref-run with bf16 and fp8 dumps, end to end: queries and pages saved as raw codes (uint16
// or |V2 for bfloat16, uint8 or |V1 for fp8, as np.save writes ml_dtypes' arrays), named with
// --q-dtype and --kv-dtype, give the float64 oracle's result (written as float32); raw codes
// without the option, or the option over other elements, are errors naming the option.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attnref/io/npy.hpp"
#include "cli_harness.hpp"
#include "kernels/kv_dtype_cases.hpp"
#include "reference/paged.hpp"
#include "reference/ragged.hpp"
#include "reference/splash.hpp"

namespace {

using attnref::DType;
using attnref::float8_e4m3fn;
using attnref::float8_e5m2;
using attnref::cli_test::Result;
using Eigen::bfloat16;
using kv_dtype_test::Scales;

class DtypesCli : public attnref::cli_test::CliTest {
 public:
  /// Writes the bytes of `v` as `name` [shape] with the raw dtype `raw` (uint8, uint16, |V1,
  /// |V2).
  template <class T>
  void save_raw(const std::string& name, DType raw, std::vector<std::int64_t> shape,
                const std::vector<T>& v) {
    const attnref::NpyStatus s =
        attnref::write_npy(path(name), attnref::make_npy_array(raw, std::move(shape), v.data()));
    ASSERT_TRUE(s.ok()) << s.message();
  }

  /// Runs, expects success, and compares out.npy (float32) with `want`.
  void expect_result(const std::string& subcommand, const std::string& args,
                     const std::vector<double>& want, double tol) {
    const Result r = run_subcommand(subcommand, args + " --out out.npy");
    ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
    const attnref::NpyArray out = load("out.npy");
    ASSERT_EQ(out.dtype, DType::kFloat32);
    kv_dtype_test::expect_close(out.to_vector<float>(), want, tol, tol, args.c_str());
  }
};

const char* const kPaged =
    "--q q.npy --k-pages k.npy --v-pages v.npy --lengths len.npy --page-indices pi.npy "
    "--sm-scale 0.5";

/// The paged case's files: q as float32 or raw bf16 codes, the pages as raw codes.
template <class Q, class KV>
void save_paged(DtypesCli& t, const kv_dtype_test::PagedCase<Q, KV>& c, DType q_raw, DType kv_raw) {
  using Case = kv_dtype_test::PagedCase<Q, KV>;
  if constexpr (std::is_same<Q, float>::value) {
    t.save<float>("q.npy", {Case::kBatch, Case::kHq, c.dim}, c.q);
  } else {
    t.save_raw("q.npy", q_raw, {Case::kBatch, Case::kHq, c.dim}, c.q);
  }
  const std::vector<std::int64_t> pages{Case::kHkv, c.pages, Case::kS, c.dim};
  t.save_raw("k.npy", kv_raw, pages, c.k);
  t.save_raw("v.npy", kv_raw, pages, c.v);
  t.save<std::int32_t>("len.npy", {Case::kBatch}, c.lengths);
  t.save<std::int32_t>("pi.npy", {Case::kBatch, Case::kPps}, c.table);
  if (!c.k_scales.values.empty()) {
    const std::vector<std::int64_t> scales{Case::kHkv, c.pages, Case::kS,
                                           c.k_scales.view.extents[3]};
    t.save<float>("ks.npy", scales, c.k_scales.values);
    t.save<float>("vs.npy", scales, c.v_scales.values);
  }
}

TEST_F(DtypesCli, PagedFp8PagesAsUint8OrV1) {
  std::mt19937 rng(1);
  const kv_dtype_test::PagedCase<float, float8_e4m3fn> c(16, Scales::kPerToken, rng);
  const std::vector<double> want = attnref::reference::paged_attention(c.args());
  for (DType raw : {DType::kUInt8, DType::kVoid8}) {
    save_paged(*this, c, DType::kFloat32, raw);
    expect_result("paged",
                  std::string(kPaged) + " --kv-dtype e4m3 --k-scales ks.npy --v-scales vs.npy",
                  want, 2e-5);
  }
}

TEST_F(DtypesCli, PagedE5M2PagesWithoutScales) {
  std::mt19937 rng(2);
  const kv_dtype_test::PagedCase<float, float8_e5m2> c(8, Scales::kNone, rng);
  save_paged(*this, c, DType::kFloat32, DType::kVoid8);
  expect_result("paged", std::string(kPaged) + " --kv-dtype e5m2",
                attnref::reference::paged_attention(c.args()), 2e-5);
}

TEST_F(DtypesCli, PagedBf16QueriesAndPagesAsUint16OrV2) {
  std::mt19937 rng(3);
  const kv_dtype_test::PagedCase<bfloat16, bfloat16> c(16, Scales::kNone, rng);
  const std::vector<double> want = attnref::reference::paged_attention(c.args());
  for (DType raw : {DType::kUInt16, DType::kVoid16}) {
    save_paged(*this, c, raw, raw);
    expect_result("paged", std::string(kPaged) + " --q-dtype bf16 --kv-dtype bf16", want, 1.6e-2);
  }
}

TEST_F(DtypesCli, PagedBf16QueriesOverFp8Pages) {
  std::mt19937 rng(4);
  const kv_dtype_test::PagedCase<bfloat16, float8_e4m3fn> c(16, Scales::kPerElement, rng);
  save_paged(*this, c, DType::kVoid16, DType::kVoid8);
  expect_result(
      "paged",
      std::string(kPaged) + " --q-dtype bf16 --kv-dtype e4m3 --k-scales ks.npy --v-scales vs.npy",
      attnref::reference::paged_attention(c.args()), 1.6e-2);
}

TEST_F(DtypesCli, RaggedFp8AndBf16Dumps) {
  using Case = kv_dtype_test::RaggedCase<bfloat16, float8_e5m2>;
  std::mt19937 rng(5);
  const Case c(16, true, rng);
  save_raw("q.npy", DType::kVoid16, {Case::kRows, Case::kHq, c.dim}, c.q);
  const std::vector<std::int64_t> pages{Case::kHkv, c.pages, Case::kS, c.dim};
  save_raw("k.npy", DType::kUInt8, pages, c.k);
  save_raw("v.npy", DType::kUInt8, pages, c.v);
  save<std::int32_t>("kvl.npy", {Case::kSeqs}, c.kv_lens);
  save<std::int32_t>("pi.npy", {Case::kSeqs, Case::kPps}, c.table);
  save<std::int32_t>("cu.npy", {Case::kSeqs + 1}, c.cu_q_lens);
  save<std::int32_t>("n.npy", {1}, {Case::kSeqs});
  const std::string args =
      "--q q.npy --k-pages k.npy --v-pages v.npy --kv-lens kvl.npy --page-indices pi.npy "
      "--cu-q-lens cu.npy --num-seqs n.npy --sm-scale 0.5 --q-dtype bf16 --kv-dtype e5m2 "
      "--k-scale " +
      std::to_string(*c.k_scale) + " --v-scale " + std::to_string(*c.v_scale);
  // The scales as the command line gives them (to_string: six decimals).
  Case exact = c;
  exact.k_scale = std::stof(std::to_string(*c.k_scale));
  exact.v_scale = std::stof(std::to_string(*c.v_scale));
  std::vector<double> want = attnref::reference::ragged_paged_attention(exact.args());
  expect_result("ragged", args, want, 1.6e-2);
}

TEST_F(DtypesCli, RaggedCombinedFp8Pool) {
  // JAX's combined pool [P, S, 2 * Hkv, D] of e4m3 codes (K of head h at 2h, V at 2h + 1),
  // saved as |V1; float32 q, no scales.
  constexpr std::int64_t P = 3, S = 4, Hkv = 1, D = 8, T = 3, Hq = 2;
  std::mt19937 rng(12);
  std::vector<float> q(T * Hq * D);
  for (float& x : q) x = kv_dtype_test::random_element<float>(rng);
  std::vector<float8_e4m3fn> pool(P * S * 2 * Hkv * D);
  for (auto& x : pool) x = kv_dtype_test::random_element<float8_e4m3fn>(rng);
  std::vector<std::int32_t> kv_lens{6}, table{2, 0}, cu{0, 3};
  save<float>("q.npy", {T, Hq, D}, q);
  save_raw("kv.npy", DType::kVoid8, {P, S, 2 * Hkv, D}, pool);
  save<std::int32_t>("kvl.npy", {1}, kv_lens);
  save<std::int32_t>("pi.npy", {1, 2}, table);
  save<std::int32_t>("cu.npy", {2}, cu);
  save<std::int32_t>("n.npy", {1}, {1});
  attnref::RaggedPagedAttentionArgs<float, float8_e4m3fn> a;
  a.q = {q.data(), {T, Hq, D}};
  ASSERT_TRUE(attnref::ragged_kv_views(
                  attnref::TensorView<const float8_e4m3fn, 4>(pool.data(), {P, S, 2 * Hkv, D}),
                  &a.k_pages, &a.v_pages)
                  .ok());
  a.kv_lens = {kv_lens.data(), {1}};
  a.page_indices = {table.data(), {1, 2}};
  a.cu_q_lens = {cu.data(), {2}};
  a.num_seqs_value = 1;
  expect_result("ragged",
                "--q q.npy --kv-pages kv.npy --kv-lens kvl.npy --page-indices pi.npy --cu-q-lens "
                "cu.npy --num-seqs n.npy --kv-dtype e4m3",
                attnref::reference::ragged_paged_attention(a), 2e-5);
}

TEST_F(DtypesCli, SplashBf16Dumps) {
  // q [2, 5, 8], k/v [1, 5, 8] (GQA over one KV head), causal; bf16 codes as |V2 and uint16.
  std::mt19937 rng(11);
  std::vector<bfloat16> q(2 * 5 * 8), k(5 * 8), v(5 * 8);
  for (auto* x : {&q, &k, &v})
    for (bfloat16& e : *x) e = kv_dtype_test::random_element<bfloat16>(rng);
  save_raw("q.npy", DType::kVoid16, {2, 5, 8}, q);
  save_raw("k.npy", DType::kUInt16, {1, 5, 8}, k);
  save_raw("v.npy", DType::kVoid16, {1, 5, 8}, v);
  attnref::SplashAttentionArgs<bfloat16> a;
  a.q = {q.data(), {2, 5, 8}};
  a.k = {k.data(), {1, 5, 8}};
  a.v = {v.data(), {1, 5, 8}};
  a.sm_scale = 0.5f;
  const auto causal = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
  const std::vector<double> want = attnref::reference::splash_forward(a, causal).out;
  expect_result("splash",
                "--q q.npy --k k.npy --v v.npy --causal --sm-scale 0.5 --q-dtype bf16 "
                "--kv-dtype bf16",
                want, 1.6e-2);
  const Result r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --kv-dtype e4m3");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.first_err_line(), "attnref-run splash: --kv-dtype must be one of bf16; got 'e4m3'");
}

// --- errors --------------------------------------------------------------------------------------

TEST_F(DtypesCli, RawPagesWithoutKvDtypeNameTheOption) {
  std::mt19937 rng(6);
  const kv_dtype_test::PagedCase<float, float8_e4m3fn> c(4, Scales::kNone, rng);
  save_paged(*this, c, DType::kFloat32, DType::kUInt8);
  Result r = run_subcommand("paged", kPaged);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] k_pages has dtype uint8: raw 8-bit codes; pass "
            "--kv-dtype e4m3 or --kv-dtype e5m2 if they are fp8 (float8_e4m3fn or float8_e5m2)");
  const kv_dtype_test::PagedCase<float, bfloat16> b(4, Scales::kNone, rng);
  save_paged(*this, b, DType::kFloat32, DType::kVoid16);
  r = run_subcommand("paged", kPaged);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] k_pages has dtype void16: raw 16-bit codes; pass "
            "--kv-dtype bf16 if they are bfloat16");
}

TEST_F(DtypesCli, RawQueriesWithoutQDtypeNameTheOption) {
  std::mt19937 rng(7);
  const kv_dtype_test::PagedCase<bfloat16, bfloat16> c(4, Scales::kNone, rng);
  save_paged(*this, c, DType::kVoid16, DType::kVoid16);
  Result r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype bf16");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] q has dtype void16: raw 16-bit codes; pass "
            "--q-dtype bf16 if they are bfloat16");
  save_raw("q.npy", DType::kUInt8, {4, 4, 4}, std::vector<std::uint8_t>(64, 0x38));
  r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype bf16");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] q has dtype uint8: raw 8-bit codes; queries are "
            "float16, float32, float64 or bfloat16 (--q-dtype bf16 with uint16 or |V2 codes)");
}

TEST_F(DtypesCli, DtypeOptionOverOtherElementsIsAnError) {
  std::mt19937 rng(8);
  const kv_dtype_test::PagedCase<float, bfloat16> c(4, Scales::kNone, rng);
  save_paged(*this, c, DType::kFloat32, DType::kUInt16);
  // 16-bit codes are not fp8.
  Result r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype e4m3");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] --kv-dtype e4m3 reads raw 8-bit codes (uint8 or "
            "|V1), but k_pages has dtype uint16");
  r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype e5m2");
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] --kv-dtype e5m2 reads raw 8-bit codes (uint8 or "
            "|V1), but k_pages has dtype uint16");
  // float32 queries are not codes.
  r = run_subcommand("paged", std::string(kPaged) + " --q-dtype bf16 --kv-dtype bf16");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] --q-dtype bf16 reads raw 16-bit codes (uint16 or "
            "|V2), but q has dtype float32");
  save_raw("k.npy", DType::kVoid8, {2, c.pages, 4, 4}, std::vector<std::uint8_t>(c.k.size(), 0));
  r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype bf16");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] --kv-dtype bf16 reads raw 16-bit codes (uint16 "
            "or |V2), but k_pages has dtype void8");
  // An unknown value is a usage error.
  r = run_subcommand("paged", std::string(kPaged) + " --q-dtype e4m3");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.first_err_line(), "attnref-run paged: --q-dtype must be one of bf16; got 'e4m3'");
}

TEST_F(DtypesCli, HalfQueriesDoNotReadFp8Pages) {
  std::mt19937 rng(9);
  const kv_dtype_test::PagedCase<float, float8_e4m3fn> c(4, Scales::kNone, rng);
  save_paged(*this, c, DType::kFloat32, DType::kUInt8);
  std::vector<Eigen::half> q(c.q.size(), Eigen::half(0.5f));
  save<Eigen::half>("q.npy", {4, 4, 4}, q);
  const Result r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype e4m3");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] k_pages has dtype float8_e4m3fn; a float16 "
            "query reads K/V pages of its own dtype or int8 with scales (float32 and bfloat16 "
            "queries also read float32, bfloat16, float16 and fp8 pages)");
}

TEST_F(DtypesCli, CheckDataReportsFp8NaNCodesInLiveRows) {
  std::mt19937 rng(10);
  kv_dtype_test::PagedCase<float, float8_e4m3fn> c(4, Scales::kNone, rng);
  save_paged(*this, c, DType::kFloat32, DType::kUInt8);
  // Dead slots hold NaN codes already: accepted.
  Result r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype e4m3 --check-data");
  EXPECT_EQ(r.code, 0) << r.err;
  // Token 0 of sequence 0 lives on page table[0], slot 0.
  const std::int64_t page = c.table[0];
  c.k[static_cast<std::size_t>((1 * c.pages + page) * 4 * 4 + 2)] = float8_e4m3fn{0xFF};
  save_paged(*this, c, DType::kFloat32, DType::kUInt8);
  r = run_subcommand("paged", std::string(kPaged) + " --kv-dtype e4m3 --check-data");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[non_finite_data] k_pages holds the float8_e4m3fn code 255, which is "
            "not a finite number, at sequence 0, token 0 (page " +
                std::to_string(page) + ", slot 0), kv head 1, dim 2");
}

}  // namespace
