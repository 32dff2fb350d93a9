// SPDX-License-Identifier: Apache-2.0
// attnref-run and hostile files and values: metadata whose
// value only an int64 holds, FIFOs and devices named as inputs or outputs, outputs written all
// or nothing (a write past `ulimit -f` leaves the old file), outputs that name an input, and
// float options outside float32's range. Each test runs the built program and checks the exit
// code and the message; docs/hostile-inputs.md lists each case.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli_harness.hpp"

namespace attnref {
namespace {

using cli_test::Result;

class Files : public cli_test::CliTest {
 protected:
  /// Splash inputs q, k, v float32 [1, rows, 8] (an output of rows x 32 bytes plus the header).
  void save_splash(std::int64_t rows = 2) {
    std::vector<float> x(static_cast<std::size_t>(rows * 8));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.125f * static_cast<float>(i % 7);
    for (const char* name : {"q.npy", "k.npy", "v.npy"}) save<float>(name, {1, rows, 8}, x);
  }

  /// A ragged batch of one sequence (one query row, one cached token) with int32 metadata and
  /// `num_seqs` saved as int64.
  void save_ragged(std::int64_t num_seqs) {
    save<float>("q.npy", {1, 1, 4}, {0.5f, 0.25f, -0.5f, 1.0f});
    save<float>("kv.npy", {1, 1, 2, 4}, {1, 0, 0, 1, 2, 3, 4, 5});
    save<std::int32_t>("kv_lens.npy", {1}, {1});
    save<std::int32_t>("table.npy", {1, 1}, {0});
    save<std::int32_t>("cu.npy", {2}, {0, 1});
    save<std::int64_t>("num_seqs.npy", {1}, {num_seqs});
  }
  static constexpr const char* kRagged =
      "--q q.npy --kv-pages kv.npy --kv-lens kv_lens.npy --page-indices table.npy "
      "--cu-q-lens cu.npy --num-seqs num_seqs.npy";

  /// Like `run_subcommand`, with the program started by `launcher`, a shell word list that
  /// ends where the program's path goes ("timeout 30", "bash -c '...; exec \"$0\" \"$@\"'").
  Result run_via(const std::string& launcher, const std::string& subcommand,
                 const std::string& args) const {
    std::string cmd = launcher + " '" + ATTNREF_RUN_PATH + "' " + subcommand;
    std::istringstream in(args);
    std::string word;
    while (in >> word) {
      const bool npy = word.size() > 4 && word.compare(word.size() - 4, 4, ".npy") == 0;
      cmd += " '" + (npy ? path(word) : word) + "'";
    }
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const int status = std::system((cmd + " >'" + out + "' 2>'" + err + "'").c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = cli_test::slurp(out);
    r.err = cli_test::slurp(err);
    return r;
  }

  /// The names in this test's directory that start with `prefix`.
  std::vector<std::string> names_starting(const std::string& prefix) const {
    std::vector<std::string> names;
    const std::string dir = path("");
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name.compare(0, prefix.size(), prefix) == 0) names.push_back(name);
      }
      ::closedir(d);
    }
    return names;
  }
};

// --- item 3: a value narrowed before it is checked ------------------------------------------

TEST_F(Files, Int64NumSeqsIsCheckedAsSaved) {
  for (const char* profile : {"reference", "jax"}) {
    SCOPED_TRACE(profile);
    save_ragged(4294967297);  // 2^32 + 1: 1 when narrowed to int32
    Result r = run_subcommand("ragged", std::string(kRagged) + " --profile " + profile);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.first_err_line(),
              "attnref: error[num_seqs_out_of_range] num_seqs[0]=4294967297 must be less or "
              "equal to max_num_seqs=1");

    save_ragged(-4294967295);  // 1 when narrowed to int32
    r = run_subcommand("ragged", std::string(kRagged) + " --profile " + profile);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.first_err_line(),
              "attnref: error[num_seqs_out_of_range] num_seqs[0]=-4294967295 must not be "
              "negative");
  }
  // An int64 num_seqs that fits still runs.
  save_ragged(1);
  const Result r = run_subcommand("ragged", std::string(kRagged) + " --out out.npy");
  EXPECT_EQ(r.code, 0) << r.err;
}

// --- item 5: special files -------------------------------------------------------------------

