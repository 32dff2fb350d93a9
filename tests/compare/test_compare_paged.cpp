// SPDX-License-Identifier: Apache-2.0
// The comparison report of the paged family (compare/paged.hpp): each likely cause is made with
// the float64 oracle of reference/paged.hpp (the oracle run on the changed inputs) and the
// report must name that cause and no other; a correct output names none; an output that is
// simply wrong gets "no likely cause found" with its localization; padding rows; the work cap;
// the sliding window off by one, sinks ignored, and the window, sinks and ALiBi slopes kept
// by every other hypothesis.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnref/compare/paged.hpp"
#include "reference/paged.hpp"

namespace {

using attnref::KvLayout;
using attnref::PagedAttentionArgs;
using attnref::TensorView;
namespace compare = attnref::compare;

/// A float32 decode batch in JAX's layout, every page slot filled (so a kernel that reads one
/// key past a length reads a real value).
struct Problem {
  std::int64_t batch = 3, hq = 4, hkv = 2, dim = 8, page_size = 4, pps = 3, pages = 10;
  std::vector<float> q, k, v;
  std::vector<std::int32_t> lengths{5, 9, 3}, table;
  PagedAttentionArgs<float> args;

  explicit Problem(float q_scale = 1.0f) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t i = 0; i < batch * hq * dim; ++i) q.push_back(q_scale * u(rng));
    for (std::int64_t i = 0; i < hkv * pages * page_size * dim; ++i) k.push_back(u(rng));
    for (std::int64_t i = 0; i < hkv * pages * page_size * dim; ++i) v.push_back(u(rng));
    table = {0, 3, 6, 1, 4, 7, 2, 5, 8};
    args.q = {q.data(), {batch, hq, dim}};
    args.k_pages = {k.data(), {hkv, pages, page_size, dim}};
    args.v_pages = {v.data(), {hkv, pages, page_size, dim}};
    args.lengths = {lengths.data(), {batch}};
    args.page_indices = {table.data(), {batch, pps}};
  }
};

compare::Options options() {
  compare::Options o;
  o.tol = {1e-4, 1e-4};
  return o;
}

compare::Report report_of(const PagedAttentionArgs<float>& a, const std::vector<double>& got,
                          const std::vector<double>& got_lse = {}, compare::Options o = options()) {
  compare::Report r;
  const attnref::Status s = compare::try_compare_paged(a, got, got_lse, o, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

/// The report names exactly one cause, containing `words`.
void expect_one_cause(const compare::Report& r, const std::string& words) {
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.causes.size(), 1u) << compare::format_report(r);
  EXPECT_NE(r.causes[0].what.find(words), std::string::npos) << compare::format_report(r);
}

TEST(ComparePaged, CorrectOutputNamesNoCause) {
  Problem p;
  const compare::Report r = report_of(p.args, attnref::reference::paged_attention(p.args));
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.causes.empty());
  EXPECT_EQ(r.count, p.batch * p.hq * p.dim);
}

TEST(ComparePaged, SmScaleOneOverSqrtD) {
  Problem p;
  PagedAttentionArgs<float> wrong = p.args;
  wrong.sm_scale = 1.0f / std::sqrt(8.0f);
  const compare::Report r = report_of(p.args, attnref::reference::paged_attention(wrong));
  expect_one_cause(r, "sm_scale 1/sqrt(head_dim)");
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kSet);
  EXPECT_EQ(r.causes[0].reproduce.field, "sm_scale");
  EXPECT_EQ(r.causes[0].reproduce.value, "0.353553");
  EXPECT_NE(compare::format_report(r).find("heads 0-3 all wrong"), std::string::npos)
      << compare::format_report(r);
}

TEST(ComparePaged, SmScaleOneInsteadOfAsked) {
  Problem p;
  p.args.sm_scale = 0.25f;
  PagedAttentionArgs<float> wrong = p.args;
  wrong.sm_scale = 1.0f;
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(wrong)),
                   "sm_scale 1 used instead of 0.25");
}

TEST(ComparePaged, Log2Softmax) {
  Problem p;
  PagedAttentionArgs<float> wrong = p.args;
  wrong.sm_scale = static_cast<float>(std::log(2.0));
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(wrong)), "ln 2");
}

