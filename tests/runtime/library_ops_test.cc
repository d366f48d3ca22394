// Operand sets of cuBLAS and cuDNN calls.
#include "runtime/observe/library_ops.h"

#include <gtest/gtest.h>

#include <cuda_fp16.h>

namespace karma::rt {
namespace {

Access AccessOf(const OpDesc& d, const void* p) {
  for (const Operand& o : d.operands) {
    if (o.ptr == reinterpret_cast<uint64_t>(p)) return o.access;
  }
  ADD_FAILURE() << "no operand " << p;
  return Access::kTouch;
}

const void* A = reinterpret_cast<const void*>(0xa000);
const void* B = reinterpret_cast<const void*>(0xb000);
void* C = reinterpret_cast<void*>(0xc000);

TEST(LibraryOpsTest, GemmWithZeroBetaOnlyWritesC) {
  const float alpha = 1, beta = 0;
  GemmShape g{64, 32, 16, 1, false, true, 64, 32, 64};
  const OpDesc d = GemmOp("sgemm", g, GemmContext{}, A, B, C, &alpha, &beta, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
  ASSERT_EQ(d.operands.size(), 3u);
  EXPECT_EQ(AccessOf(d, A), Access::kRead);
  EXPECT_EQ(AccessOf(d, B), Access::kRead);
  EXPECT_EQ(AccessOf(d, C), Access::kWrite);
  EXPECT_EQ(d.flops, 2ull * 64 * 32 * 16);
  EXPECT_EQ(d.bytes, 4ull * (64 * 16 + 16 * 32 + 64 * 32));
  EXPECT_STREQ(d.dtype, "float32");
}

const Operand& OperandOf(const OpDesc& d, const void* p) {
  for (const Operand& o : d.operands) {
    if (o.ptr == reinterpret_cast<uint64_t>(p)) return o;
  }
  ADD_FAILURE() << "no operand " << p;
  return d.operands.front();
}

// C is written whole (every byte of its extent) only when dense: ldc == m, and a strided batch packs its matrices
// back to back. Otherwise the bytes between columns or matrices keep what they held.
TEST(LibraryOpsTest, GemmWritesItsWholeExtentOnlyWhenCIsDense) {
  auto whole = [](const Operand& o) { return o.access == Access::kWrite && !o.gaps; };
  const float alpha = 1, zero = 0, one = 1;
  auto c_of = [&](GemmShape g, const float* beta) {
    return OperandOf(GemmOp("sgemm", g, GemmContext{}, A, B, C, &alpha, beta, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F), C);
  };
  const Operand dense = c_of(GemmShape{64, 32, 16, 1, false, false, 64, 16, 64}, &zero);
  EXPECT_TRUE(whole(dense));
  EXPECT_EQ(dense.bytes, 4u * 64 * 32);
  EXPECT_FALSE(whole(c_of(GemmShape{64, 32, 16, 1, false, false, 64, 16, 64}, &one)));  // accumulates
  const Operand padded = c_of(GemmShape{64, 32, 16, 1, false, false, 64, 16, 80}, &zero);
  EXPECT_FALSE(whole(padded));
  EXPECT_EQ(padded.bytes, 4u * (80 * 31 + 64));
  EXPECT_TRUE(whole(c_of(GemmShape{8, 8, 8, 4, false, false, 8, 8, 8, 64, 64, 64}, &zero)));
  EXPECT_FALSE(whole(c_of(GemmShape{8, 8, 8, 4, false, false, 8, 8, 8, 64, 64, 100}, &zero)));  // gaps between
  EXPECT_FALSE(whole(OperandOf(GemmOp("sgemm", GemmShape{64, 32, 16, 1, false, false, 64, 16, 64}, GemmContext{}, A,
                                      B, C, &alpha, &zero, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F),
                               A)));  // read
  // Gaps: the extent has bytes the matrices skip, whether written or read.
  EXPECT_FALSE(dense.gaps);
  EXPECT_TRUE(padded.gaps);
  EXPECT_TRUE(c_of(GemmShape{8, 8, 8, 4, false, false, 8, 8, 8, 64, 64, 100}, &one).gaps);
  auto op_of = [&](GemmShape g) {
    return GemmOp("sgemm", g, GemmContext{}, A, B, C, &alpha, &zero, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
  };
  EXPECT_FALSE(OperandOf(op_of(GemmShape{64, 32, 16, 1, false, false, 64, 16, 64}), A).gaps);
  EXPECT_TRUE(OperandOf(op_of(GemmShape{64, 32, 16, 1, false, false, 72, 16, 64}), A).gaps);   // lda 72 > m 64
  EXPECT_TRUE(OperandOf(op_of(GemmShape{64, 32, 16, 1, false, false, 64, 20, 64}), B).gaps);   // ldb 20 > k 16
  EXPECT_FALSE(OperandOf(op_of(GemmShape{64, 32, 16, 1, true, false, 16, 16, 64}), A).gaps);   // A^T: k x m, lda k
}

TEST(LibraryOpsTest, GemmThatAccumulatesReadsAndWritesC) {
  const float alpha = 1, beta = 1;
  GemmShape g{8, 8, 8, 4, false, false, 8, 8, 8};
  const OpDesc d = GemmOp("sgemm", g, GemmContext{}, A, B, C, &alpha, &beta, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
  EXPECT_EQ(AccessOf(d, C), Access::kReadWrite);
  EXPECT_EQ(d.flops, 2ull * 8 * 8 * 8 * 4);
  EXPECT_EQ(d.bytes, 4ull * 4 * (64 + 64 + 2 * 64));
  // -0.0 is not all zero bits: treated as accumulating (the safe side).
  const float minus_zero = -0.0f;
  EXPECT_EQ(AccessOf(GemmOp("s", g, GemmContext{}, A, B, C, &alpha, &minus_zero, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F),
                     C),
            Access::kReadWrite);
}

TEST(LibraryOpsTest, DeviceScalarsAreOperandsAndNeverDereferenced) {
  GemmContext c;
  c.scalars_on_device = true;
  const void* alpha = reinterpret_cast<const void*>(0xd000);
  const void* beta = reinterpret_cast<const void*>(0xd004);  // not host memory: must not be read
  const OpDesc d = GemmOp("g", GemmShape{1, 1, 1, 1, false, false, 1, 1, 1}, c, A, B, C, alpha, beta, CUDA_R_32F,
                          CUDA_R_32F, CUDA_R_32F);
  ASSERT_EQ(d.operands.size(), 5u);
  EXPECT_EQ(AccessOf(d, C), Access::kReadWrite);
  EXPECT_EQ(AccessOf(d, alpha), Access::kRead);
  EXPECT_EQ(AccessOf(d, beta), Access::kRead);
}

TEST(LibraryOpsTest, GemmExScalarWidthFollowsTheComputeType) {
  EXPECT_EQ(GemmScaleBytes(CUBLAS_COMPUTE_16F, CUDA_R_16F), 2);
  EXPECT_EQ(GemmScaleBytes(CUBLAS_COMPUTE_32F, CUDA_R_16F), 4);
  EXPECT_EQ(GemmScaleBytes(CUBLAS_COMPUTE_32F, CUDA_C_32F), 8);
  EXPECT_EQ(GemmScaleBytes(CUBLAS_COMPUTE_64F, CUDA_R_64F), 8);
  const __half one = __float2half(1.0f), zero = __float2half(0.0f);
  GemmContext c;
  c.scale_bytes = GemmScaleBytes(CUBLAS_COMPUTE_16F, CUDA_R_16F);
  GemmShape g{16, 16, 16, 1, false, false, 16, 16, 16};
  const OpDesc d = GemmOp("gemmex", g, c, A, B, C, &one, &zero, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F);
  EXPECT_EQ(AccessOf(d, C), Access::kWrite);
  EXPECT_EQ(d.bytes, 2ull * 3 * 256);
  EXPECT_STREQ(d.dtype, "float16");
}

TEST(LibraryOpsTest, CudnnBetaWidthFollowsTheTensorType) {
  const double d_one = 1.0;  // the low four bytes of 1.0 are zero: read as a float it would look like 0
  const double d_zero = 0.0;
  const float f_zero = 0.0f;
  EXPECT_FALSE(CudnnBetaIsZero(&d_one, CUDNN_DATA_DOUBLE));
  EXPECT_TRUE(CudnnBetaIsZero(&d_zero, CUDNN_DATA_DOUBLE));
  EXPECT_TRUE(CudnnBetaIsZero(&f_zero, CUDNN_DATA_FLOAT));
  EXPECT_TRUE(CudnnBetaIsZero(&f_zero, CUDNN_DATA_HALF));
  EXPECT_FALSE(CudnnBetaIsZero(&f_zero, -1));  // unknown type: assume it accumulates
}

TEST(LibraryOpsTest, ConvolutionOperands) {
  void* ws = reinterpret_cast<void*>(0xe000);
  const OpDesc d = ConvOp("conv", 0, {A, B}, C, false, ws, 4096, 1);
  ASSERT_EQ(d.operands.size(), 4u);
  EXPECT_EQ(AccessOf(d, A), Access::kRead);
  EXPECT_EQ(AccessOf(d, C), Access::kWrite);
  EXPECT_EQ(AccessOf(d, ws), Access::kReadWrite);
  EXPECT_TRUE(d.operands[3].workspace);
  EXPECT_EQ(ConvOp("conv", 0, {A, B}, C, true, nullptr, 0, 1).operands.size(), 3u);
}

}  // namespace
}  // namespace karma::rt