TEST_F(Files, FifoOrDirectoryInputIsRefusedWithoutBlocking) {
  save_splash();
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0644), 0);
  // timeout: a run that blocks in open fails with 124 instead of hanging the suite.
  Result r = run_via("timeout 60", "splash", "--q fifo.npy --k k.npy --v v.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("fifo.npy") +
                               ": --q names a FIFO, not a regular file");
  EXPECT_EQ(r.err_line(1),
            "attnref-run reads .npy inputs from regular files only (never from a pipe or a "
            "device); save the array to a file");

  r = run_via("timeout 60", "splash", "--q q.npy --k k.npy --v v.npy --expect fifo.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("fifo.npy") +
                               ": --expect names a FIFO, not a regular file");

  ASSERT_EQ(::mkdir(path("dir.npy").c_str(), 0755), 0);
  r = run_via("timeout 60", "splash", "--q q.npy --k dir.npy --v v.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("dir.npy") +
                               ": --k names a directory, not a regular file");
}

TEST_F(Files, FifoOutputIsRefusedAndKept) {
  save_splash();
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0644), 0);
  for (const char* option : {"--out", "--lse-out"}) {
    const Result r = run_via("timeout 60", "splash",
                             std::string("--q q.npy --k k.npy --v v.npy ") + option + " fifo.npy");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("fifo.npy") + ": " + option +
                                 " names a FIFO, not a regular file");
    struct stat st {};
    ASSERT_EQ(::stat(path("fifo.npy").c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
  }
  // A device too: --out /dev/null would otherwise be replaced by root.
  const Result r = run_via("timeout 60", "splash", "--q q.npy --k k.npy --v v.npy --out /dev/null");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0),
            "attnref: error[bad_file] /dev/null: --out names a character device, not a regular "
            "file");
}

// --- item 6: output files --------------------------------------------------------------------

TEST_F(Files, WritePastFileSizeLimitLeavesTheOldFile) {
  save_splash(64);  // out: 64 x 8 float32 = 2048 bytes; lse: 64 float32
  std::ofstream(path("out.npy")) << "old contents";
  // ulimit -f 1: at most 1024 bytes per file. SIGXFSZ would kill the process; it is ignored.
  const std::string launcher = "bash -c 'ulimit -f 1; exec \"$0\" \"$@\"'";
  const Result r =
      run_via(launcher, "splash", "--q q.npy --k k.npy --v v.npy --lse-out lse.npy --out out.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("out.npy") +
                               ": cannot write: File too large; nothing was written to the path");
  EXPECT_EQ(r.err_line(1), "check the free space and the file size limit (ulimit -f)");
  EXPECT_EQ(cli_test::slurp(path("out.npy")), "old contents");
  // All or nothing: the smaller --lse-out, staged first, is not left behind either.
  EXPECT_EQ(names_starting("lse.npy").size(), 0u);
  EXPECT_EQ(names_starting(".").size(), 2u) << "only . and .. (no temporary file)";
  EXPECT_EQ(r.out, "");
}