TEST(ComparePaged, InterleavedGqaMapping) {
  Problem p;
  // The oracle with query heads reordered: reference head h * G + g holds query head
  // g * Hkv + h, so its output there is what an interleaved kernel writes for that head.
  const std::int64_t g_size = p.hq / p.hkv;
  std::vector<float> q2(p.q.size());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.hkv; ++h)
      for (std::int64_t g = 0; g < g_size; ++g)
        for (std::int64_t d = 0; d < p.dim; ++d)
          q2[static_cast<std::size_t>((b * p.hq + h * g_size + g) * p.dim + d)] =
              p.q[static_cast<std::size_t>((b * p.hq + g * p.hkv + h) * p.dim + d)];
  PagedAttentionArgs<float> permuted = p.args;
  permuted.q = {q2.data(), {p.batch, p.hq, p.dim}};
  const std::vector<double> out2 = attnref::reference::paged_attention(permuted);
  std::vector<double> got(out2.size());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.hkv; ++h)
      for (std::int64_t g = 0; g < g_size; ++g)
        for (std::int64_t d = 0; d < p.dim; ++d)
          got[static_cast<std::size_t>((b * p.hq + g * p.hkv + h) * p.dim + d)] =
              out2[static_cast<std::size_t>((b * p.hq + h * g_size + g) * p.dim + d)];
  const compare::Report r = report_of(p.args, got);
  expect_one_cause(r, "qh % num_kv_heads");
  // Heads 0 and 3 map to the same KV head either way: right; 1 and 2 all wrong.
  EXPECT_NE(compare::format_report(r).find("heads 1-2 all wrong"), std::string::npos)
      << compare::format_report(r);
}

TEST(ComparePaged, KvReadInAnotherLayout) {
  Problem p;
  PagedAttentionArgs<float> wrong = p.args;
  wrong.k_pages = attnref::kv_pages_view<const float>(p.k.data(), KvLayout::kNhd, p.hkv, p.pages,
                                                      p.page_size, p.dim);
  wrong.v_pages = attnref::kv_pages_view<const float>(p.v.data(), KvLayout::kNhd, p.hkv, p.pages,
                                                      p.page_size, p.dim);
  const compare::Report r = report_of(p.args, attnref::reference::paged_attention(wrong));
  expect_one_cause(r, "read as nhd");
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kRelayout);
  EXPECT_EQ(r.causes[0].reproduce.field, "kv_layout");
  EXPECT_EQ(r.causes[0].reproduce.value, "nhd");
}

TEST(ComparePaged, KAndVSwapped) {
  Problem p;
  PagedAttentionArgs<float> wrong = p.args;
  std::swap(wrong.k_pages, wrong.v_pages);
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(wrong)),
                   "K and V swapped");
}

TEST(ComparePaged, SoftCapMissing) {
  Problem p(4.0f);
  p.args.soft_cap = 2.0f;
  PagedAttentionArgs<float> wrong = p.args;
  wrong.soft_cap.reset();
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(wrong)),
                   "soft cap 2 not applied");
}

TEST(ComparePaged, SoftCapNotAsked) {
  Problem p(8.0f);
  PagedAttentionArgs<float> wrong = p.args;
  wrong.soft_cap = 10.0f;
  const compare::Report r = report_of(p.args, attnref::reference::paged_attention(wrong));
  expect_one_cause(r, "soft cap of 10 applied");
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kSet);
  EXPECT_EQ(r.causes[0].reproduce.field, "soft_cap");
  EXPECT_EQ(r.causes[0].reproduce.value, "10");
}

TEST(ComparePaged, LastKeyDropped) {
  Problem p;
  std::vector<std::int32_t> shorter{4, 8, 2};
  PagedAttentionArgs<float> wrong = p.args;
  wrong.lengths = {shorter.data(), {p.batch}};
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(wrong)),
                   "last key of each sequence dropped");
}

TEST(ComparePaged, OneKeyPastTheLength) {
  Problem p;
  std::vector<std::int32_t> longer{6, 10, 4};
  PagedAttentionArgs<float> wrong = p.args;
  wrong.lengths = {longer.data(), {p.batch}};
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(wrong)), "one key past");
}

