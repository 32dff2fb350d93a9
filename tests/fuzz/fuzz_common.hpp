// SPDX-License-Identifier: Apache-2.0
// Shared pieces of attnref's libFuzzer harnesses: a reader that turns fuzz bytes into numbers
// (returning zeros once the bytes run out, so every input decodes to something), a table of
// hostile integers and reals, a small PRNG for bulk tensor data, a check that ends the run with
// a readable report (libFuzzer then saves the input as a crash), and the view geometries and
// exactly-sized buffers the family harnesses build their calls from; the widened draws (huge
// extents next to zero-size dimensions, many heads, int64 metadata past int32, special option
// values); the logit conventions and what each profile must answer to them; and the work budget:
// allocations and executor items during a library call stay proportional to the bytes of its
// inputs and outputs.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <attnref/core/checked_math.hpp>
#include <attnref/core/error.hpp>
#include <attnref/core/executor.hpp>
#include <attnref/core/profile.hpp>
#include <attnref/core/status.hpp>
#include <attnref/core/tensor_view.hpp>
#include <attnref/validate/logit_conventions.hpp>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/allocator_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ATTNREF_FUZZ_COUNT_ALLOCATIONS 1
#endif
#endif

namespace attnref_fuzz {

using attnref::ErrorCode;
using attnref::Status;
using attnref::TensorView;

/// Fails the fuzz run: prints what broke and aborts (libFuzzer reports a crash with the input).
[[noreturn]] inline void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "\nattnref fuzz invariant broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}

#define ATTNREF_FUZZ_CHECK(cond, detail)                \
  do {                                                  \
    if (!(cond)) ::attnref_fuzz::fail(#cond, (detail)); \
  } while (false)

/// Consumes fuzz bytes front to back. Past the end every read gives 0.
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : begin_(data), p_(data), end_(data + size) {}

  bool empty() const noexcept { return p_ == end_; }
  /// Bytes read so far (the input's offset of the next draw).
  std::size_t offset() const noexcept { return static_cast<std::size_t>(p_ - begin_); }
  std::size_t remaining() const noexcept { return static_cast<std::size_t>(end_ - p_); }

  std::uint8_t u8() noexcept { return p_ != end_ ? *p_++ : 0; }
  std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() noexcept {
    return static_cast<std::uint32_t>(u16()) | (static_cast<std::uint32_t>(u16()) << 16);
  }
  std::uint64_t u64() noexcept {
    return static_cast<std::uint64_t>(u32()) | (static_cast<std::uint64_t>(u32()) << 32);
  }
  bool flag() noexcept { return (u8() & 1) != 0; }
  /// True with probability about k/256.
  bool chance(int k) noexcept { return u8() < k; }
  /// An integer in [lo, hi], within 2^16 of lo (any lo <= hi: widened draws pass huge ones).
  std::int64_t range(std::int64_t lo, std::int64_t hi) noexcept {
    if (hi <= lo) return lo;
    const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) + 1;
    const std::uint64_t x = span == 0 ? u16() : u16() % span;  // (span 0: all of int64)
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + x);
  }
  /// A byte string of length in [0, max_len].
  std::string bytes(std::size_t max_len) {
    const std::size_t n = static_cast<std::size_t>(range(0, static_cast<std::int64_t>(max_len)));
    std::string s;
    for (std::size_t i = 0; i < n && !empty(); ++i) s += static_cast<char>(u8());
    return s;
  }

 private:
  const std::uint8_t* begin_;
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

/// Integers that break careless size arithmetic.
inline std::int64_t hostile_int(Reader& r, std::int64_t near) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  switch (r.u8() % 20) {
    case 0:
      return -1;
    case 1:
      return 0;
    case 2:
      return 1;
    case 3:
      return near;
    case 4:
      return near == kMax ? kMax : near + 1;  // (saturating: `near` may be huge)
    case 5:
      return near == kMin ? kMin : near - 1;
    case 6:
      return std::numeric_limits<std::int32_t>::max();
    case 7:
      return std::int64_t{1} << 31;
    case 8:
      return std::int64_t{1} << 32;
    case 9:
      return std::numeric_limits<std::int32_t>::min();
    case 10:
      return std::int64_t{1} << 62;
    case 11:
      return kMax;
    case 12:
      return kMin;
    case 13:
      return kMax / 2 + 1;
    case 14:
      return std::int64_t{3037000500};  // ~sqrt(INT64_MAX): squares overflow
    case 15:
      return near == kMin ? kMax : -near;
    case 16:
      return near > kMax / 2 ? kMax : near < kMin / 2 ? kMin : 2 * near;
    case 17:
      return std::int64_t{1} << 20;
    case 18:
      return static_cast<std::int64_t>(r.u64());
    default:
      return r.range(-4, 40);
  }
}

