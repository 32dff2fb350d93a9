// A downstream program: validates a GQA config, runs a tiny paged decode, then the engine's
// calls of every kernel family (engine.cpp, a second translation unit with the same headers).
#include <attnref/attnref.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#ifdef ATTNREF_CONSUMER_ENGINE
#include "engine.hpp"
#endif

int main() {
  static_assert(attnref::check_heads(32, 8).ok(), "Llama-3 heads");
  if (attnref::check_heads(8, 6).ok()) return 1;
  // One sequence, 2 query heads on 1 KV head, head_dim 1, one page of 2 tokens.
  std::vector<float> q{1.0f, 1.0f}, k{0.0f, 0.0f}, v{1.0f, 3.0f}, out(2);
  std::vector<int> lengths{2}, table{0};
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {1, 2, 1}};
  args.k_pages = {k.data(), {1, 1, 2, 1}};
  args.v_pages = {v.data(), {1, 1, 2, 1}};
  args.lengths = {lengths.data(), {1}};
  args.page_indices = {table.data(), {1, 1}};
  attnref::paged_attention(args, attnref::TensorView<float, 3>(out.data(), {1, 2, 1}));
  std::printf("consumer: %g %g\n", static_cast<double>(out[0]), static_cast<double>(out[1]));
  if (std::fabs(out[0] - 2.0f) >= 1e-6f || std::fabs(out[1] - 2.0f) >= 1e-6f) return 1;
#ifdef ATTNREF_CONSUMER_ENGINE
  const struct {
    const char* name;
    int (*run)();
  } families[] = {{"paged", engine::run_paged},
                  {"splash", engine::run_splash},
                  {"ragged", engine::run_ragged},
                  {"interop", engine::run_interop}};
  for (const auto& f : families) {
    if (const int line = f.run()) {
      std::printf("consumer: engine %s failed at engine.cpp:%d\n", f.name, line);
      return 1;
    }
    std::printf("consumer: engine %s ok\n", f.name);
  }
#endif
  return 0;
}
