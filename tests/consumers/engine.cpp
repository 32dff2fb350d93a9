// An "engine" translation unit as a downstream project writes it: every public name of the
// family contract (checks, kernels in their three forms, executors) for paged, splash and ragged,
// plus the Eigen Tensor adapter (a template, so only an instantiation checks it). The consumer
// tests compile it with every strict warning as an error, -fno-rtti, C++17 and C++20.
// Each run_* function returns 0 when all forms agree bit for bit, else the failing line.
#include "engine.hpp"

#include <attnref/attnref.hpp>
#include <attnref/interop/eigen_tensor.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

/// Returns the line number from the enclosing run function when `expr` is not an ok Status.
#define ENGINE_CHECK(expr)                                               \
  do {                                                                   \
    const attnref::Status engine_status = (expr);                        \
    if (!engine_status.ok()) {                                           \
      std::fprintf(stderr, "engine.cpp:%d: %s\n  %s\n", __LINE__, #expr, \
                   engine_status.to_string().c_str());                   \
      return __LINE__;                                                   \
    }                                                                    \
  } while (false)

namespace engine {
namespace {

using attnref::Profile;
using attnref::TensorView;

/// Small deterministic values in [-0.625, 0.625], converted to T.
template <class T>
std::vector<T> pattern(std::size_t n, int seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int k = static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 3) % 11) - 5;
    v[i] = static_cast<T>(static_cast<float>(k) / 8.0f);
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
bool all_finite(const std::vector<T>& a) {
  for (const T& x : a)
    if (!std::isfinite(static_cast<float>(x))) return false;
  return true;
}

// --- paged: batch 2, 4 query heads on 2 KV heads, head_dim 8, 4 pages of 4 tokens ---
constexpr std::int64_t kB = 2, kHq = 4, kHkv = 2, kD = 8, kP = 4, kS = 4, kPagesPerSeq = 2;
constexpr std::size_t kPoolSize = static_cast<std::size_t>(kHkv * kP * kS * kD);
constexpr std::size_t kPagedQ = static_cast<std::size_t>(kB * kHq * kD);

template <class Q, class KV, class Index>
int run_paged_with(attnref::PagedAttentionArgs<Q, KV, Index> args) {
  std::vector<Index> lengths{5, 8}, table{0, 1, 2, 3};
  args.lengths = {lengths.data(), {kB}};
  args.page_indices = {table.data(), {kB, kPagesPerSeq}};
  // JAX's rules hold for int32 indices only (P7); int64 is a reference-profile extension.
  const Profile profile =
      std::is_same<Index, std::int32_t>::value ? Profile::kJax : Profile::kReference;
  ENGINE_CHECK(attnref::check_paged_shapes(args, profile));
  ENGINE_CHECK(attnref::check_paged_metadata(args, Profile::kReference));
  ENGINE_CHECK(attnref::check_paged_data(args));
  ENGINE_CHECK(attnref::check_paged(args, profile));
  attnref::validate_paged(args, Profile::kReference);

  std::vector<Q> a(kPagedQ), b(kPagedQ), c(kPagedQ), d(kPagedQ);
  const auto view = [](std::vector<Q>& o) { return TensorView<Q, 3>(o.data(), {kB, kHq, kD}); };
  ENGINE_CHECK(attnref::check_paged_output(args, view(a)));
  ENGINE_CHECK(attnref::try_paged_attention(args, view(a)));
  attnref::paged_attention(args, view(b));
  attnref::paged_attention_unchecked(args, view(c));
  attnref::ThreadPoolExecutor pool(2);
  attnref::paged_attention(args, view(d), pool);
  if (!all_finite(a) || !same_bits(a, b) || !same_bits(a, c) || !same_bits(a, d)) return __LINE__;
  return 0;
}

// --- splash: 4 query heads on 2 KV heads, 256 x 256 (2 x 2 tiles of 128), head_dim 8 ---
constexpr std::int64_t kSq = 256, kSkv = 256;
constexpr std::size_t kSplashQ = static_cast<std::size_t>(kHq * kSq * kD);
constexpr std::size_t kSplashKv = static_cast<std::size_t>(kHkv * kSkv * kD);
constexpr std::size_t kSplashLse = static_cast<std::size_t>(kHq * kSq);

struct SplashBuffers {
  std::vector<float> q = pattern<float>(kSplashQ, 1), k = pattern<float>(kSplashKv, 2),
                     v = pattern<float>(kSplashKv, 3),
                     sinks = pattern<float>(static_cast<std::size_t>(kHq), 4);
  attnref::SplashAttentionArgs<float> args() const {
    attnref::SplashAttentionArgs<float> a;
    a.q = {q.data(), {kHq, kSq, kD}};
    a.k = {k.data(), {kHkv, kSkv, kD}};
    a.v = {v.data(), {kHkv, kSkv, kD}};
    a.sinks = {sinks.data(), {kHq}};
    a.sm_scale = 0.5f;
    a.block_sizes = attnref::SplashBlockSizes::get_default();  // 128: JAX's lane width
    return a;
  }
};

/// One forward result: out [Hq, Sq, D] and logsumexp [Hq, Sq].
struct Forward {
  std::vector<float> out = std::vector<float>(kSplashQ), lse = std::vector<float>(kSplashLse);
  TensorView<float, 3> out_view() { return {out.data(), {kHq, kSq, kD}}; }
  TensorView<float, 2> lse_view() { return {lse.data(), {kHq, kSq}}; }
  bool operator==(const Forward& o) const { return same_bits(out, o.out) && same_bits(lse, o.lse); }
};

/// One backward result: dq, dk, dv, dsinks.
struct Backward {
  std::vector<float> dq = std::vector<float>(kSplashQ), dk = std::vector<float>(kSplashKv),
                     dv = std::vector<float>(kSplashKv),
                     dsinks = std::vector<float>(static_cast<std::size_t>(kHq));
  attnref::SplashGradients<float> grads() {
    attnref::SplashGradients<float> g;
    g.dq = {dq.data(), {kHq, kSq, kD}};
    g.dk = {dk.data(), {kHkv, kSkv, kD}};
    g.dv = {dv.data(), {kHkv, kSkv, kD}};
    g.dsinks = {dsinks.data(), {kHq}};
    return g;
  }
  bool operator==(const Backward& o) const {
    return same_bits(dq, o.dq) && same_bits(dk, o.dk) && same_bits(dv, o.dv) &&
           same_bits(dsinks, o.dsinks);
  }
};

template <class M>
int run_splash_with(const M& mask) {
  const SplashBuffers buf;
  const attnref::SplashAttentionArgs<float> args = buf.args();
  ENGINE_CHECK(attnref::check_splash_shapes(args, mask, Profile::kJax));
  ENGINE_CHECK(attnref::check_splash_metadata(args, mask, Profile::kReference));
  ENGINE_CHECK(attnref::check_splash_data(args));
  ENGINE_CHECK(attnref::check_splash(args, mask, Profile::kJax));
  ENGINE_CHECK(attnref::check_splash_backward(args, mask, Profile::kJax));
  attnref::validate_splash(args, mask, Profile::kReference);

  attnref::SplashPlan<float, float> plan;
  ENGINE_CHECK(attnref::make_splash_plan(args, mask, &plan));
  Forward f[5];
  ENGINE_CHECK(attnref::check_splash_output(args, f[0].out_view(), f[0].lse_view()));
  ENGINE_CHECK(attnref::try_splash_attention(plan, f[0].out_view(), f[0].lse_view()));
  attnref::splash_attention(plan, f[1].out_view(), f[1].lse_view());
  attnref::splash_attention_unchecked(plan, f[2].out_view(), f[2].lse_view());
  ENGINE_CHECK(attnref::try_splash_attention(args, mask, f[3].out_view(), f[3].lse_view()));
  attnref::ThreadPoolExecutor pool(2);
  attnref::splash_attention(args, mask, f[4].out_view(), f[4].lse_view(), pool);
  for (const Forward& other : f)
    if (!(other == f[0])) return __LINE__;
  if (!all_finite(f[0].out)) return __LINE__;

  const TensorView<const float, 3> out(f[0].out.data(), {kHq, kSq, kD});
  const TensorView<const float, 2> lse(f[0].lse.data(), {kHq, kSq});
  const std::vector<float> dout_data = pattern<float>(kSplashQ, 5);
  const TensorView<const float, 3> dout(dout_data.data(), {kHq, kSq, kD});
  Backward g[5];
  ENGINE_CHECK(attnref::check_splash_backward_output(args, out, lse, dout, g[0].grads()));
  ENGINE_CHECK(attnref::try_splash_attention_backward(plan, out, lse, dout, g[0].grads()));
  attnref::splash_attention_backward(plan, out, lse, dout, g[1].grads());
  attnref::splash_attention_backward_unchecked(plan, out, lse, dout, g[2].grads());
  ENGINE_CHECK(attnref::try_splash_attention_backward(args, mask, out, lse, dout, g[3].grads()));
  attnref::splash_attention_backward(args, mask, out, lse, dout, g[4].grads(), pool);
  for (const Backward& other : g)
    if (!(other == g[0])) return __LINE__;
  if (!all_finite(g[0].dq) || !all_finite(g[0].dk) || !all_finite(g[0].dsinks)) return __LINE__;
  return 0;
}

// --- ragged: 6 token rows (a decode of 1 row, a prefill of 3, 2 padding rows) ---
constexpr std::int64_t kTokens = 6, kMaxSeqs = 2;
constexpr std::size_t kRaggedQ = static_cast<std::size_t>(kTokens * kHq * kD);

}  // namespace

