// SPDX-License-Identifier: Apache-2.0
// The CLI tests' one harness: a fresh directory per test, .npy files written into it, and
// attnref-run run on them with stdout, stderr and the exit code captured. The including test
// target defines ATTNREF_RUN_PATH (the built program).
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "attnref/io/npy.hpp"

#ifndef ATTNREF_RUN_PATH
#error "ATTNREF_RUN_PATH must name the attnref-run executable"
#endif

namespace attnref {
namespace cli_test {

/// What one run of the program left: exit code, stdout, stderr.
struct Result {
  int code = -1;
  std::string out;
  std::string err;

  /// Line `i` of stderr ("" past the end).
  std::string err_line(std::size_t i = 0) const {
    std::istringstream in(err);
    std::string line;
    for (std::size_t k = 0; k <= i; ++k)
      if (!std::getline(in, line)) return "";
    return line;
  }
  std::string first_err_line() const { return err_line(0); }
};

/// The whole file, "" when unreadable.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The fixture base: a directory `attnref_run_<suite>_<test>` under gtest's temp dir, made
/// fresh in SetUp and removed in TearDown unless the test failed (so its files stay to look at).
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "attnref_run_" + info->test_suite_name() + "_" + info->name();
    remove_dir();
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << dir_;
  }
  void TearDown() override {
    if (!HasFailure()) remove_dir();
  }

 public:
  /// A file of this test.
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  /// `args` with every word that ends in .npy made a path of this test (words split on spaces).
  std::string with_paths(const std::string& args) const {
    std::string out;
    std::istringstream in(args);
    std::string word;
    while (in >> word) {
      if (is_npy(word)) word = path(word);
      out += (out.empty() ? "" : " ") + word;
    }
    return out;
  }

  /// Runs `attnref-run <args>` through the shell (args unquoted), capturing both streams.
  Result run_program(const std::string& args) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string cmd =
        std::string("'") + ATTNREF_RUN_PATH + "' " + args + " >'" + out + "' 2>'" + err + "'";
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  /// Runs `attnref-run <subcommand> <args>`, each word of `args` quoted and every .npy word a
  /// file of this test.
  Result run_subcommand(const std::string& subcommand, const std::string& args) const {
    std::string cmd = subcommand;
    std::istringstream in(args);
    std::string word;
    while (in >> word) cmd += " '" + (is_npy(word) ? path(word) : word) + "'";
    return run_program(cmd);
  }

  /// Writes `v` as `name` [shape].
  template <class T>
  void save(const std::string& name, std::vector<std::int64_t> shape, const std::vector<T>& v) {
    const NpyStatus s = write_npy(path(name), make_npy_array<T>(std::move(shape), v.data()));
    ASSERT_TRUE(s.ok()) << s.message();
  }

  /// Writes a bool array (one char per element) as `name` [shape].
  void save_bool(const std::string& name, std::vector<std::int64_t> shape,
                 const std::vector<char>& v) {
    const NpyStatus s =
        write_npy(path(name), make_npy_array(DType::kBool, std::move(shape), v.data()));
    ASSERT_TRUE(s.ok()) << s.message();
  }

  /// Reads `name` (a failed read fails the test and returns an empty array).
  NpyArray load(const std::string& name) const {
    NpyArray a;
    const NpyStatus s = read_npy(path(name), &a);
    EXPECT_TRUE(s.ok()) << s.message();
    return a;
  }

 private:
  static bool is_npy(const std::string& word) {
    return word.size() > 4 && word.compare(word.size() - 4, 4, ".npy") == 0;
  }
  void remove_dir() const { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string dir_;
};

}  // namespace cli_test
}  // namespace attnref
