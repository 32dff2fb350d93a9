// Paged-attention kernel, float and double: differential tests against a plain float64
// implementation over random shapes, layouts and page permutations, with everything the kernel
// must not read set to NaN; JAX's hand-checked vectors; the TPU bf16-fidelity switch.
#include <gtest/gtest.h>

#include <attnref/kernels/paged_attention.hpp>

#include <cstring>
#include <string>

#include "reference/paged_batch.hpp"

namespace {

using attnref::KvLayout;
using attnref::TensorView;
using paged_test::LogicalBatch;
using paged_test::Shape;

/// Vector index from a signed element offset (offsets here are never negative).
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Runs the kernel with K/V of type T in `layout` and returns the output as T.
template <class T>
std::vector<T> run_kernel(const LogicalBatch& lb, KvLayout layout, float sm_scale,
                          std::optional<float> cap, bool round_bf16 = false) {
  const Shape& sh = lb.shape;
  const auto convert = [](double x) { return static_cast<T>(x); };
  std::vector<T> q(lb.q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = convert(lb.q[i]);
  const T poison = static_cast<T>(kNaN);
  const std::vector<T> k = paged_test::to_physical<T>(lb, lb.k, layout, poison, convert);
  const std::vector<T> v = paged_test::to_physical<T>(lb, lb.v, layout, poison, convert);
  std::vector<std::int32_t> lengths(lb.lengths.begin(), lb.lengths.end());
  std::vector<std::int32_t> table(lb.table.begin(), lb.table.end());
  attnref::PagedAttentionArgs<T> args;
  args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
  const auto n = static_cast<std::int64_t>(k.size());
  args.k_pages = attnref::kv_pages_view<const T>(k.data(), layout, sh.hkv, lb.total_pages,
                                                 sh.page_size, sh.dim, n);
  args.v_pages = attnref::kv_pages_view<const T>(v.data(), layout, sh.hkv, lb.total_pages,
                                                 sh.page_size, sh.dim, n);
  args.lengths = {lengths.data(), {sh.batch}};
  args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
  args.sm_scale = sm_scale;
  args.soft_cap = cap;
  args.round_kv_to_bf16 = round_bf16;
  std::vector<T> out(q.size(), poison);
  attnref::paged_attention(args, TensorView<T, 3>(out.data(), {sh.batch, sh.hq, sh.dim}));
  return out;
}

TEST(PagedKernel, MatchesFloat64ReferenceAcrossShapesLayoutsAndOptions) {
  std::mt19937 rng(1234);
  int runs = 0;
  for (std::int64_t group : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
    for (std::int64_t dim : {1, 3, 64, 128, 256}) {
      for (std::int64_t page_size : {1, 3, 16, 64}) {
        const std::int64_t hkv = 1 + runs % 2;
        const Shape shape{6, group * hkv, hkv, dim, page_size, 2 + runs % 2, 3};
        const LogicalBatch lb = paged_test::make_batch(shape, rng);
        const KvLayout layout = static_cast<KvLayout>(runs % 3);
        const std::optional<float> cap = runs % 2 ? std::optional<float>(2.5f) : std::nullopt;
        const float scale = runs % 4 < 2 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(dim));
        const std::vector<double> want = attnref::reference::paged_attention(lb.args(scale, cap));
        const std::vector<float> got = run_kernel<float>(lb, layout, scale, cap);
        const double worst =
            paged_test::worst_ratio(got, want, 1e-4, 1e-4, [](float x) { return double(x); });
        EXPECT_LE(worst, 1.0) << "G=" << group << " D=" << dim << " S=" << page_size
                              << " layout=" << attnref::to_string(layout);
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 9 * 5 * 4);
}

TEST(PagedKernel, DoubleIsAccurateToDoublePrecision) {
  std::mt19937 rng(7);
  for (KvLayout layout : {KvLayout::kJax, KvLayout::kNhd, KvLayout::kHnd}) {
    const Shape shape{6, 8, 2, 64, 16, 3, 2};
    const LogicalBatch lb = paged_test::make_batch(shape, rng);
    const std::vector<double> want = attnref::reference::paged_attention(lb.args(0.125, 30.0));
    const std::vector<double> got = run_kernel<double>(lb, layout, 0.125f, 30.0f);
    EXPECT_LE(paged_test::worst_ratio(got, want, 1e-12, 1e-12, [](double x) { return x; }), 1.0);
  }
}

TEST(PagedKernel, EveryLayoutGivesTheSameNumbers) {
  std::mt19937 rng(99);
  const LogicalBatch lb = paged_test::make_batch({6, 16, 4, 32, 4, 4, 5}, rng);
  const std::vector<float> jax = run_kernel<float>(lb, KvLayout::kJax, 1.0f, std::nullopt);
  for (KvLayout layout : {KvLayout::kNhd, KvLayout::kHnd}) {
    const std::vector<float> other = run_kernel<float>(lb, layout, 1.0f, std::nullopt);
    ASSERT_EQ(other.size(), jax.size());
    for (size_t i = 0; i < jax.size(); ++i) ASSERT_EQ(other[i], jax[i]) << i;
  }
}

TEST(PagedKernel, InterleavedKvInOneBufferThroughStrides) {
  // K and V of each token side by side in one buffer: [P, S, Hkv, 2, D]; separate K/V strides.
  std::mt19937 rng(5);
  const Shape sh{6, 4, 2, 8, 4, 3, 1};
  const LogicalBatch lb = paged_test::make_batch(sh, rng);
  const std::int64_t P = lb.total_pages;
  std::vector<float> kv(at(P * sh.page_size * sh.hkv * 2 * sh.dim), kNaN);
  const std::vector<char> live = paged_test::live_slots(lb);
  for (std::int64_t h = 0; h < sh.hkv; ++h)
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t s = 0; s < sh.page_size; ++s)
        for (std::int64_t d = 0; d < sh.dim; ++d) {
          if (!live[at(p * sh.page_size + s)]) continue;
          const std::size_t base = at((((p * sh.page_size + s) * sh.hkv + h) * 2) * sh.dim + d);
          kv[base] = static_cast<float>(lb.k_at(h, p, s, d));
          kv[base + at(sh.dim)] = static_cast<float>(lb.v_at(h, p, s, d));
        }
  std::vector<float> q(lb.q.begin(), lb.q.end());
  std::vector<std::int32_t> lengths(lb.lengths.begin(), lb.lengths.end());
  std::vector<std::int32_t> table(lb.table.begin(), lb.table.end());
  const std::array<std::int64_t, 4> extents{sh.hkv, P, sh.page_size, sh.dim};
  const std::array<std::int64_t, 4> strides{2 * sh.dim, sh.page_size * sh.hkv * 2 * sh.dim,
                                            sh.hkv * 2 * sh.dim, 1};
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
  args.k_pages = {kv.data(), extents, strides, static_cast<std::int64_t>(kv.size())};
  args.v_pages = {kv.data() + sh.dim, extents, strides,
                  static_cast<std::int64_t>(kv.size()) - sh.dim};
  args.lengths = {lengths.data(), {sh.batch}};
  args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
  std::vector<float> out(q.size());
  attnref::paged_attention(args, TensorView<float, 3>(out.data(), {sh.batch, sh.hq, sh.dim}));
  const std::vector<double> want = attnref::reference::paged_attention(lb.args());
  EXPECT_LE(paged_test::worst_ratio(out, want, 1e-4, 1e-4, [](float x) { return double(x); }), 1.0);
}

TEST(PagedKernel, HugeStrideOnASizeOneDimension) {
  // Found by fuzz_paged under clang's UBSan: with one token per page, the token stride is never
  // used to step, so any value is a valid view; the Q.K loop still formed a pointer one row past
  // the last, and a stride of 2^62 floats wrapped it around the address space. GCC's UBSan does
  // not see that pointer (it is dead code at -O1); the fuzz corpus input
  // regress-huge-stride-size-one-dim replays the case under clang. Here: the result is right.
  std::mt19937 rng(9);
  const Shape sh{3, 4, 2, 8, 1, 5, 2};
  const LogicalBatch lb = paged_test::make_batch(sh, rng);
  const std::int64_t P = lb.total_pages;
  std::vector<float> k(at(sh.hkv * P * sh.dim)), v(k.size());
  for (std::int64_t h = 0; h < sh.hkv; ++h)
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t d = 0; d < sh.dim; ++d) {
        k[at((h * P + p) * sh.dim + d)] = static_cast<float>(lb.k_at(h, p, 0, d));
        v[at((h * P + p) * sh.dim + d)] = static_cast<float>(lb.v_at(h, p, 0, d));
      }
  std::vector<float> q(lb.q.begin(), lb.q.end());
  std::vector<std::int32_t> lengths(lb.lengths.begin(), lb.lengths.end());
  std::vector<std::int32_t> table(lb.table.begin(), lb.table.end());
  const std::array<std::int64_t, 4> extents{sh.hkv, P, 1, sh.dim};
  const std::array<std::int64_t, 4> strides{P * sh.dim, sh.dim, std::int64_t{1} << 62, 1};
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
  args.k_pages = {k.data(), extents, strides, static_cast<std::int64_t>(k.size())};
  args.v_pages = {v.data(), extents, strides, static_cast<std::int64_t>(v.size())};
  args.lengths = {lengths.data(), {sh.batch}};
  args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
  std::vector<float> out(q.size());
  attnref::paged_attention(args, TensorView<float, 3>(out.data(), {sh.batch, sh.hq, sh.dim}));
  const std::vector<double> want = attnref::reference::paged_attention(lb.args());
  EXPECT_LE(paged_test::worst_ratio(out, want, 1e-4, 1e-4, [](float x) { return double(x); }), 1.0);
}

TEST(PagedKernel, ZeroLengthGivesZeroRows) {
  std::mt19937 rng(3);
  const LogicalBatch lb = paged_test::make_batch({1, 4, 1, 8, 4, 2, 0}, rng);  // length 0
  ASSERT_EQ(lb.lengths[0], 0);
  for (float x : run_kernel<float>(lb, KvLayout::kJax, 1.0f, std::nullopt)) EXPECT_EQ(x, 0.0f);
}

/// JAX's JaxGroupedQueryAttentionReferenceTest vectors (spec §1.6), f32 tolerance 2e-3.
TEST(PagedKernel, JaxHandCheckedVectors) {
  struct Case {
    std::vector<float> q, k, v;
    std::int64_t hq, dim, length;
    std::vector<float> want;
  };
  const Case cases[] = {
      {{1.2f}, {.1f, .2f, .3f, .4f}, {4, 3, 2, 1}, 1, 1, 2, {3.47f}},
      {{1.7f}, {.12f, .23f, .34f, .45f}, {4.32f, 3.21f, 2.10f, 1.09f}, 1, 1, 3, {3.0723f}},
      {{1.3f, 9.7f},
       {.12f, .23f, .34f, .45f},
       {4.32f, 3.21f, 2.10f, 1.09f},
       2,
       1,
       4,
       {2.488f, 1.576f}},
      {{1.2f, 9.0f},
       {.1f, .2f, .2f, .3f, .3f, .4f, .4f, .5f},
       {4, 5, 3, 6, 2, 7, 1, 8},
       1,
       2,
       2,
       {3.265f, 5.735f}},
  };
  for (const Case& c : cases) {
    std::vector<std::int32_t> lengths{static_cast<std::int32_t>(c.length)}, table{0};
    attnref::PagedAttentionArgs<float> args;
    args.q = {c.q.data(), {1, c.hq, c.dim}};
    args.k_pages = {c.k.data(), {1, 1, 4, c.dim}};
    args.v_pages = {c.v.data(), {1, 1, 4, c.dim}};
    args.lengths = {lengths.data(), {1}};
    args.page_indices = {table.data(), {1, 1}};
    std::vector<float> out(c.want.size());
    attnref::paged_attention(args, TensorView<float, 3>(out.data(), {1, c.hq, c.dim}));
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], c.want[i], 2e-3) << i;
  }
}