/// Reals that break careless option checks.
inline float hostile_real(Reader& r) {
  switch (r.u8() % 16) {
    case 0:
      return std::numeric_limits<float>::quiet_NaN();
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return -std::numeric_limits<float>::infinity();
    case 3:
      return 0.0f;
    case 4:
      return -0.0f;
    case 5:
      return std::numeric_limits<float>::denorm_min();
    case 6:
      return std::numeric_limits<float>::max();
    case 7:
      return -std::numeric_limits<float>::max();
    case 8:
      return 1e-30f;
    case 9:
      return 1e30f;
    case 10:
      return -1.0f;
    case 11: {
      const std::uint32_t bits = r.u32();
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    default:
      return static_cast<float>(r.range(-64, 64)) / 8.0f;
  }
}

/// splitmix64: bulk tensor values from a fuzz-chosen seed (bytes are too few to fill tensors).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Small values on a grid of 1/8 in [-2, 2]: well-conditioned sums.
  float small() noexcept { return static_cast<float>(static_cast<int>(next() % 33) - 16) / 8.0f; }

 private:
  std::uint64_t s_;
};

/// Which widened draws an input asks for. Each is a bit of the "wide" byte that follows the case
/// byte and the seed; 0 turns them all off, so a corpus input with a 0 there decodes as a plain
/// draw.
struct Wide {
  std::uint8_t bits = 0;
  /// Huge extents (past int32, up to 2^40 and beyond) next to a zero-size dimension, so every
  /// tensor stays empty or small: work must follow the data, not the largest extent.
  bool huge_zero() const noexcept { return (bits & 1) != 0; }
  /// Many query / KV heads and many per-head masks within a bounded input.
  bool many_heads() const noexcept { return (bits & 2) != 0; }
  /// int64 metadata (lengths, page indices, cu_q_lens, num_seqs, mask offsets) past int32.
  bool int64_meta() const noexcept { return (bits & 4) != 0; }
  /// Special option values: 0, negative, denormal, FLT_MAX, inf, nan; windows 0, negative,
  /// INT64_MAX; block sizes 0 or huge.
  bool special_options() const noexcept { return (bits & 8) != 0; }
};

/// A harness's cases, one per dtype combination: each reads the rest of the input.
using CaseFn = void (*)(Reader&, Rng&, const Wide&);

/// One fuzz input: the first byte picks the case, the next eight seed the bulk-data PRNG, the
/// next one is the Wide byte.
template <size_t N>
int run_one(const std::uint8_t* data, std::size_t size, const CaseFn (&cases)[N]) {
  Reader r(data, size);
  const std::uint8_t kind = r.u8();
  Rng rng(r.u64());
  Wide wide;
  wide.bits = r.u8();
  cases[kind % N](r, rng, wide);
  return 0;
}

/// An extent past int32 (2^31 .. 2^40 and beyond), for a tensor that also has a zero extent.
inline std::int64_t huge_extent(Reader& r) {
  switch (r.u8() % 10) {
    case 0:
      return std::int64_t{1} << 31;
    case 1:
      return std::int64_t{1} << 32;
    case 2:
      return (std::int64_t{1} << 32) + 1;
    case 3:
      return std::int64_t{1} << 34;
    case 4:
      return std::int64_t{1} << 40;
    case 5:
      return (std::int64_t{1} << 40) + 3;
    case 6:
      return std::int64_t{1} << 48;
    case 7:
      return std::int64_t{1} << 62;
    case 8:
      return std::numeric_limits<std::int64_t>::max();
    default:
      return std::int64_t{1} << r.range(20, 62);
  }
}

