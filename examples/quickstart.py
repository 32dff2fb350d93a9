# SPDX-License-Identifier: Apache-2.0
"""attnref from Python: validate a paged decode batch, run the reference kernel, and compare it
with attention written out in numpy (float64)."""
import numpy as np

import attnref

rng = np.random.default_rng(0)
batch, q_heads, kv_heads, head_dim, page_size, pages = 2, 8, 2, 64, 16, 8
q = rng.standard_normal((batch, q_heads, head_dim), dtype=np.float32)
k_pages = rng.standard_normal((kv_heads, pages, page_size, head_dim), dtype=np.float32)
v_pages = rng.standard_normal((kv_heads, pages, page_size, head_dim), dtype=np.float32)
lengths = np.array([37, 5], np.int32)  # tokens in each sequence's cache
page_indices = np.array([[3, 0, 6], [5, 1, 2]], np.int32)  # each sequence's pages
scale = head_dim**-0.5

# Validate: the rules of JAX's Pallas TPU paged attention; a violation raises ShapeError.
attnref.check_paged(q, k_pages, v_pages, lengths, page_indices, sm_scale=scale)
try:
    attnref.check_config(8, 3, 64)  # 8 query heads cannot share 3 KV heads
except attnref.ShapeError as e:
    print(e.code, "-", e)  # gqa_not_divisible - error[gqa_not_divisible] ...

# Run: out [batch, q_heads, head_dim], float32 like q.
out = attnref.paged_attention(q, k_pages, v_pages, lengths, page_indices, sm_scale=scale)

# The same attention in float64 numpy: gather each sequence's keys and values from its pages.
group = q_heads // kv_heads
for b in range(batch):
    for h in range(q_heads):
        k = k_pages[h // group, page_indices[b]].reshape(-1, head_dim)[: lengths[b]]
        v = v_pages[h // group, page_indices[b]].reshape(-1, head_dim)[: lengths[b]]
        s = k.astype(np.float64) @ q[b, h].astype(np.float64) * scale
        p = np.exp(s - s.max())
        np.testing.assert_allclose(out[b, h], p @ v / p.sum(), rtol=1e-5, atol=1e-6)
print("attnref", attnref.__version__, "paged_attention matches numpy float64:", out.shape)
