// Copies of launch arguments, issued again through the real launch functions.
#include "runtime/observe/relaunch.h"

#include <cstring>
#include <vector>

namespace karma::rt {

Relaunch MakeKernelRelaunch(const OpDesc& d, const ParamLayout& layout) {
  if (d.launch_api == LaunchApi::kNone || d.launch_real == nullptr || !layout.known || d.extra != nullptr ||
      (d.args == nullptr && !layout.params.empty())) {
    return nullptr;
  }
  // Each parameter's bytes, 8-byte aligned in one block (a parameter is read through a pointer to it).
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const ParamLayout::Param& p : layout.params) {
    offsets.push_back(total);
    total += (p.size + 7) / 8 * 8;
  }
  auto bytes = std::make_shared<std::vector<uint64_t>>((total + 7) / 8 + 1, 0);
  auto* base = reinterpret_cast<unsigned char*>(bytes->data());
  for (size_t i = 0; i < layout.params.size(); ++i) {
    if (d.args[i] == nullptr) return nullptr;
    std::memcpy(base + offsets[i], d.args[i], layout.params[i].size);
  }
  const dim3 grid(d.grid[0], d.grid[1], d.grid[2]), block(d.block[0], d.block[1], d.block[2]);
  const uint32_t shared = d.shared_bytes;
  const StreamKey stream = d.stream;
  const void* func = d.func;
  std::vector<uint32_t> sizes;
  for (const ParamLayout::Param& p : layout.params) sizes.push_back(p.size);
  // The argument block for one launch: a copy with every pointer-sized word mapped (where the scan looks for
  // pointers), so that scratch redirection reaches pointers inside struct parameters too.
  auto build = [bytes, offsets, sizes](const AddressMap& map, std::vector<uint64_t>* copy, std::vector<void*>* args) {
    *copy = *bytes;
    auto* b = reinterpret_cast<unsigned char*>(copy->data());
    args->resize(offsets.size());
    for (size_t i = 0; i < offsets.size(); ++i) {
      (*args)[i] = b + offsets[i];
      if (map.entries.empty()) continue;
      for (size_t off = 0; off + sizeof(uint64_t) <= sizes[i]; off += sizeof(uint64_t)) {
        uint64_t word;
        std::memcpy(&word, b + offsets[i] + off, sizeof(word));
        const uint64_t mapped = map(word);
        if (mapped != word) std::memcpy(b + offsets[i] + off, &mapped, sizeof(mapped));
      }
    }
  };
  if (d.launch_api == LaunchApi::kRuntime) {
    auto real = reinterpret_cast<cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t)>(
        const_cast<void*>(d.launch_real));
    return std::make_shared<const std::function<bool(const AddressMap&)>>([=](const AddressMap& map) {
      std::vector<uint64_t> copy;
      std::vector<void*> args;
      build(map, &copy, &args);
      return real(func, grid, block, args.data(), shared, StreamOf(stream)) == cudaSuccess;
    });
  }
  auto real = reinterpret_cast<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                            unsigned, CUstream, void**, void**)>(const_cast<void*>(d.launch_real));
  return std::make_shared<const std::function<bool(const AddressMap&)>>([=](const AddressMap& map) {
    std::vector<uint64_t> copy;
    std::vector<void*> args;
    build(map, &copy, &args);
    return real(static_cast<CUfunction>(const_cast<void*>(func)), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                shared, reinterpret_cast<CUstream>(stream), args.data(), nullptr) == CUDA_SUCCESS;
  });
}

}  // namespace karma::rt