/// An int64 metadata value just past int32, or far past it.
inline std::int64_t past_int32(Reader& r) {
  constexpr std::int64_t k31 = std::int64_t{1} << 31, k32 = std::int64_t{1} << 32;
  switch (r.u8() % 8) {
    case 0:
      return k31;
    case 1:
      return k32;
    case 2:
      return k32 + r.range(0, 8);
    case 3:
      return -k32 + r.range(-1, 1);
    case 4:
      return k31 + r.range(0, 8);
    case 5:
      return std::int64_t{1} << 40;
    case 6:
      return std::numeric_limits<std::int64_t>::max() - r.range(0, 2);
    default:
      return static_cast<std::int64_t>(r.u64() | (std::uint64_t{1} << 33));
  }
}

/// A page size past int32 for a call that can be valid: `past_int32` with the sign bit cleared
/// (its negative draws made a negative page size whose saturated capacity passed for a large
/// one, and the harness's own length sums overflowed).
inline std::int64_t positive_past_int32(Reader& r) {
  return static_cast<std::int64_t>(
      static_cast<std::uint64_t>(past_int32(r)) &
      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
}

/// Option reals at the edges: 0, -0, negative, denormal, FLT_MAX, inf, nan (both signs).
inline float special_real(Reader& r) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  switch (r.u8() % 14) {
    case 0:
      return 0.0f;
    case 1:
      return -0.0f;
    case 2:
      return -1.0f;
    case 3:
      return -std::numeric_limits<float>::denorm_min();
    case 4:
      return std::numeric_limits<float>::denorm_min();
    case 5:
      return 1e-40f;  // denormal
    case 6:
      return std::numeric_limits<float>::min();
    case 7:
      return std::numeric_limits<float>::max();  // float's nearest to 1e39 is inf
    case 8:
      return kInf;
    case 9:
      return -kInf;
    case 10:
      return std::numeric_limits<float>::quiet_NaN();
    case 11:
      return -std::numeric_limits<float>::quiet_NaN();
    case 12:
      return -std::numeric_limits<float>::max();
    default:
      return hostile_real(r);
  }
}

/// Block sizes, windows and counts at the edges: 0, negative, 1, huge, INT64_MAX / MIN.
inline std::int64_t special_int(Reader& r, std::int64_t near) {
  switch (r.u8() % 8) {
    case 0:
      return 0;
    case 1:
      return -1;
    case 2:
      return std::numeric_limits<std::int64_t>::max();
    case 3:
      return std::numeric_limits<std::int64_t>::min();
    case 4:
      return huge_extent(r);
    case 5:
      return 1;
    default:
      return hostile_int(r, near);
  }
}

/// Every error must render: a code with a name, a message and a hint that format without
/// crashing (the renderer reads format strings and stored values).
inline void check_error_renders(const attnref::Status& s) {
  if (s.ok()) return;
  ATTNREF_FUZZ_CHECK(std::strcmp(attnref::error_code_name(s.code()), "unknown") != 0,
                     "an error code without a name");
  const std::string m = s.message();
  ATTNREF_FUZZ_CHECK(!m.empty() && m != "ok", "an error with an empty message");
  (void)s.hint();
  (void)s.to_string();
}

/// The data tier's answer when the visible region is finite (NaN lies only outside it).
inline void check_accepts_finite(const attnref::Status& s) {
  check_error_renders(s);
  ATTNREF_FUZZ_CHECK(s.ok(), "data tier rejected NaN outside the visible region: " + s.to_string());
}

/// The data tier's answer to a NaN or Inf planted inside the visible region.
inline void check_reports_non_finite(const attnref::Status& s) {
  ATTNREF_FUZZ_CHECK(s.code() == attnref::ErrorCode::kNonFiniteData,
                     "data tier missed a NaN/Inf: " + s.to_string());
  check_error_renders(s);
}

/// Elements of a buffer the harness allocates: keeps the harness itself under ~64 MiB.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 20;

/// a * b and a + b, saturating at INT64_MAX (work estimates of hostile shapes).
inline std::int64_t sat_mul(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return attnref::checked_mul(a, b, &out) ? out : std::numeric_limits<std::int64_t>::max();
}
inline std::int64_t sat_add(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return attnref::checked_add(a, b, &out) ? out : std::numeric_limits<std::int64_t>::max();
}

// --- view geometries and the buffers behind them ----------------------------------------------