int run_paged() {
  const std::vector<float> q = pattern<float>(kPagedQ, 1);
  const std::vector<float> k = pattern<float>(kPoolSize, 2), v = pattern<float>(kPoolSize, 3);
  attnref::PagedAttentionArgs<float> f32;
  f32.q = {q.data(), {kB, kHq, kD}};
  f32.k_pages = {k.data(), {kHkv, kP, kS, kD}};
  f32.v_pages = {v.data(), {kHkv, kP, kS, kD}};
  f32.soft_cap = 30.0f;
  if (const int line = run_paged_with(f32)) return line;

  using bf16 = Eigen::bfloat16;
  const std::vector<bf16> q16 = pattern<bf16>(kPagedQ, 1);
  const std::vector<bf16> k16 = pattern<bf16>(kPoolSize, 2), v16 = pattern<bf16>(kPoolSize, 3);
  attnref::PagedAttentionArgs<bf16, bf16, std::int64_t> b16;
  b16.q = {q16.data(), {kB, kHq, kD}};
  b16.k_pages = {k16.data(), {kHkv, kP, kS, kD}};
  b16.v_pages = {v16.data(), {kHkv, kP, kS, kD}};
  if (const int line = run_paged_with(b16)) return line;

  // int8 pages with one scale per token ([Hkv, P, S, 1]).
  std::vector<std::int8_t> k8(kPoolSize), v8(kPoolSize);
  for (std::size_t i = 0; i < kPoolSize; ++i) {
    k8[i] = static_cast<std::int8_t>(static_cast<int>(i % 255) - 127);
    v8[i] = static_cast<std::int8_t>(static_cast<int>((i * 3) % 255) - 127);
  }
  const std::vector<float> scales(static_cast<std::size_t>(kHkv * kP * kS), 1.0f / 127.0f);
  attnref::PagedAttentionArgs<float, std::int8_t> i8;
  i8.q = {q.data(), {kB, kHq, kD}};
  i8.k_pages = {k8.data(), {kHkv, kP, kS, kD}};
  i8.v_pages = {v8.data(), {kHkv, kP, kS, kD}};
  i8.k_scales = {scales.data(), {kHkv, kP, kS, 1}};
  i8.v_scales = {scales.data(), {kHkv, kP, kS, 1}};
  if (const int line = run_paged_with(i8)) return line;

  ENGINE_CHECK(attnref::check_paged_index_dtypes(attnref::DType::kInt32, attnref::DType::kInt32,
                                                 Profile::kJax));
  if (attnref::check_paged_index_dtypes(attnref::DType::kInt64, attnref::DType::kInt64,
                                        Profile::kJax)
          .ok())
    return __LINE__;
  return 0;
}

