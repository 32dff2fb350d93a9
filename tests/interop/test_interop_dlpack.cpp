// Views over borrowed DLPack tensors: row-major and explicit strides, byte_offset, every dtype
// attnref maps (float16/bfloat16 without Eigen), and one failing case per check (code, JAX id,
// message). Built only when <dlpack/dlpack.h> is found.
#include <gtest/gtest.h>

#include <attnref/interop/dlpack.hpp>
#include <attnref/interop/vllm.hpp>
#include <attnref/validate/paged.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using attnref::ErrorCode;
using attnref::Status;
using attnref::TensorView;

void expect_error(const Status& s, ErrorCode code, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), message);
  EXPECT_FALSE(s.hint().empty());
}

/// A DLTensor over `data` (CPU, one lane) with its own shape/strides storage.
struct Dl {
  std::vector<std::int64_t> shape, strides;
  DLTensor t{};
  Dl(void* data, std::vector<std::int64_t> shape_, std::uint8_t code, std::uint8_t bits,
     std::vector<std::int64_t> strides_ = {})
      : shape(std::move(shape_)), strides(std::move(strides_)) {
    t.data = data;
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<int>(shape.size());
    t.dtype = {code, bits, 1};
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = 0;
  }
};

TEST(DlpackView, NullStridesMeanRowMajor) {
  std::vector<float> buf(24);
  Dl dl(buf.data(), {2, 3, 4}, kDLFloat, 32);
  TensorView<const float, 3> v;
  ASSERT_TRUE(attnref::view_from_dlpack(dl.t, &v).ok());
  EXPECT_EQ(v.data, buf.data());
  EXPECT_EQ(v.extents, (std::array<std::int64_t, 3>{2, 3, 4}));
  EXPECT_EQ(v.strides, (std::array<std::int64_t, 3>{12, 4, 1}));
  EXPECT_EQ(v.buffer_size, -1);
}

TEST(DlpackView, ExplicitStridesAreElements) {
  std::vector<double> buf(6);
  Dl dl(buf.data(), {3, 2}, kDLFloat, 64, {1, 3});  // a transposed [2, 3]
  TensorView<const double, 2> v;
  ASSERT_TRUE(attnref::view_from_dlpack(dl.t, &v).ok());
  EXPECT_EQ(v.strides, (std::array<std::int64_t, 2>{1, 3}));
}

TEST(DlpackView, ByteOffsetIsApplied) {
  std::vector<float> buf(10);
  Dl dl(buf.data(), {4}, kDLFloat, 32);
  dl.t.byte_offset = 8;
  TensorView<float, 1> v;  // a writable view (e.g. an output buffer)
  ASSERT_TRUE(attnref::view_from_dlpack(dl.t, &v).ok());
  EXPECT_EQ(v.data, buf.data() + 2);
}

TEST(DlpackView, IndexAndHalfTypesMapThroughDType) {
  std::vector<std::int32_t> i32(4);
  std::vector<std::int64_t> i64(4);
  std::vector<std::int8_t> i8(4);
  std::vector<std::uint16_t> h(4);
  Dl a(i32.data(), {4}, kDLInt, 32), b(i64.data(), {4}, kDLInt, 64), c(i8.data(), {4}, kDLInt, 8);
  Dl f16(h.data(), {4}, kDLFloat, 16), bf16(h.data(), {4}, kDLBfloat, 16);
  TensorView<const std::int32_t, 1> va;
  TensorView<const std::int64_t, 1> vb;
  TensorView<const std::int8_t, 1> vc;
  TensorView<const Eigen::half, 1> vh;  // Eigen::half is only forward-declared here
  TensorView<const Eigen::bfloat16, 1> vbf;
  EXPECT_TRUE(attnref::view_from_dlpack(a.t, &va).ok());
  EXPECT_TRUE(attnref::view_from_dlpack(b.t, &vb).ok());
  EXPECT_TRUE(attnref::view_from_dlpack(c.t, &vc).ok());
  EXPECT_TRUE(attnref::view_from_dlpack(f16.t, &vh).ok());
  EXPECT_TRUE(attnref::view_from_dlpack(bf16.t, &vbf).ok());
  EXPECT_EQ(static_cast<const void*>(vh.data), static_cast<const void*>(h.data()));
  // float16 is not bfloat16.
  expect_error(attnref::view_from_dlpack(f16.t, &vbf), ErrorCode::kDtypeNotSupported,
               "DLPack tensor has dtype (code 2, bits 16, lanes 1) = float16; the view's element "
               "type is bfloat16");
}