TEST(PagedKernel, TpuFidelitySwitchRoundsKvToBf16) {
  std::mt19937 rng(11);
  const LogicalBatch lb = paged_test::make_batch({6, 8, 2, 64, 16, 3, 1}, rng);
  // The reference sees K/V as float32 values rounded to bf16; q stays float32.
  const std::vector<double> rounded =
      attnref::reference::paged_attention(lb.args(1.0, std::nullopt, /*round_kv_to_bf16=*/true));
  const std::vector<double> exact = attnref::reference::paged_attention(lb.args());
  const std::vector<float> got = run_kernel<float>(lb, KvLayout::kNhd, 1.0f, std::nullopt, true);
  const auto to_d = [](float x) { return double(x); };
  EXPECT_LE(paged_test::worst_ratio(got, rounded, 1e-5, 1e-5, to_d), 1.0);
  // ... and the switch really changes the answer: unrounded K/V is far outside that tolerance.
  EXPECT_GT(paged_test::worst_ratio(got, exact, 1e-5, 1e-5, to_d), 10.0);
}

TEST(PagedKernel, InvalidInputReturnsAnErrorAndLeavesOutputUntouched) {
  std::mt19937 rng(2);
  const LogicalBatch lb = paged_test::make_batch({2, 4, 2, 8, 4, 2, 0}, rng);
  std::vector<float> q(lb.q.begin(), lb.q.end()), k(lb.k.begin(), lb.k.end()),
      v(lb.v.begin(), lb.v.end());
  std::vector<std::int32_t> lengths{3, 9};  // 9 > capacity 8
  std::vector<std::int32_t> table{0, -1, 1, 2};
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {2, 4, 8}};
  args.k_pages = {k.data(), {2, lb.total_pages, 4, 8}};
  args.v_pages = {v.data(), {2, lb.total_pages, 4, 8}};
  args.lengths = {lengths.data(), {2}};
  args.page_indices = {table.data(), {2, 2}};
  std::vector<float> out(q.size(), 42.0f);
  TensorView<float, 3> out_view(out.data(), {2, 4, 8});
  attnref::Status s = attnref::try_paged_attention(args, out_view);
  EXPECT_EQ(s.code(), attnref::ErrorCode::kLengthOutOfRange);
  for (float x : out) EXPECT_EQ(x, 42.0f);
  EXPECT_THROW(attnref::paged_attention(args, out_view), attnref::ShapeError);

  lengths[1] = 8;
  s = attnref::try_paged_attention(args, TensorView<float, 3>(out.data(), {2, 4, 4}));
  EXPECT_EQ(s.code(), attnref::ErrorCode::kShapeMismatch);
  EXPECT_EQ(s.message(), "out has shape (2, 4, 4); expected q's shape (2, 4, 8)");
  EXPECT_TRUE(attnref::try_paged_attention(args, out_view).ok());
}

}  // namespace