/// The geometry of one view and the buffer behind it.
template <size_t R>
struct Geometry {
  std::array<std::int64_t, R> extents{};
  std::array<std::int64_t, R> strides{};
  bool null_data = false;
  bool unknown_size = false;  // buffer_size = -1 (only for views no mutation touched)
  std::int64_t shrink = 0;    // buffer_size = allocation - shrink
  bool mutated = false;
};

/// Elements a view of this geometry reaches (last offset + 1), or -1 when that is not a small,
/// well-formed number.
template <size_t R>
std::int64_t reach(const Geometry<R>& g) {
  for (size_t i = 0; i < R; ++i) {
    if (g.extents[i] < 0 || g.strides[i] < 0) return -1;
    if (g.extents[i] == 0) return 0;
  }
  std::int64_t last = 0;
  for (size_t i = 0; i < R; ++i) {
    std::int64_t step = 0;
    if (!attnref::checked_mul(g.extents[i] - 1, g.strides[i], &step) ||
        !attnref::checked_add(last, step, &last))
      return -1;
  }
  return last < kMaxElements ? last + 1 : -1;
}

/// Row-major strides with `pad` extra elements per innermost row (saturating: the validator
/// reports what overflows).
template <size_t R>
std::array<std::int64_t, R> padded_strides(const std::array<std::int64_t, R>& e, std::int64_t pad) {
  std::array<std::int64_t, R> s{};
  std::int64_t run = 1;
  for (size_t i = R; i-- > 0;) {
    s[i] = run;
    std::int64_t e_i = 0;
    if (!attnref::checked_add(std::max<std::int64_t>(e[i], 1), i == R - 1 ? pad : 0, &e_i) ||
        !attnref::checked_mul(run, e_i, &run))
      run = std::numeric_limits<std::int64_t>::max();
  }
  return s;
}

/// A heap buffer sized by a geometry (new[], so ASan bounds it exactly; std::vector<bool> has
/// no bool*) and the view over it, whose buffer_size is the truth (or less, when a mutation
/// shrinks it; or -1 for an untouched, in-bounds view).
template <class T, size_t R>
struct Buffer {
  std::unique_ptr<T[]> data;
  std::int64_t size = 0;
  attnref::TensorView<T, R> view;
  attnref::TensorView<const T, R> cview() const { return view; }
};

template <class T, size_t R>
void make_buffer(const Geometry<R>& g, T fill, Buffer<T, R>* b) {
  const std::int64_t need = reach(g);
  const std::int64_t alloc = need >= 0 ? std::max<std::int64_t>(need, 1) : 16;
  b->data.reset(new T[static_cast<size_t>(alloc)]);
  std::fill(b->data.get(), b->data.get() + alloc, fill);
  b->size = alloc;
  std::int64_t size = need >= 0 ? need : alloc;
  if (g.shrink > 0) size = std::max<std::int64_t>(0, size - g.shrink);
  if (g.unknown_size && !g.mutated && need >= 0) size = -1;
  T* p = g.null_data ? nullptr : b->data.get();
  b->view = attnref::TensorView<T, R>(p, g.extents, g.strides, size);
}

/// Offset of an index tuple in a geometry when it lies inside `alloc` elements, else -1.
template <size_t R>
std::int64_t safe_offset(const Geometry<R>& g, const std::array<std::int64_t, R>& idx,
                         std::int64_t alloc) {
  std::int64_t off = 0;
  for (size_t i = 0; i < R; ++i) {
    if (idx[i] < 0 || idx[i] >= g.extents[i] || g.strides[i] < 0) return -1;
    std::int64_t step = 0;
    if (!attnref::checked_mul(idx[i], g.strides[i], &step) ||
        !attnref::checked_add(off, step, &off))
      return -1;
  }
  return off < alloc ? off : -1;
}

/// Mutation `field` of one geometry (0..3: a hostile extent or stride, 4: the buffer shrinks,
/// 5: null data); the dimension comes from the next byte.
template <size_t R>
void mutate_field(Reader& r, Geometry<R>& g, int field, std::int64_t near) {
  g.mutated = true;
  const size_t dim = static_cast<size_t>(r.u8()) % R;
  if (field == 4) {
    g.shrink = r.range(1, 4);
  } else if (field == 5) {
    g.null_data = true;
  } else if (field % 2 == 0) {
    g.extents[dim] = hostile_int(r, near);
  } else {
    g.strides[dim] = hostile_int(r, near);
  }
}