int run_splash() {
  if (const int line = run_splash_with(attnref::CausalMask{{kSq, kSkv}})) return line;
  // One mask per query head, through the type-erased AnyMask (no RTTI needed).
  const attnref::MultiHeadMask per_head{
      attnref::CausalMask{{kSq, kSkv}}, attnref::LocalMask{{kSq, kSkv}, 4, 0, 0},
      attnref::FullMask{{kSq, kSkv}}, attnref::CausalMask{{kSq, kSkv}, 2}};
  return run_splash_with(per_head);
}

int run_ragged() {
  const std::vector<float> q = pattern<float>(kRaggedQ, 1);
  const std::vector<float> kv =
      pattern<float>(static_cast<std::size_t>(kP * kS * 2 * kHkv * kD), 2);
  const std::vector<std::int32_t> kv_lens{5, 3}, table{0, 1, 2, 3}, cu_q_lens{0, 1, 4}, num_seqs{2};
  attnref::RaggedPagedAttentionArgs<float> args;
  args.q = {q.data(), {kTokens, kHq, kD}};
  ENGINE_CHECK(attnref::ragged_kv_views(
      attnref::TensorView<const float, 4>(kv.data(), {kP, kS, 2 * kHkv, kD}), &args.k_pages,
      &args.v_pages));
  args.kv_lens = {kv_lens.data(), {kMaxSeqs}};
  args.page_indices = {table.data(), {kMaxSeqs, kPagesPerSeq}};
  args.cu_q_lens = {cu_q_lens.data(), {kMaxSeqs + 1}};
  args.num_seqs = {num_seqs.data(), {1}};
  args.sliding_window = 4;
  ENGINE_CHECK(attnref::check_ragged_shapes(args, Profile::kJax));
  ENGINE_CHECK(attnref::check_ragged_metadata(args, Profile::kReference));
  ENGINE_CHECK(attnref::check_ragged_data(args));
  ENGINE_CHECK(attnref::check_ragged(args, Profile::kJax));
  attnref::validate_ragged(args, Profile::kReference);
  ENGINE_CHECK(attnref::check_ragged_index_dtypes(attnref::DType::kInt32, attnref::DType::kInt32,
                                                  attnref::DType::kInt32, attnref::DType::kInt32,
                                                  Profile::kJax));

  std::vector<float> a(kRaggedQ), b(kRaggedQ), c(kRaggedQ), d(kRaggedQ);
  const auto view = [](std::vector<float>& o) {
    return TensorView<float, 3>(o.data(), {kTokens, kHq, kD});
  };
  ENGINE_CHECK(attnref::check_ragged_output(args, view(a)));
  ENGINE_CHECK(attnref::try_ragged_paged_attention(args, view(a)));
  attnref::ragged_paged_attention(args, view(b));
  attnref::ragged_paged_attention_unchecked(args, view(c));
  attnref::ThreadPoolExecutor pool(2);
  attnref::ragged_paged_attention(args, view(d), pool);
  if (!all_finite(a) || !same_bits(a, b) || !same_bits(a, c) || !same_bits(a, d)) return __LINE__;
  return 0;
}

int run_interop() {
  // Row-major and column-major Eigen tensors, and a map over const data: views of [2, 3, 4].
  Eigen::Tensor<float, 3, Eigen::RowMajor> row(2, 3, 4);
  Eigen::Tensor<float, 3, Eigen::ColMajor> col(2, 3, 4);
  row.setZero();
  col.setZero();
  const std::vector<float> data(24, 1.0f);
  const Eigen::TensorMap<const Eigen::Tensor<const float, 3, Eigen::RowMajor>> map(data.data(), 2,
                                                                                   3, 4);
  const TensorView<float, 3> rv = attnref::view_of(row);
  const TensorView<float, 3> cv = attnref::view_of(col);
  const TensorView<const float, 3> mv = attnref::view_of(map);
  if (rv.strides != std::array<std::int64_t, 3>{12, 4, 1}) return __LINE__;
  if (cv.strides != std::array<std::int64_t, 3>{1, 2, 6}) return __LINE__;
  if (mv.extents != std::array<std::int64_t, 3>{2, 3, 4} || mv(1, 2, 3) != 1.0f) return __LINE__;
  return 0;
}

}  // namespace engine