namespace {

/// Runs the kernel on a fixed batch with an executor; returns the f32 output.
template <class Executor>
std::vector<float> run_with(const LogicalBatch& lb, Executor&& executor) {
  const Shape& sh = lb.shape;
  std::vector<float> q(lb.q.begin(), lb.q.end()), k(lb.k.begin(), lb.k.end()),
      v(lb.v.begin(), lb.v.end());
  std::vector<std::int32_t> lengths(lb.lengths.begin(), lb.lengths.end());
  std::vector<std::int32_t> table(lb.table.begin(), lb.table.end());
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
  args.k_pages = {k.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
  args.v_pages = {v.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
  args.lengths = {lengths.data(), {sh.batch}};
  args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
  std::vector<float> out(q.size(), kNaN);
  attnref::paged_attention(args, TensorView<float, 3>(out.data(), {sh.batch, sh.hq, sh.dim}),
                           executor);
  return out;
}

TEST(PagedKernelThreads, AnyThreadCountGivesTheSameResultWithinRounding) {
  std::mt19937 rng(77);
  // Few (sequence, KV head) items, long sequences: more threads than items forces split-KV.
  for (const Shape& shape : {Shape{1, 4, 1, 64, 16, 40, 0}, Shape{6, 8, 2, 32, 4, 5, 3},
                             Shape{2, 16, 1, 16, 1, 33, 2}}) {
    const LogicalBatch lb = paged_test::make_batch(shape, rng);
    const std::vector<double> want = attnref::reference::paged_attention(lb.args());
    const auto to_d = [](float x) { return double(x); };
    const std::vector<float> serial = run_with(lb, attnref::SerialExecutor{});
    EXPECT_LE(paged_test::worst_ratio(serial, want, 1e-4, 1e-4, to_d), 1.0);
    for (int threads : {2, 3, 8}) {
      attnref::ThreadPoolExecutor pool(threads);
      const std::vector<float> got = run_with(lb, pool);
      EXPECT_LE(paged_test::worst_ratio(got, want, 1e-4, 1e-4, to_d), 1.0) << threads;
      EXPECT_LE(paged_test::worst_ratio(got, std::vector<double>(serial.begin(), serial.end()),
                                        1e-5, 1e-5, to_d),
                1.0)
          << threads << " threads vs serial";
    }
    // An engine's own parallel_for, here a plain loop that claims 4-way concurrency.
    auto external = attnref::make_executor(4, [](std::int64_t n, const auto& fn) {
      for (std::int64_t i = n; i-- > 0;) fn(i);  // any order
    });
    EXPECT_LE(paged_test::worst_ratio(run_with(lb, external), want, 1e-4, 1e-4, to_d), 1.0);
  }
}

}  // namespace

namespace {

TEST(PagedKernel, PagesLargerThanAChunkAreTakenInPieces) {
  std::mt19937 rng(4242);
  for (std::int64_t page_size : {129, 300}) {
    const LogicalBatch lb = paged_test::make_batch({6, 8, 2, 16, page_size, 2, 1}, rng);
    const std::vector<double> want = attnref::reference::paged_attention(lb.args(0.25, 7.0));
    for (KvLayout layout : {KvLayout::kJax, KvLayout::kNhd}) {
      const std::vector<float> got = run_kernel<float>(lb, layout, 0.25f, 7.0f);
      EXPECT_LE(paged_test::worst_ratio(got, want, 1e-4, 1e-4, [](float x) { return double(x); }),
                1.0)
          << "S=" << page_size;
    }
  }
}

}  // namespace