TEST(ComparePaged, OnePastSkippedWhenPagesAreFull) {
  Problem p;
  p.lengths = {5, 12, 3};  // sequence 1 fills its 3 pages: no key past it to read
  p.args.lengths = {p.lengths.data(), {p.batch}};
  std::vector<double> got = attnref::reference::paged_attention(p.args);
  got[static_cast<std::size_t>(1 * p.hq * p.dim)] += 1.0;
  const compare::Report r = report_of(p.args, got);
  EXPECT_TRUE(r.causes.empty()) << compare::format_report(r);
  ASSERT_FALSE(r.skipped.empty());
  EXPECT_NE(r.skipped.back().find("one key past"), std::string::npos);
}

TEST(ComparePaged, LogsumexpInLog2) {
  Problem p;
  std::vector<double> lse;
  const std::vector<double> out = attnref::reference::paged_attention(p.args, nullptr, &lse);
  for (double& x : lse) x /= std::log(2.0);
  const compare::Report r = report_of(p.args, out, lse);
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_EQ(r.lse_mismatches, p.batch * p.hq);
  expect_one_cause(r, "log2");
}

TEST(ComparePaged, PaddingRowsOnly) {
  Problem p;
  p.lengths = {5, 0, 3};
  p.args.lengths = {p.lengths.data(), {p.batch}};
  std::vector<double> got = attnref::reference::paged_attention(p.args);
  for (std::int64_t i = 0; i < p.hq * p.dim; ++i)
    got[static_cast<std::size_t>(p.hq * p.dim + i)] = 0.5;
  const compare::Report r = report_of(p.args, got);
  EXPECT_TRUE(r.padding_only);
  EXPECT_TRUE(r.causes.empty());
  EXPECT_NE(compare::format_report(r).find("only padding rows differ"), std::string::npos);
  compare::Options o = options();
  o.ignore_padding = true;
  const compare::Report ignored = report_of(p.args, got, {}, o);
  EXPECT_TRUE(ignored.ok());
  EXPECT_EQ(ignored.ignored_padding, p.hq * p.dim);
}

TEST(ComparePaged, SimplyWrongSaysNoLikelyCause) {
  Problem p;
  std::vector<double> got = attnref::reference::paged_attention(p.args);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-0.1, 0.1);
  for (std::size_t i = 0; i < got.size(); i += 3) got[i] += u(rng) + 0.05;
  const compare::Report r = report_of(p.args, got);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.causes.empty()) << compare::format_report(r);
  const std::string text = compare::format_report(r);
  EXPECT_NE(text.find("no likely cause found"), std::string::npos);
  EXPECT_NE(text.find("where: per sequence and query head"), std::string::npos) << text;
}

TEST(ComparePaged, OnlyMismatchingSequencesAndTheCap) {
  Problem p;
  PagedAttentionArgs<float> wrong = p.args;
  std::swap(wrong.k_pages, wrong.v_pages);
  std::vector<double> got = attnref::reference::paged_attention(p.args);
  const std::vector<double> swapped = attnref::reference::paged_attention(wrong);
  // Only sequence 2 is wrong: the hypotheses run on it alone.
  for (std::int64_t i = 2 * p.hq * p.dim; i < 3 * p.hq * p.dim; ++i)
    got[static_cast<std::size_t>(i)] = swapped[static_cast<std::size_t>(i)];
  const compare::Report r = report_of(p.args, got);
  expect_one_cause(r, "K and V swapped");
  EXPECT_TRUE(r.cap_note.empty());
  // A cap below one sequence's work: the first heads only, and the report says so.
  compare::Options o = options();
  o.work_cap = 1;
  const compare::Report capped = report_of(p.args, got, {}, o);
  EXPECT_NE(capped.cap_note.find("1 of 4 mismatching heads"), std::string::npos) << capped.cap_note;
  expect_one_cause(capped, "K and V swapped");
}

