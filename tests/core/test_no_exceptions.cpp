// Built with -fno-exceptions: throw_if_error goes to the handler (default: print and abort).
#include <gtest/gtest.h>

#include <attnref/validate/heads.hpp>
#include <attnref/validate/merge.hpp>
#include <attnref/validate/paged.hpp>

#include <cstdio>
#include <cstdlib>

#if !defined(ATTNREF_NO_EXCEPTIONS)
#error "this test must be compiled with -fno-exceptions"
#endif

namespace {

TEST(NoExceptionsDeathTest, DefaultHandlerPrintsAndAborts) {
  EXPECT_DEATH(
      attnref::validate_heads(8, 6),
      "attnref: error\\[gqa_not_divisible\\] Number of Q heads must be divisible by number "
      "of KV heads. Got 8 and 6.");
}

TEST(NoExceptionsDeathTest, ValidateMergeGoesToTheHandler) {
  float out_a[24] = {}, out_b[30] = {}, lse_a[6] = {}, lse_b[6] = {};
  attnref::MergeStatesArgs<float> m;
  m.out_a = {out_a, {2, 3, 4}};
  m.lse_a = {lse_a, {2, 3}};
  m.out_b = {out_b, {2, 3, 5}};
  m.lse_b = {lse_b, {2, 3}};
  EXPECT_DEATH(attnref::validate_merge(m),
               "attnref: error\\[shape_mismatch\\] out_b has shape \\(2, 3, 5\\); expected "
               "out_a's shape \\(2, 3, 4\\)");
}

void custom_handler(const attnref::Status& s) {
  std::fprintf(stderr, "custom handler saw %s\n", attnref::error_code_name(s.code()));
  std::exit(42);
}

TEST(NoExceptionsDeathTest, CustomHandlerIsCalled) {
  EXPECT_EXIT(
      {
        attnref::set_error_handler(&custom_handler);
        attnref::validate_heads(8, 3);
      },
      ::testing::ExitedWithCode(42), "custom handler saw gqa_not_divisible");
}

void returning_handler(const attnref::Status&) {}

TEST(NoExceptionsDeathTest, AHandlerThatReturnsStillAborts) {
  EXPECT_DEATH(
      {
        attnref::set_error_handler(&returning_handler);
        attnref::validate_heads(8, 3);
      },
      "");
}

TEST(NoExceptions, SuccessDoesNotCallTheHandler) {
  attnref::set_error_handler(&custom_handler);
  attnref::validate_heads(32, 8);
  attnref::set_error_handler(nullptr);
  SUCCEED();
}

}  // namespace