TEST(DlpackView, ManagedTensorIsBorrowed) {
  std::vector<float> buf(4);
  Dl dl(buf.data(), {4}, kDLFloat, 32);
  DLManagedTensor managed{};
  managed.dl_tensor = dl.t;
  managed.deleter = [](DLManagedTensor*) { FAIL() << "the deleter must not be called"; };
  TensorView<const float, 1> v;
  EXPECT_TRUE(attnref::view_from_dlpack(managed, &v).ok());
}

// --- one failing case per check ---

TEST(DlpackView, RankMismatch) {
  std::vector<float> buf(6);
  Dl dl(buf.data(), {2, 3}, kDLFloat, 32);
  TensorView<const float, 3> v;
  expect_error(attnref::view_from_dlpack(dl.t, &v, "q"), ErrorCode::kRankMismatch,
               "DLPack q has ndim 2; expected 3");
}

TEST(DlpackView, DeviceMustBeCpu) {
  std::vector<float> buf(6);
  Dl dl(buf.data(), {6}, kDLFloat, 32);
  dl.t.device = {kDLCUDA, 1};
  TensorView<const float, 1> v;
  expect_error(attnref::view_from_dlpack(dl.t, &v, "k_pages"), ErrorCode::kDeviceNotSupported,
               "DLPack k_pages is on device type 2 (id 1); attnref reads CPU memory (kDLCPU = 1)");
}

TEST(DlpackView, DtypeMustMatchTheElementType) {
  std::vector<double> buf(6);
  Dl dl(buf.data(), {6}, kDLFloat, 64);
  TensorView<const float, 1> v;
  expect_error(attnref::view_from_dlpack(dl.t, &v, "q"), ErrorCode::kDtypeNotSupported,
               "DLPack q has dtype (code 2, bits 64, lanes 1) = float64; the view's element type "
               "is float32");
}

TEST(DlpackView, VectorLanesAndUnsignedAreNotSupported) {
  std::vector<float> buf(8);
  Dl dl(buf.data(), {2}, kDLFloat, 32);
  dl.t.dtype.lanes = 4;
  TensorView<const float, 1> v;
  expect_error(attnref::view_from_dlpack(dl.t, &v), ErrorCode::kDtypeNotSupported,
               "DLPack tensor has dtype (code 2, bits 32, lanes 4) = unknown; the view's element "
               "type is float32");
  std::vector<std::uint8_t> u(4);
  Dl du(u.data(), {4}, kDLUInt, 8);
  TensorView<const std::int8_t, 1> vi;
  expect_error(attnref::view_from_dlpack(du.t, &vi), ErrorCode::kDtypeNotSupported,
               "DLPack tensor has dtype (code 1, bits 8, lanes 1) = unknown; the view's element "
               "type is int8");
}

TEST(DlpackView, NullShape) {
  std::vector<float> buf(4);
  Dl dl(buf.data(), {4}, kDLFloat, 32);
  dl.t.shape = nullptr;
  TensorView<const float, 1> v;
  expect_error(attnref::view_from_dlpack(dl.t, &v), ErrorCode::kNullData,
               "DLPack tensor has ndim 1 but a null shape");
}