TEST_F(Files, OutputReplacesTheOldFileKeepingItsMode) {
  save_splash();
  std::ofstream(path("out.npy")) << "old contents";
  ASSERT_EQ(::chmod(path("out.npy").c_str(), 0640), 0);
  ASSERT_EQ(::symlink("out.npy", path("link.npy").c_str()), 0);
  const Result r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --out link.npy");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "wrote " + path("link.npy") + " (float32, shape (1, 2, 8))\n");
  // Written through the symlink, which stays a symlink.
  struct stat st {};
  ASSERT_EQ(::lstat(path("link.npy").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(::stat(path("out.npy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(load("out.npy").shape, (std::vector<std::int64_t>{1, 2, 8}));
  EXPECT_EQ(names_starting(".").size(), 2u) << "no temporary file";
}

// --- item 7: an output that names an input ---------------------------------------------------

TEST_F(Files, OutputNamingAnInputIsRefused) {
  save_splash();
  const std::string q_before = cli_test::slurp(path("q.npy"));
  Result r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --out q.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("q.npy") +
                               ": --out names the same file as --q (" + path("q.npy") + ")");
  EXPECT_EQ(r.err_line(1), "an output must not replace an input: write --out to another file");
  EXPECT_EQ(cli_test::slurp(path("q.npy")), q_before);

  // --expect: the expectation must not be overwritten before it is compared.
  r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --out out.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --out out.npy --expect out.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("out.npy") +
                               ": --out names the same file as --expect (" + path("out.npy") + ")");

  // Another name for the same file (a hard link), and a gradient output.
  ASSERT_EQ(::link(path("k.npy").c_str(), path("alias.npy").c_str()), 0);
  save<float>("dout.npy", {1, 2, 8}, std::vector<float>(16, 0.5f));
  r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --dout dout.npy --dk-out alias.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("alias.npy") +
                               ": --dk-out names the same file as --k (" + path("k.npy") + ")");
  EXPECT_EQ(cli_test::slurp(path("alias.npy")), cli_test::slurp(path("k.npy")));
}

TEST_F(Files, TwoOutputsNamingOneFileAreRefused) {
  save_splash();
  // A file still to be created, named twice (once through "./").
  const Result r =
      run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --out new.npy --lse-out ./new.npy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err_line(0), "attnref: error[bad_file] " + path("new.npy") +
                               ": --lse-out and --out name the same file");
  EXPECT_EQ(r.err_line(1), "give each output its own file");
  EXPECT_EQ(names_starting("new.npy").size(), 0u);
}

// --- item 9: options -------------------------------------------------------------------------

TEST_F(Files, FloatOptionsOutsideFloat32AreRefused) {
  save_splash();
  struct Case {
    const char* option;
    const char* value;
    const char* first_line;
  } cases[] = {
      {"--soft-cap", "1e39",
       "attnref: error[invalid_soft_cap] --soft-cap 1e39 is outside the float32 range (it would "
       "become inf)"},
      {"--soft-cap", "1e400",
       "attnref: error[invalid_soft_cap] --soft-cap 1e400 is outside the float32 range (it "
       "would become inf)"},
      {"--soft-cap", "1e-50",
       "attnref: error[invalid_soft_cap] --soft-cap 1e-50 underflows to 0 in float32"},
      {"--soft-cap", "-1e-400",
       "attnref: error[invalid_soft_cap] --soft-cap -1e-400 underflows to 0 in float32"},
      {"--sm-scale", "-1e39",
       "attnref: error[invalid_scale] --sm-scale -1e39 is outside the float32 range (it would "
       "become -inf)"},
      {"--sm-scale", "1e-50",
       "attnref: error[invalid_scale] --sm-scale 1e-50 underflows to 0 in float32"},
      {"--mask-value", "-1e39",
       "attnref: error[invalid_mask_value] --mask-value -1e39 is outside the float32 range (it "
       "would become -inf)"},
      {"--mask-value", "-1e-50",
       "attnref: error[invalid_mask_value] --mask-value -1e-50 underflows to 0 in float32"},
      // Unchanged: what parses to a float32 value is judged by the library.
      {"--soft-cap", "inf",
       "attnref: error[invalid_soft_cap] soft_cap=inf must not be 0.0 and must be finite."},
      {"--soft-cap", "0",
       "attnref: error[invalid_soft_cap] soft_cap=0.0 must not be 0.0 and "
       "must be finite."},
  };
  for (const Case& c : cases) {
    const Result r =
        run_subcommand("splash", std::string("--q q.npy --k k.npy --v v.npy --check-only ") +
                                     c.option + " " + c.value);
    EXPECT_EQ(r.code, 2) << c.option << " " << c.value << ": " << r.err;
    EXPECT_EQ(r.first_err_line(), c.first_line);
  }
  // Within range: the largest float32 magnitude and a float32 subnormal.
  for (const char* ok : {"--soft-cap 3.4028234e38", "--sm-scale 1e-40", "--sm-scale 0"}) {
    const Result r =
        run_subcommand("splash", std::string("--q q.npy --k k.npy --v v.npy --check-only ") + ok);
    EXPECT_EQ(r.code, 0) << ok << ": " << r.err;
  }
}

TEST_F(Files, RaggedScalesOutsideFloat32AreRefused) {
  save_ragged(1);
  Result r = run_subcommand("ragged", std::string(kRagged) + " --k-scale 1e39 --check-only");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_scale] --k-scale 1e39 is outside the float32 range (it would "
            "become inf)");
  r = run_subcommand("ragged", std::string(kRagged) + " --v-scale 1e-60 --check-only");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_scale] --v-scale 1e-60 underflows to 0 in float32");
}

TEST_F(Files, Float64SinksOutsideFloat32AreRefused) {
  save_splash();
  save<double>("sinks.npy", {1}, {1e39});
  const Result r =
      run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --sinks sinks.npy --check-only");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[non_finite_data] sinks[0]=1e+39 is outside the float32 range");
}

TEST_F(Files, NegativeLocalWindowIsRefused) {
  save_splash();
  Result r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --local -1,2 --check-only");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_mask_parameter] --local window left=-1 must not be negative");
  EXPECT_EQ(r.err_line(1),
            "each side of --local counts the keys allowed before (left) or after (right) the "
            "diagonal: 0 or more, or 'none' for no limit");
  r = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --local none,-4 --check-only");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_mask_parameter] --local window right=-4 must not be negative");
  for (const char* ok : {"0,0", "none,none", "1,none"}) {
    r = run_subcommand("splash",
                       std::string("--q q.npy --k k.npy --v v.npy --check-only --local ") + ok);
    EXPECT_EQ(r.code, 0) << ok << ": " << r.err;
  }
}

}  // namespace
}  // namespace attnref
