// SPDX-License-Identifier: Apache-2.0
// fp8 K/V pages (float8_e4m3fn, float8_e5m2) in the paged and ragged kernels, against the
// float64 oracles of reference/ (which decode fp8 from the bit fields): every way of giving the
// scales (none, per token, per element, per tensor), and elements past each length holding NaN
// codes (and NaN scales), which the kernels must never read.
#include <gtest/gtest.h>

#include <attnref/kernels/paged_attention.hpp>
#include <attnref/kernels/ragged_paged_attention.hpp>

#include "kv_dtype_cases.hpp"
#include "reference/paged.hpp"
#include "reference/ragged.hpp"

namespace {

using attnref::float8_e4m3fn;
using attnref::float8_e5m2;
using attnref::TensorView;
using kv_dtype_test::Scales;

template <class KV>
void check_paged(Scales mode, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (std::int64_t dim : {3, 16, 64}) {
    const kv_dtype_test::PagedCase<float, KV> c(dim, mode, rng);
    const auto args = c.args();
    std::vector<float> out(c.q.size(), -1.0f);
    attnref::paged_attention(args, TensorView<float, 3>(out.data(), args.q.extents));
    kv_dtype_test::expect_close(out, attnref::reference::paged_attention(args), 2e-5, 2e-5,
                                "paged fp8");
  }
}

TEST(Fp8KvPaged, E4M3WithoutScales) { check_paged<float8_e4m3fn>(Scales::kNone, 1); }
TEST(Fp8KvPaged, E4M3PerTokenScales) { check_paged<float8_e4m3fn>(Scales::kPerToken, 2); }
TEST(Fp8KvPaged, E4M3PerElementScales) { check_paged<float8_e4m3fn>(Scales::kPerElement, 3); }
TEST(Fp8KvPaged, E4M3PerTensorScale) { check_paged<float8_e4m3fn>(Scales::kPerTensor, 4); }
TEST(Fp8KvPaged, E5M2WithoutScales) { check_paged<float8_e5m2>(Scales::kNone, 5); }
TEST(Fp8KvPaged, E5M2PerTokenScales) { check_paged<float8_e5m2>(Scales::kPerToken, 6); }
TEST(Fp8KvPaged, E5M2PerElementScales) { check_paged<float8_e5m2>(Scales::kPerElement, 7); }
TEST(Fp8KvPaged, E5M2PerTensorScale) { check_paged<float8_e5m2>(Scales::kPerTensor, 8); }

// One key: the softmax weight is exactly 1, so out = v = code value * scale, by hand.
TEST(Fp8KvPaged, OneKeyGivesItsScaledValue) {
  std::vector<float> q{1.0f, -2.0f};
  // e5m2 0x3C = 1.0, 0xC2 = -3.0, 0x01 = 2^-16 (subnormal), 0x7B = 57344 (the largest).
  std::vector<float8_e5m2> k{{0x3C}, {0x01}}, v{{0xC2}, {0x7B}};
  std::vector<float> scales{0.25f};
  std::vector<std::int32_t> lengths{1}, table{0};
  attnref::PagedAttentionArgs<float, float8_e5m2> a;
  a.q = {q.data(), {1, 1, 2}};
  a.k_pages = {k.data(), {1, 1, 1, 2}};
  a.v_pages = {v.data(), {1, 1, 1, 2}};
  a.k_scales = TensorView<const float, 4>(scales.data(), {1, 1, 1, 1}, {0, 0, 0, 0});
  a.v_scales = a.k_scales;
  a.lengths = {lengths.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  std::vector<float> out(2), lse(1);
  attnref::paged_attention(a, TensorView<float, 3>(out.data(), {1, 1, 2}),
                           TensorView<float, 2>(lse.data(), {1, 1}));
  EXPECT_EQ(out[0], -0.75f);
  EXPECT_EQ(out[1], 14336.0f);
  // The one logit: 1 * (1.0 * 0.25) + -2 * (2^-16 * 0.25).
  EXPECT_FLOAT_EQ(lse[0], 0.25f - std::ldexp(2.0f, -18));
}

template <class KV>
void check_ragged(bool scaled, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (std::int64_t dim : {3, 16, 64}) {
    const kv_dtype_test::RaggedCase<float, KV> c(dim, scaled, rng);
    const auto args = c.args();
    std::vector<float> out(c.q.size(), -1.0f);
    attnref::ragged_paged_attention(args, TensorView<float, 3>(out.data(), args.q.extents));
    kv_dtype_test::expect_close(out, attnref::reference::ragged_paged_attention(args), 2e-5, 2e-5,
                                "ragged fp8");
  }
}

TEST(Fp8KvRagged, E4M3WithoutScales) { check_ragged<float8_e4m3fn>(false, 11); }
TEST(Fp8KvRagged, E4M3WithScales) { check_ragged<float8_e4m3fn>(true, 12); }
TEST(Fp8KvRagged, E5M2WithoutScales) { check_ragged<float8_e5m2>(false, 13); }
TEST(Fp8KvRagged, E5M2WithScales) { check_ragged<float8_e5m2>(true, 14); }

}  // namespace