TEST(ComparePaged, SlidingWindowOffByOne) {
  Problem p;
  p.args.sliding_window = 3;
  PagedAttentionArgs<float> wrong = p.args;
  wrong.sliding_window = 2;
  const compare::Report r = report_of(p.args, attnref::reference::paged_attention(wrong));
  ASSERT_NO_FATAL_FAILURE(expect_one_cause(r, "sliding window off by one: 2 instead of 3"));
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kSet);
  EXPECT_EQ(r.causes[0].reproduce.field, "sliding_window");
  EXPECT_EQ(r.causes[0].reproduce.value, "2");
}

// A window of INT64_MAX (no bound) is valid; its off-by-one hypotheses stop at INT64_MAX - 1
// instead of overflowing (fuzz_cli_args found `--sliding-window 9223372036854775807` with a
// mismatching --expect overflowing there; UBSan's report in the asan preset).
TEST(ComparePaged, UnboundedSlidingWindowHasNoWiderNeighbour) {
  Problem p;
  p.args.sliding_window = std::numeric_limits<std::int64_t>::max();
  PagedAttentionArgs<float> wrong = p.args;
  std::swap(wrong.k_pages, wrong.v_pages);
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(wrong)),
                   "K and V swapped");
}

// A length of INT64_MAX is valid over a page of INT64_MAX slots that all alias one row (slot
// stride 0) and, with a sliding window, costs only the window: the "one key past the length"
// hypothesis cannot run there and says so; the others still run.
TEST(ComparePaged, LengthOfInt64MaxSkipsOnePastTheLength) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  // head_dim 1: the pages' element count, INT64_MAX, must itself fit in int64.
  const std::vector<float> q{0.5f, -1.0f}, k{2.0f}, v{-1.0f};
  const std::vector<std::int64_t> lengths{kMax}, table{0};
  PagedAttentionArgs<float, float, std::int64_t> a;
  a.q = {q.data(), {1, 2, 1}};
  a.k_pages = TensorView<const float, 4>(k.data(), {1, 1, kMax, 1}, {1, 1, 0, 1}, 1);
  a.v_pages = TensorView<const float, 4>(v.data(), {1, 1, kMax, 1}, {1, 1, 0, 1}, 1);
  a.lengths = {lengths.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  a.sliding_window = 2;
  PagedAttentionArgs<float, float, std::int64_t> wrong = a;
  std::swap(wrong.k_pages, wrong.v_pages);
  compare::Report r;
  const attnref::Status s =
      compare::try_compare_paged(a, attnref::reference::paged_attention(wrong), {}, options(), &r);
  ASSERT_TRUE(s.ok()) << s.message();
  expect_one_cause(r, "K and V swapped");
  ASSERT_EQ(r.skipped.size(), 1u) << compare::format_report(r);
  EXPECT_NE(r.skipped[0].find("one key past each sequence's length read: the changed length "
                              "overflows int64"),
            std::string::npos)
      << r.skipped[0];
}

// Work estimates saturate at INT64_MAX: a sequence of that cost over two heads is tried alone,
// on its first head, and the report says so (the sum wrapped negative before and took both).
TEST(ComparePaged, SubsetWorkSaturates) {
  compare::OutputShape shape;
  shape.heads = 2;
  shape.dim = 1;
  shape.rows = {{0, 0, compare::RowKind::kDecode}, {1, 0, compare::RowKind::kDecode}};
  compare::RowErrors e;
  e.max_abs = {1, 1, 1, 1};
  e.compared = {1, 1, 1, 1};
  e.bad = {1, 1, 1, 1};
  compare::Report r;
  const compare::Subset s = compare::pick_subset(
      shape, e, [](std::int64_t) { return std::numeric_limits<std::int64_t>::max(); }, options(),
      &r);
  EXPECT_EQ(s.sequences, std::vector<std::int64_t>{0});
  EXPECT_EQ(s.heads, std::vector<std::int64_t>{0});
  EXPECT_NE(r.cap_note.find("1 of 2 mismatching sequences and 1 of 2 mismatching heads"),
            std::string::npos)
      << r.cap_note;
}

