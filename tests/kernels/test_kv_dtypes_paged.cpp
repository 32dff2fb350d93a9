// SPDX-License-Identifier: Apache-2.0
// Paged attention with f32 or bf16 queries over pages of every K/V dtype (float, bfloat16, half,
// int8 with scales, fp8 e4m3fn and e5m2 with scales), as engines mix them, against the float64
// oracle reading the same typed arguments. Elements past each length are poisoned.
#include <gtest/gtest.h>

#include <attnref/kernels/paged_attention.hpp>

#include "kv_dtype_cases.hpp"
#include "reference/paged.hpp"

namespace {

using attnref::float8_e4m3fn;
using attnref::float8_e5m2;
using Eigen::bfloat16;
using Eigen::half;
using kv_dtype_test::Scales;

template <class Q, class KV>
void check(std::uint32_t seed) {
  std::mt19937 rng(seed);
  // int8 needs its scales; the others take none (fp8: scale 1).
  const Scales mode = std::is_same<KV, std::int8_t>::value ? Scales::kPerToken : Scales::kNone;
  for (std::int64_t dim : {8, 64}) {
    const kv_dtype_test::PagedCase<Q, KV> c(dim, mode, rng);
    const auto args = c.args();
    std::vector<Q> out(c.q.size(), static_cast<Q>(-1.0f));
    attnref::paged_attention(args, attnref::TensorView<Q, 3>(out.data(), args.q.extents));
    const double tol = kv_dtype_test::output_tolerance<Q>();
    kv_dtype_test::expect_close(out, attnref::reference::paged_attention(args), tol, tol,
                                attnref::dtype_name(attnref::dtype_of<KV>));
  }
}

TEST(KvDtypesPaged, FloatQueries) {
  check<float, float>(1);
  check<float, bfloat16>(2);
  check<float, half>(3);
  check<float, std::int8_t>(4);
  check<float, float8_e4m3fn>(5);
  check<float, float8_e5m2>(6);
}

TEST(KvDtypesPaged, BFloat16Queries) {
  check<bfloat16, float>(11);
  check<bfloat16, bfloat16>(12);
  check<bfloat16, half>(13);
  check<bfloat16, std::int8_t>(14);
  check<bfloat16, float8_e4m3fn>(15);
  check<bfloat16, float8_e5m2>(16);
}

}  // namespace
