// Which allocations a kernel changes (Probes): hashes before and after, through pinned staging memory.
#include "runtime/observe/probes.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/runtime/fake_cuda.h"

namespace karma::rt {
namespace {

// The device is host memory here: a copy is a memcpy, and nothing is asynchronous.
cudaError_t HostMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t NoWait(cudaStream_t) { return cudaSuccess; }
int g_pinned = 0;
cudaError_t HostAlloc(void** p, size_t n) {
  *p = std::malloc(n);
  ++g_pinned;
  return cudaSuccess;
}
cudaError_t HostFree(void* p) {
  std::free(p);
  --g_pinned;
  return cudaSuccess;
}

class ProbesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ResetFake();
    api_.cudaMemcpyAsync = &HostMemcpyAsync;
    api_.cudaStreamSynchronize = &NoWait;
    api_.cudaMallocHost = &HostAlloc;
    api_.cudaFreeHost = &HostFree;
    // Two allocations: a weight made before the iteration (12 MiB: hashed in two pieces) and an activation the
    // iteration allocated.
    for (uint64_t serial : {1u, 2u}) {
      std::vector<unsigned char>& mem = serial == 1 ? weight_ : act_;
      mem.assign(serial == 1 ? (12u << 20) : 4096u, static_cast<unsigned char>(serial));
      BufferEntry e;
      e.start = reinterpret_cast<uint64_t>(mem.data());
      e.size = mem.size();
      e.serial = serial;
      e.origin = Origin::kArena;
      rec_.Buffer(e).allocated_inside = serial == 2;
    }
  }
  RecordedOp& Op(trace::OpKind kind, std::vector<std::pair<uint64_t, Access>> uses) {
    RecordedOp& op = rec_.ops.emplace_back();
    op.kind = kind;
    for (const auto& [serial, access] : uses) op.uses.push_back(RecordedUse{serial, 0, 0, access});
    return op;
  }
  CudaApi api_ = testing::FakeReplayApi();
  Recording rec_;
  std::vector<unsigned char> weight_, act_;
};

TEST_F(ProbesTest, AKernelThatChangesAnAllocationReadsAndWritesItOneThatDoesNotReadsIt) {
  Probes probes(api_);
  // The first kernel on the activation writes it: not probed. The weight is hashed before and after.
  RecordedOp& k0 = Op(trace::OpKind::kKernel, {{1, Access::kTouch}, {2, Access::kTouch}});
  probes.Before(rec_, k0);
  ASSERT_EQ(k0.probes.size(), 1u);
  act_[7] = 9;
  probes.After(rec_, k0);
  EXPECT_EQ(k0.uses[0].changed, 0);   // the weight: read
  EXPECT_EQ(k0.uses[1].changed, -1);  // the activation: its first use, which writes it
  EXPECT_EQ(rec_.probe_bytes.load(), 2 * weight_.size());

  // The next kernel changes the weight by one byte, and reads the activation: the weight's hash before is the one
  // the last probe left (no copy), the activation's is taken now.
  RecordedOp& k1 = Op(trace::OpKind::kKernel, {{1, Access::kTouch}, {2, Access::kTouch}});
  probes.Before(rec_, k1);
  EXPECT_EQ(rec_.probe_bytes.load(), 2 * weight_.size() + act_.size());
  weight_[(12u << 20) - 1] ^= 1;  // in the second piece
  probes.After(rec_, k1);
  EXPECT_EQ(k1.uses[0].changed, 1);
  EXPECT_EQ(k1.uses[1].changed, 0);
  EXPECT_EQ(rec_.probe_bytes.load(), 3 * weight_.size() + 2 * act_.size());

  // A copy writes the activation (no probe: its direction is stated) and makes its hash stale: the next kernel
  // hashes it again before.
  RecordedOp& copy = Op(trace::OpKind::kCopy, {{2, Access::kWrite}});
  probes.Before(rec_, copy);
  EXPECT_TRUE(copy.probes.empty());
  act_.assign(act_.size(), 3);
  probes.After(rec_, copy);
  RecordedOp& k2 = Op(trace::OpKind::kKernel, {{2, Access::kTouch}});
  probes.Before(rec_, k2);
  probes.After(rec_, k2);
  EXPECT_EQ(k2.uses[0].changed, 0);  // unchanged by k2, though the copy changed it since k1
  EXPECT_EQ(g_pinned, 1);
  probes.Release();
  EXPECT_EQ(g_pinned, 0);
}

// Without the calls the probes need, nothing is probed: kernels' uses stay touches.
TEST_F(ProbesTest, WithoutPinnedMemoryNothingIsProbed) {
  api_.cudaMallocHost = nullptr;
  Probes probes(api_);
  RecordedOp& k = Op(trace::OpKind::kKernel, {{1, Access::kTouch}});
  probes.Before(rec_, k);
  probes.After(rec_, k);
  EXPECT_EQ(k.uses[0].changed, -1);
  EXPECT_EQ(rec_.probe_bytes.load(), 0u);
}

}  // namespace
}  // namespace karma::rt