/// A random mutation of one geometry.
template <size_t R>
void mutate(Reader& r, Geometry<R>& g, std::int64_t near) {
  mutate_field(r, g, r.u8() % 6, near);
}

/// One geometry a harness may mutate, and the size hostile values cluster around.
template <size_t R>
struct MutationTarget {
  Geometry<R>* g;
  std::int64_t near;
};
template <size_t R>
MutationTarget<R> mutation_target(Geometry<R>& g, std::int64_t near) {
  return {&g, near};
}

/// Mutates the i-th of `targets` (nothing when i is past them) with mutation `field`, or a
/// field read from the input when `field` < 0.
template <class... Targets>
void mutate_nth(Reader& r, int i, int field, const Targets&... targets) {
  int k = 0;
  ((k++ == i ? mutate_field(r, *targets.g, field < 0 ? r.u8() % 6 : field, targets.near) : void()),
   ...);
}

/// A [A, B, C] layout: row-major with padding, or B-major ([B, A, C] in memory).
inline Geometry<3> layout3(Reader& r, std::int64_t a, std::int64_t b, std::int64_t c) {
  Geometry<3> g;
  g.extents = {a, b, c};
  if (r.u8() % 3 == 0) {
    const std::int64_t row = sat_add(c, r.range(0, 2));  // (saturating: widened extents)
    g.strides = {row, sat_mul(std::max<std::int64_t>(a, 1), row), 1};
  } else {
    g.strides = padded_strides<3>(g.extents, r.range(0, 3));
  }
  return g;
}

/// An output geometry of extents `e`, row-major with padding, hostile with probability
/// hostile_chance / 256: a hostile extent or stride, a stride of 0 (overlapping elements; only
/// when `zero_stride`), a short buffer or null data.
template <size_t R>
Geometry<R> output_geometry(Reader& r, const std::array<std::int64_t, R>& e, int hostile_chance,
                            bool zero_stride = true) {
  Geometry<R> g;
  g.extents = e;
  g.strides = padded_strides<R>(e, r.range(0, 2));
  if (r.chance(hostile_chance)) {
    int f = r.u8() % (zero_stride ? 5 : 4);
    if (!zero_stride && f >= 2) ++f;
    if (f == 0)
      g.extents[r.u8() % R] = hostile_int(r, e[R - 1]);
    else if (f == 1)
      g.strides[r.u8() % R] = hostile_int(r, e[R - 1]);
    else if (f == 2)
      g.strides[r.u8() % R] = 0;
    else if (f == 3)
      g.shrink = r.range(1, 3);
    else
      g.null_data = true;
    g.mutated = true;
  }
  return g;
}

/// A copy of a buffer, and whether the buffer still holds it bit for bit ("not written").
template <class T, size_t R>
std::vector<T> snapshot(const Buffer<T, R>& b) {
  return std::vector<T>(b.data.get(), b.data.get() + b.size);
}
template <class T, size_t R>
bool unchanged(const Buffer<T, R>& b, const std::vector<T>& before) {
  return std::equal(before.begin(), before.end(), b.data.get(),
                    [](const T& x, const T& y) { return std::memcmp(&x, &y, sizeof(T)) == 0; });
}

/// The status an output view of shape `want` gets (shape first, then the view itself).
template <class T, size_t R>
attnref::Status output_status(const attnref::TensorView<T, R>& v,
                              const std::array<std::int64_t, R>& want, const char* name) {
  if (v.extents != want)
    return attnref::Status(attnref::ErrorCode::kShapeMismatch, "", "shape", "", {}, {}, name);
  return attnref::check_output_view(v, name);
}

/// Rounding unit of a stored element type (half and bfloat16: bf16's 8-bit mantissa).
template <class T>
constexpr double store_eps() {
  return std::is_same<T, double>::value  ? 0x1p-52
         : std::is_same<T, float>::value ? 0x1p-23
                                         : 0x1p-7;
}

// --- executors ----------------------------------------------------------------------------------