TEST(ComparePaged, SinksIgnored) {
  Problem p;
  const std::vector<float> sinks{0.5f, -0.25f, 1.0f, 0.0f};
  p.args.sinks = {sinks.data(), {4}};
  PagedAttentionArgs<float> wrong = p.args;
  wrong.sinks = {};
  const compare::Report r = report_of(p.args, attnref::reference::paged_attention(wrong));
  ASSERT_NO_FATAL_FAILURE(expect_one_cause(r, "attention sinks ignored"));
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kUnset);
  EXPECT_EQ(r.causes[0].reproduce.field, "sinks");
}

// A hypothesis changes one thing: the asked window, sinks and ALiBi slopes stay in its re-run.
TEST(ComparePaged, HypothesesKeepWindowSinksAndAlibi) {
  Problem p;
  const std::vector<float> sinks{0.5f, -0.25f, 1.0f, 0.0f}, slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  p.args.sliding_window = 4;
  p.args.sinks = {sinks.data(), {4}};
  p.args.alibi_slopes = {slopes.data(), {4}};
  PagedAttentionArgs<float> scaled = p.args;
  scaled.sm_scale = 1.0f / std::sqrt(8.0f);
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(scaled)),
                   "sm_scale 1/sqrt(head_dim)");
  PagedAttentionArgs<float> swapped = p.args;
  std::swap(swapped.k_pages, swapped.v_pages);
  expect_one_cause(report_of(p.args, attnref::reference::paged_attention(swapped)),
                   "K and V swapped");
}

TEST(ComparePaged, WrongSizeIsAnError) {
  Problem p;
  compare::Report r;
  const attnref::Status s =
      compare::try_compare_paged(p.args, std::vector<double>(3), {}, options(), &r);
  EXPECT_EQ(s.code(), attnref::ErrorCode::kShapeMismatch);
  EXPECT_EQ(s.message(), "got holds 3 values; the reference has 96");
}

TEST(ComparePaged, OnlyLongSequencesDiffer) {
  Problem p;
  std::vector<double> got = attnref::reference::paged_attention(p.args);
  // Sequence 1 (9 keys) is off; sequences of 5 and 3 keys match.
  for (std::int64_t i = p.hq * p.dim; i < 2 * p.hq * p.dim; i += 5)
    got[static_cast<std::size_t>(i)] += 0.3;
  const std::string text = compare::format_report(report_of(p.args, got));
  EXPECT_NE(text.find("where: only sequences longer than 5 keys differ (the shortest that "
                      "differs has 9)"),
            std::string::npos)
      << text;
}

TEST(ComparePaged, StoppedCallLeavesTheReportUntouched) {
  // As the Python module runs it on Ctrl-C: the comparison as the one item of a
  // StoppableExecutor, whose stop the reference run, the hypotheses and the comparison ask.
  Problem p;
  PagedAttentionArgs<float> wrong = p.args;
  wrong.sm_scale = 0.5f;  // a mismatch, so the hypotheses run too
  const std::vector<double> got = attnref::reference::paged_attention(wrong);
  const std::string expected = compare::format_report(report_of(p.args, got));
  auto run = [&](int stop_at, int* asked, compare::Report* r) {
    attnref::SerialExecutor serial;
    attnref::StoppableExecutor<attnref::SerialExecutor, std::function<bool()>> executor(
        serial, [&] { return ++*asked > stop_at; });
    executor.parallel_for(1, [&](std::int64_t) {
      EXPECT_TRUE(compare::try_compare_paged(p.args, got, {}, options(), r).ok());
    });
    return executor.stopped();
  };
  int checks = 0;
  compare::Report r;
  ASSERT_FALSE(run(1 << 30, &checks, &r));
  EXPECT_EQ(compare::format_report(r), expected);  // never stopped: the same report
  ASSERT_GT(checks, 3);
  // Stopped before the item, after the reference run, amid the hypotheses or at the last check.
  for (int stop_at : {0, 1, checks / 2, checks - 1}) {
    int asked = 0;
    compare::Report untouched;
    untouched.count = -7;
    EXPECT_TRUE(run(stop_at, &asked, &untouched)) << stop_at;
    EXPECT_EQ(asked, stop_at + 1);
    EXPECT_EQ(untouched.count, -7) << stop_at;
    EXPECT_TRUE(untouched.causes.empty()) << stop_at;
  }
}

}  // namespace
