// Kernel parameter layouts and the scan of arguments for registered buffers.
#include "runtime/observe/param_scan.h"

#include <gtest/gtest.h>

#include "tests/runtime/fake_cuda.h"

namespace karma::rt {
namespace {

using testing::Fake;

char kKernelA;  // host stubs: only their addresses matter
char kKernelB;

struct Params {
  float* in;
  int n;
  float scale;
  double* out;
};
struct Holder {  // a struct parameter with pointers in its aligned words
  int count;
  int pad;
  float* ptr;
  float* ptrs[2];
};

class ParamScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ResetFake();
    Fake().kernels[&kKernelA] = {"kernelA", {8, 4, 4, 8}};
    Fake().kernels[&kKernelB] = {"kernelB", {sizeof(Holder), 4}};
    in_ = registry_.Insert(0x10000, 0x1000, Origin::kArena, 0);
    out_ = registry_.Insert(0x20000, 0x1000, Origin::kArena, 0);
    other_ = registry_.Insert(0x30000, 0x1000, Origin::kDevice, 0);
  }
  CudaApi api_ = testing::FakeApi();
  ParamLayouts layouts_{api_};
  Registry registry_;
  uint64_t in_ = 0, out_ = 0, other_ = 0;
};

TEST_F(ParamScanTest, LayoutFromParamInfoAndTheProbeErrorIsNotLeft) {
  const ParamLayout& l = layouts_.ForRuntime(&kKernelA);
  ASSERT_TRUE(l.known);
  ASSERT_EQ(l.params.size(), 4u);
  EXPECT_EQ(l.params[0].offset, 0u);
  EXPECT_EQ(l.params[1].offset, 8u);
  EXPECT_EQ(l.params[3].offset, 16u);
  EXPECT_EQ(Fake().last_error, cudaSuccess);  // the out-of-range probe that ends the count
  // Cached: asked once.
  EXPECT_EQ(&layouts_.ForRuntime(&kKernelA), &l);
}

TEST_F(ParamScanTest, UnsupportedParamInfoGivesAnUnknownLayout) {
  Fake().param_info_supported = false;
  EXPECT_FALSE(layouts_.ForRuntime(&kKernelB).known);
  EXPECT_EQ(Fake().last_error, cudaSuccess);
}

TEST_F(ParamScanTest, PointerParametersHitTheirBuffersAndOthersDoNot) {
  float* in = reinterpret_cast<float*>(0x10000 + 64);  // inside the buffer
  int n = 0x20000;                                      // an int that looks like an address: too short to be one
  float scale = 1;
  double* out = reinterpret_cast<double*>(0x20000);
  void* args[] = {&in, &n, &scale, &out};
  std::vector<PointerHit> hits;
  Registry::Reader reader(registry_);
  ScanKernelArgs(layouts_.ForRuntime(&kKernelA), args, reader, &hits);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].buffer.serial, in_);
  EXPECT_EQ(hits[0].value, 0x10040u);
  EXPECT_EQ(hits[1].buffer.serial, out_);
}

TEST_F(ParamScanTest, EveryAlignedWordOfAStructParameterIsScanned) {
  Holder h{};
  h.count = 3;
  h.ptr = reinterpret_cast<float*>(0x30010);
  h.ptrs[0] = reinterpret_cast<float*>(0x10000);
  h.ptrs[1] = reinterpret_cast<float*>(0x99999999);  // not registered
  int tail = 0;
  void* args[] = {&h, &tail};
  std::vector<PointerHit> hits;
  Registry::Reader reader(registry_);
  ScanKernelArgs(layouts_.ForRuntime(&kKernelB), args, reader, &hits);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].buffer.serial, other_);
  EXPECT_EQ(hits[1].buffer.serial, in_);
}

TEST_F(ParamScanTest, DriverExtraBufferIsScannedWordByWord) {
  struct {
    void* a;
    int n;
    int pad;
    void* b;
  } packed{reinterpret_cast<void*>(0x20008), 5, 0, reinterpret_cast<void*>(0x30000)};
  size_t size = sizeof(packed);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  const void* data = nullptr;
  size_t got = 0;
  ASSERT_TRUE(FindExtraBuffer(extra, &data, &got));
  EXPECT_EQ(got, sizeof(packed));
  std::vector<PointerHit> hits;
  Registry::Reader reader(registry_);
  ScanArgBuffer(data, got, reader, &hits);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].buffer.serial, out_);
  EXPECT_EQ(hits[1].buffer.serial, other_);
  void* no_buffer[] = {CU_LAUNCH_PARAM_END};
  EXPECT_FALSE(FindExtraBuffer(no_buffer, &data, &got));
  EXPECT_FALSE(FindExtraBuffer(nullptr, &data, &got));
}

}  // namespace
}  // namespace karma::rt
