// Head-count and model-config checks, including the seed scenarios of the foundation issue.
#include <gtest/gtest.h>

#include <attnref/validate/heads.hpp>
#include <attnref/validate/model_config.hpp>

#include <string>

namespace {

using attnref::ErrorCode;

static_assert(attnref::check_heads(32, 8).ok(), "Llama-3-8B");
static_assert(!attnref::check_heads(8, 6).ok(), "8 query heads cannot share 6 KV heads");
static_assert(attnref::kv_head_of(13, 32, 8) == 3, "query heads 12..15 read KV head 3");
static_assert(attnref::check_config({32, 8, 128, {}, 16}).ok(), "constexpr config check");

struct HeadCase {
  std::int64_t hq, hkv;
  const char* message;
  const char* hint;
};

TEST(CheckHeads, SeedScenariosNameTheRuleTheValuesAndTheFix) {
  const HeadCase cases[] = {
      {8, 6, "Number of Q heads must be divisible by number of KV heads. Got 8 and 6.",
       "valid num_kv_heads for 8 query heads: 1, 2, 4, 8"},
      {8, 3, "Number of Q heads must be divisible by number of KV heads. Got 8 and 3.",
       "valid num_kv_heads for 8 query heads: 1, 2, 4, 8"},
      {12, 8, "Number of Q heads must be divisible by number of KV heads. Got 12 and 8.",
       "valid num_kv_heads for 12 query heads: 1, 2, 3, 4, 6, 12"},
      {48, 32, "Number of Q heads must be divisible by number of KV heads. Got 48 and 32.",
       "valid num_kv_heads for 48 query heads: 1, 2, 3, 4, 6, 8, 12, 16, 24, 48"},
  };
  for (const HeadCase& c : cases) {
    const attnref::Status s = attnref::check_heads(c.hq, c.hkv);
    EXPECT_EQ(s.code(), ErrorCode::kGqaNotDivisible);
    EXPECT_EQ(std::string(s.jax_check()), "P2");
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(s.hint(), c.hint);
  }
}

TEST(CheckHeads, ValidPairsPass) {
  for (auto [hq, hkv] : {std::pair<int, int>{1, 1}, {8, 8}, {32, 8}, {28, 4}, {64, 1}})
    EXPECT_TRUE(attnref::check_heads(hq, hkv).ok()) << hq << "/" << hkv;
}

TEST(CheckHeads, ZeroAndNegativeCountsAreRejectedWithoutDividing) {
  attnref::Status s = attnref::check_heads(8, 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidHeadCount);
  EXPECT_EQ(s.message(), "num_kv_heads must be positive. Got 0.");
  EXPECT_EQ(s.hint(), "valid num_kv_heads for 8 query heads: 1, 2, 4, 8");
  EXPECT_EQ(std::string(s.jax_check()), "");
  s = attnref::check_heads(-4, 2);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidHeadCount);
  EXPECT_EQ(s.message(), "num_q_heads must be positive. Got -4.");
  s = attnref::check_heads(0, -1);
  EXPECT_EQ(s.message(), "num_q_heads must be positive. Got 0.");
}

TEST(CheckHeadDim, SeedScenarios) {
  for (std::int64_t kv_dim : {64, 256}) {
    const attnref::Status s = attnref::check_head_dim(128, kv_dim);
    EXPECT_EQ(s.code(), ErrorCode::kHeadDimMismatch);
    EXPECT_EQ(std::string(s.jax_check()), "P3");
    EXPECT_EQ(s.message(), "head_dim of Q must be the same as that of K/V. Got 128 and " +
                               std::to_string(kv_dim) + ".");
  }
  EXPECT_TRUE(attnref::check_head_dim(128, 128).ok());
  const attnref::Status s = attnref::check_head_dim(0, 128);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidHeadDim);
  EXPECT_EQ(s.message(), "head_dim must be positive. Got 0 and 128.");
}

TEST(CheckConfig, EveryField) {
  EXPECT_TRUE(attnref::check_config({32, 8, 128, {}, 16}).ok());
  EXPECT_TRUE(attnref::check_config({16, 16, 192, 128, {}}).ok());  // DeepSeek-style Dqk != Dv
  EXPECT_EQ(attnref::check_config({8, 6, 128, {}, 16}).code(), ErrorCode::kGqaNotDivisible);
  attnref::Status s = attnref::check_config({8, 8, 0, {}, 16});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidHeadDim);
  EXPECT_EQ(s.message(), "head_dim must be positive. Got 0.");
  s = attnref::check_config({8, 8, 64, 0, 16});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidHeadDim);
  EXPECT_EQ(s.message(), "head_dim_v must be positive. Got 0.");
  s = attnref::check_config({8, 8, 64, {}, 0});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidPageSize);
  EXPECT_EQ(s.message(), "page_size must be positive. Got 0.");
  s = attnref::check_config({8, 8, 64, {}, -1});
  EXPECT_EQ(s.message(), "page_size must be positive. Got -1.");
  EXPECT_EQ(s.hint(), "leave page_size unset for a non-paged cache");
}

}  // namespace