/// A serial executor that claims concurrency (so kernels take their parallel paths) and runs
/// the items in reverse order (so no kernel relies on order).
struct ClaimedConcurrency {
  int c;
  int concurrency() const noexcept { return c; }
  template <class Fn>
  void parallel_for(std::int64_t n, const Fn& fn) const {
    for (std::int64_t i = n; i-- > 0;) fn(i);
  }
};

/// A real two-thread pool, shared by every run.
inline attnref::ThreadPoolExecutor& pool() {
  static attnref::ThreadPoolExecutor p(2);
  return p;
}

// --- the work budget ----------------------------------------------------------------------------
// Invariant "work proportional to input bytes": while a library call runs under a BudgetScope,
// the bytes it holds allocated at once (counted by ASan's malloc/free hooks: operator new,
// malloc, Eigen's aligned allocations, on every thread) stay under
//   kBudgetFixedBytes + kBudgetBytesPerByte * (bytes of the call's input and output buffers),
// and the parallel_for items it hands a Counted executor stay under
//   kBudgetFixedItems + (elements of those buffers).
// "Buffers" are the allocations the harness made behind the views (not the elements a view
// claims): an extent of 2^40 next to a zero-size dimension, or a head count no tensor holds,
// buys no budget. Output buffers count, and a validated output view never overlaps, so a call
// whose output really has N elements may use O(N) memory and items.
// Constants: 16 MiB covers what does not scale with the call (per-thread tile scratch of a few
// [128, 128] float64 tiles, a MaskInfo for a handful of blocks, exception and message strings);
// 64 bytes per byte covers a kernel widening every element to float64 (8x from int8), keeping
// a few such copies (K, V, scores) and std::vector's doubling growth (2x). Items: one per
// (sequence or head, block) pair is at most one per output element, plus 65536 for fixed fan-out.
// An excess aborts at once in the allocation (or parallel_for) that crossed the budget, with
// the stack, so libFuzzer saves the input.
inline constexpr std::int64_t kBudgetFixedBytes = std::int64_t{16} << 20;
inline constexpr std::int64_t kBudgetBytesPerByte = 64;
inline constexpr std::int64_t kBudgetFixedItems = std::int64_t{1} << 16;

namespace detail {
struct BudgetState {
  std::atomic<bool> active{false};
  std::atomic<std::int64_t> live{0};  // bytes allocated minus freed since the scope began
  std::atomic<std::int64_t> peak{0};
  std::atomic<std::int64_t> items{0};
  std::int64_t byte_budget = 0;
  std::int64_t item_budget = 0;
  const char* what = "";
};
inline BudgetState& budget_state() {
  static BudgetState s;
  return s;
}

/// Prints without allocating (called from inside malloc), then the stack, then aborts.
[[noreturn]] inline void budget_exceeded(const char* kind, std::int64_t used, std::int64_t budget) {
  BudgetState& s = budget_state();
  s.active.store(false);
  char msg[320];
  const int n =
      std::snprintf(msg, sizeof msg,
                    "\nattnref fuzz invariant broken: work not proportional to input "
                    "bytes\n%s: %s %lld over the budget %lld\n",
                    s.what, kind, static_cast<long long>(used), static_cast<long long>(budget));
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(std::min<int>(n, sizeof msg - 1)));
#if defined(ATTNREF_FUZZ_COUNT_ALLOCATIONS)
  __sanitizer_print_stack_trace();
#endif
  std::abort();
}

#if defined(ATTNREF_FUZZ_COUNT_ALLOCATIONS)
inline void on_malloc(const volatile void*, size_t n) {
  BudgetState& s = budget_state();
  if (!s.active.load(std::memory_order_relaxed)) return;
  const std::int64_t live =
      s.live.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
  std::int64_t peak = s.peak.load(std::memory_order_relaxed);
  while (live > peak && !s.peak.compare_exchange_weak(peak, live)) {
  }
  if (live > s.byte_budget) budget_exceeded("bytes allocated at once", live, s.byte_budget);
}
inline void on_free(const volatile void* p) {
  BudgetState& s = budget_state();
  if (!s.active.load(std::memory_order_relaxed)) return;
  s.live.fetch_sub(static_cast<std::int64_t>(__sanitizer_get_allocated_size(p)));
}
#endif
}  // namespace detail

