// A C++ program built against the headers an installed attnref wheel holds (validators only,
// no Eigen): it prints the headers' version, which run.sh compares with the package's.
#include <attnref/validate.hpp>
#include <attnref/version.hpp>

#include <cstdio>

int main() {
  static_assert(attnref::check_heads(32, 8).ok(), "Llama-3 heads");
  const attnref::Status bad = attnref::check_heads(8, 3);
  if (bad.ok()) return 1;
  std::printf("%s\n", ATTNREF_VERSION_STRING);
  return 0;
}
