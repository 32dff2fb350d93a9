// SPDX-License-Identifier: Apache-2.0
// Ragged paged attention with f32 or bf16 queries over pages of every K/V dtype (float, bfloat16,
// half, int8 and fp8 e4m3fn and e5m2, with k_scale/v_scale), as engines mix them, against the
// float64 oracle reading the same typed arguments. Elements past each kv_len are poisoned.
#include <gtest/gtest.h>

#include <attnref/kernels/ragged_paged_attention.hpp>

#include "kv_dtype_cases.hpp"
#include "reference/ragged.hpp"

namespace {

using attnref::float8_e4m3fn;
using attnref::float8_e5m2;
using Eigen::bfloat16;
using Eigen::half;

template <class Q, class KV>
void check(std::uint32_t seed) {
  std::mt19937 rng(seed);
  // Quantized pages with their scales (JAX's k_scale/v_scale); float pages without.
  const bool scaled = std::is_same<KV, std::int8_t>::value || attnref::is_fp8_dtype<KV>;
  for (std::int64_t dim : {8, 64}) {
    const kv_dtype_test::RaggedCase<Q, KV> c(dim, scaled, rng);
    const auto args = c.args();
    std::vector<Q> out(c.q.size(), static_cast<Q>(-1.0f));
    attnref::ragged_paged_attention(args, attnref::TensorView<Q, 3>(out.data(), args.q.extents));
    const double tol = kv_dtype_test::output_tolerance<Q>();
    kv_dtype_test::expect_close(out, attnref::reference::ragged_paged_attention(args), tol, tol,
                                attnref::dtype_name(attnref::dtype_of<KV>));
  }
}

TEST(KvDtypesRagged, FloatQueries) {
  check<float, float>(1);
  check<float, bfloat16>(2);
  check<float, half>(3);
  check<float, std::int8_t>(4);
  check<float, float8_e4m3fn>(5);
  check<float, float8_e5m2>(6);
}

TEST(KvDtypesRagged, BFloat16Queries) {
  check<bfloat16, float>(11);
  check<bfloat16, bfloat16>(12);
  check<bfloat16, half>(13);
  check<bfloat16, std::int8_t>(14);
  check<bfloat16, float8_e4m3fn>(15);
  check<bfloat16, float8_e5m2>(16);
}

}  // namespace