/// The elements and bytes of the buffers behind a call (inputs and outputs).
struct DataSize {
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
  template <class T, size_t R>
  DataSize& add(const Buffer<T, R>& b) {
    return add_raw(b.size, static_cast<std::int64_t>(sizeof(T)));
  }
  template <class T>
  DataSize& add(const std::vector<T>& v) {
    return add_raw(static_cast<std::int64_t>(v.size()), static_cast<std::int64_t>(sizeof(T)));
  }
  DataSize& add_raw(std::int64_t n, std::int64_t itemsize) {
    elements = sat_add(elements, n);
    bytes = sat_add(bytes, sat_mul(n, itemsize));
    return *this;
  }
};

/// Counts allocations and executor items from construction to destruction against the budget
/// of `data` (see above). Scopes do not nest.
class BudgetScope {
 public:
  BudgetScope(const char* what, const DataSize& data) {
    detail::BudgetState& s = detail::budget_state();
#if defined(ATTNREF_FUZZ_COUNT_ALLOCATIONS)
    static const bool installed =
        __sanitizer_install_malloc_and_free_hooks(detail::on_malloc, detail::on_free) != 0;
    if (!installed) fail("cannot install the allocation hooks");
#endif
    s.what = what;
    s.byte_budget = sat_add(kBudgetFixedBytes, sat_mul(kBudgetBytesPerByte, data.bytes));
    s.item_budget = sat_add(kBudgetFixedItems, data.elements);
    s.live.store(0);
    s.peak.store(0);
    s.items.store(0);
    s.active.store(true);
  }
  ~BudgetScope() { detail::budget_state().active.store(false); }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;
  /// Peak bytes and items so far (ATTNREF_FUZZ_VERBOSE reports).
  std::int64_t peak_bytes() const { return detail::budget_state().peak.load(); }
  std::int64_t items() const { return detail::budget_state().items.load(); }
};

/// An executor that counts the items of every parallel_for against the active BudgetScope
/// (before running them, so a loop over 2^34 heads is reported instead of timing out) and
/// hands the work to `inner`.
template <class Inner>
struct Counted {
  Inner inner;
  int concurrency() const noexcept { return inner.concurrency(); }
  template <class Fn>
  void parallel_for(std::int64_t n, const Fn& fn) const {
    detail::BudgetState& s = detail::budget_state();
    if (s.active.load()) {
      const std::int64_t total = sat_add(s.items.fetch_add(n), n);
      if (total > s.item_budget)
        detail::budget_exceeded("parallel_for items", total, s.item_budget);
    }
    inner.parallel_for(n, fn);
  }
};
template <class Inner>
Counted<Inner> counted(Inner inner) {
  return Counted<Inner>{inner};
}
/// The shared pool, counted (the pool itself is not copyable).
struct PoolRef {
  int concurrency() const noexcept { return pool().concurrency(); }
  template <class Fn>
  void parallel_for(std::int64_t n, const Fn& fn) const {
    pool().parallel_for(n, fn);
  }
};

/// Engine features every family takes, drawn after a harness's other draws (older corpus inputs
/// then decode their call as before).
/// A sliding window, about 1 call in 4: mostly in [1, longest + 1], 1 in 8 of those hostile (0,
/// negative, INT64_MAX, ...).
inline std::optional<std::int64_t> draw_window(Reader& r, std::int64_t longest) {
  if (!r.chance(64)) return std::nullopt;
  if (r.chance(32)) return hostile_int(r, longest);
  return r.range(1, sat_add(std::max<std::int64_t>(longest, 0), 1));
}

/// A per-query-head vector (sinks, ALiBi slopes), about 1 call in 4: `heads` values (1 in 16 one
/// more or one fewer: a shape error) of Rng::small() * `scale`; with `hostile`, 1 in 16 calls
/// one value is a hostile real (NaN, Inf, huge). Nothing (an empty view) past 4096 heads unless
/// the count is off. Returns whether a vector was drawn; `b` holds exactly its elements.
inline bool draw_head_values(Reader& r, Rng& rng, std::int64_t heads, float scale, bool hostile,
                             Buffer<float, 1>* b) {
  if (!r.chance(64)) return false;
  std::int64_t n = heads;
  if (r.chance(16)) n = r.flag() ? sat_add(heads, 1) : heads - 1;
  if (n < 0 || n > 4096) return false;
  Geometry<1> g;
  g.extents = {n};
  g.strides = {1};
  make_buffer(g, 0.0f, b);
  for (std::int64_t h = 0; h < n; ++h) b->data[static_cast<size_t>(h)] = rng.small() * scale;
  if (hostile && n > 0 && r.chance(16))
    b->data[static_cast<size_t>(r.range(0, n - 1))] = hostile_real(r);
  return true;
}

