// Built by ctest twice: with ATTNREF_TEST_BAD_HEADS the static_assert must fail to compile
// (8 query heads cannot share 6 KV heads); without it the same file must compile.
#include <attnref/validate/heads.hpp>

#if defined(ATTNREF_TEST_BAD_HEADS)
static_assert(attnref::check_heads(8, 6).ok(), "8 query heads, 6 KV heads");
#else
static_assert(attnref::check_heads(32, 8).ok(), "32 query heads, 8 KV heads");
#endif

int main() { return 0; }