TEST(DlpackView, ByteOffsetMustBeWholeElements) {
  std::vector<float> buf(4);
  Dl dl(buf.data(), {2}, kDLFloat, 32);
  dl.t.byte_offset = 2;
  TensorView<const float, 1> v;
  expect_error(attnref::view_from_dlpack(dl.t, &v), ErrorCode::kMisalignedOffset,
               "DLPack tensor has byte_offset 2, not a multiple of the element size 4");
}

TEST(DlpackView, MisalignedPointer) {
  std::vector<float> buf(4);
  Dl dl(reinterpret_cast<char*>(buf.data()) + 1, {2}, kDLFloat, 32);
  TensorView<const float, 1> v;
  expect_error(attnref::view_from_dlpack(dl.t, &v), ErrorCode::kMisalignedOffset,
               "DLPack tensor: data + byte_offset is not aligned to the element size 4 (address "
               "mod 4 = 1)");
}

TEST(DlpackView, NegativeStrideAndExtentAndNullData) {
  std::vector<float> buf(6);
  TensorView<const float, 2> v;
  Dl neg_stride(buf.data(), {2, 3}, kDLFloat, 32, {-3, 1});
  expect_error(attnref::view_from_dlpack(neg_stride.t, &v, "x"), ErrorCode::kNegativeStride,
               "x has a negative stride -3 in dimension 0");
  Dl neg_extent(buf.data(), {2, -3}, kDLFloat, 32);
  expect_error(attnref::view_from_dlpack(neg_extent.t, &v, "x"), ErrorCode::kNegativeExtent,
               "x has a negative extent -3 in dimension 1");
  Dl null_data(nullptr, {2, 3}, kDLFloat, 32);
  expect_error(attnref::view_from_dlpack(null_data.t, &v, "x"), ErrorCode::kNullData,
               "x has 6 elements but a null data pointer");
}

TEST(DlpackView, OutputUntouchedOnError) {
  std::vector<float> buf(6);
  Dl dl(buf.data(), {6}, kDLFloat, 64);
  TensorView<const float, 1> v;
  EXPECT_FALSE(attnref::view_from_dlpack(dl.t, &v).ok());
  EXPECT_EQ(v.data, nullptr);
}

// An engine's tensors arriving as DLPack, through the vLLM adapter, to the validators.
TEST(DlpackView, EngineTensorsThroughTheVllmAdapterToCheckPaged) {
  const std::int64_t blocks = 6, bs = 4, hkv = 2, d = 8, seqs = 2, hq = 4, max_blocks = 3;
  std::vector<float> q(seqs * hq * d), kv(blocks * 2 * bs * hkv * d);
  std::vector<std::int32_t> table{5, 1, -1, 0, 2, 3}, lens{6, 12};
  Dl dq(q.data(), {seqs, hq, d}, kDLFloat, 32);
  Dl dkv(kv.data(), {blocks, 2, bs, hkv, d}, kDLFloat, 32);
  Dl dt(table.data(), {seqs, max_blocks}, kDLInt, 32), dlen(lens.data(), {seqs}, kDLInt, 32);
  TensorView<const float, 3> q_view;
  attnref::VllmKvCache<float> cache;
  cache.layout = attnref::VllmKvLayout::kBlockFirst;
  attnref::VllmBlockTable<std::int32_t> bt;
  bt.padding = attnref::PaddingPolicy::kSkip;
  ASSERT_TRUE(attnref::view_from_dlpack(dq.t, &q_view, "q").ok());
  ASSERT_TRUE(attnref::view_from_dlpack(dkv.t, &cache.kv_cache, "kv_cache").ok());
  ASSERT_TRUE(attnref::view_from_dlpack(dt.t, &bt.block_table, "block_table").ok());
  ASSERT_TRUE(attnref::view_from_dlpack(dlen.t, &bt.seq_lens, "seq_lens").ok());
  attnref::PagedAttentionArgs<float> args;
  ASSERT_TRUE(attnref::vllm_paged_args(cache, bt, q_view, &args).ok());
  EXPECT_TRUE(attnref::check_paged(args, attnref::Profile::kReference).ok());
}

}  // namespace