/// One logit convention from 3 bits: 7 a value no enumerator has (the next byte picks 2, -1,
/// INT32_MAX or INT32_MIN), an odd value `other`, an even one `standard` (the default).
template <class Enum>
Enum draw_convention(Reader& r, unsigned bits, Enum standard, Enum other) {
  bits &= 7u;
  if (bits != 7u) return (bits & 1u) != 0 ? other : standard;
  constexpr int kNoEnumerator[] = {2, -1, std::numeric_limits<int>::max(),
                                   std::numeric_limits<int>::min()};
  return static_cast<Enum>(kNoEnumerator[r.u8() % 4]);
}

/// The logit conventions (alibi_convention, soft_cap_order), drawn after the other engine
/// features from one byte, bits 0-2 and 3-5 (0, or an input that ends before it: both
/// defaults): each 1 in 2 the default, 3 in 8 the other enumerator, 1 in 8 no enumerator.
template <class Args>
void draw_conventions(Reader& r, Args* a) {
  if (std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr)  // where a seed sets them
    std::fprintf(stderr, "conventions byte at offset %zu\n", r.offset());
  const unsigned bits = r.u8();
  a->alibi_convention = draw_convention(r, bits, attnref::AlibiConvention::kSigned,
                                        attnref::AlibiConvention::kAbsolute);
  a->soft_cap_order = draw_convention(r, bits >> 3, attnref::SoftCapOrder::kCapThenAlibi,
                                      attnref::SoftCapOrder::kAlibiThenCap);
}

/// The error the conventions of `a` alone give under `profile`: kJax refuses any non-default
/// value (option_not_in_jax), kReference a value no enumerator has (invalid_convention).
template <class Args>
attnref::ErrorCode convention_error(const Args& a, attnref::Profile profile) {
  const bool standard = a.alibi_convention == attnref::AlibiConvention::kSigned &&
                        a.soft_cap_order == attnref::SoftCapOrder::kCapThenAlibi;
  if (profile == attnref::Profile::kJax && !standard) return ErrorCode::kOptionNotInJax;
  return attnref::check_logit_conventions(a.alibi_convention, a.soft_cap_order).code();
}

/// Invariant of the conventions on a call whose statuses are `jax` and `ref`; `check(args,
/// profile)` validates. Unless both conventions are the defaults, the same call with the defaults
/// is checked too: conventions a profile takes change nothing; the others give exactly their
/// error where the defaults pass, and that error or the defaults' where those fail (whichever
/// check runs first).
template <class Args, class Check>
void check_conventions(const Args& a, const Status& jax, const Status& ref, const Check& check) {
  if (a.alibi_convention == attnref::AlibiConvention::kSigned &&
      a.soft_cap_order == attnref::SoftCapOrder::kCapThenAlibi)
    return;
  Args standard = a;
  standard.alibi_convention = attnref::AlibiConvention::kSigned;
  standard.soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
  for (const attnref::Profile profile : {attnref::Profile::kJax, attnref::Profile::kReference}) {
    const Status& with = profile == attnref::Profile::kJax ? jax : ref;
    const Status without = check(standard, profile);
    const ErrorCode own = convention_error(a, profile);
    const std::string detail =
        std::string(profile == attnref::Profile::kJax ? "jax" : "reference") + ": " +
        with.to_string() + " (defaults: " + without.to_string() + ")";
    if (own == ErrorCode::kOk) {
      ATTNREF_FUZZ_CHECK(with.code() == without.code(),
                         "a convention changed the check: " + detail);
    } else if (without.ok()) {
      ATTNREF_FUZZ_CHECK(with.code() == own, "a refused convention not reported: " + detail);
    } else {
      ATTNREF_FUZZ_CHECK(with.code() == own || with.code() == without.code(),
                         "a refused convention gave another error: " + detail);
    }
  }
}

}  // namespace attnref_fuzz
