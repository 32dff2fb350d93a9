// The error catalogue (docs/errors.md) must name every error code: a new code without
// documentation fails here.
#include <gtest/gtest.h>

#include <attnref/core/status.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace {

TEST(ErrorCatalogue, DocNamesEveryErrorCode) {
  std::ifstream file(std::string(ATTNREF_SOURCE_DIR) + "/docs/errors.md");
  ASSERT_TRUE(file.good()) << "docs/errors.md not found";
  std::stringstream text;
  text << file.rdbuf();
  const std::string doc = text.str();
  const auto catalogue = doc.find("# Error catalogue");
  ASSERT_NE(catalogue, std::string::npos);
  for (int c = 1; c <= static_cast<int>(attnref::ErrorCode::kBadFile); ++c) {
    const std::string name =
        std::string("`") + attnref::error_code_name(static_cast<attnref::ErrorCode>(c)) + "`";
    EXPECT_NE(doc.find(name, catalogue), std::string::npos) << name << " is not in the catalogue";
  }
}

}  // namespace
