// Loading simcuda images and binding nvcc-style host stubs to their kernels.
#include "device/kernels.h"

#include <fatbinary_section.h>

#include <algorithm>
#include <cstring>

namespace simcuda {

std::vector<size_t> ParamOffsets(const size_t* sizes, const size_t* aligns, unsigned count) {
  std::vector<size_t> offsets(count);
  size_t at = 0;
  for (unsigned i = 0; i < count; ++i) {
    const size_t align = aligns != nullptr && aligns[i] > 0 ? aligns[i] : 1;
    at = (at + align - 1) / align * align;
    offsets[i] = at;
    at += sizes[i];
  }
  return offsets;
}

CUmod_st* KernelRegistry::Load(const void* image) {
  auto module = std::make_unique<CUmod_st>();
  const auto* m = static_cast<const simcuda_module*>(image);
  if (m != nullptr && m->magic == SIMCUDA_MODULE_MAGIC && m->version == SIMCUDA_MODULE_VERSION) {
    module->simcuda_image = true;
    for (size_t i = 0; i < m->num_kernels; ++i) {
      const simcuda_kernel& k = m->kernels[i];
      auto fn = std::make_unique<CUfunc_st>();
      fn->name = k.name != nullptr ? k.name : "";
      fn->param_sizes.assign(k.param_sizes, k.param_sizes + k.num_params);
      fn->param_offsets = ParamOffsets(k.param_sizes, k.param_aligns, k.num_params);
      fn->body = k.body;
      fn->cost = k.cost;
      fn->module = module.get();
      module->functions.push_back(std::move(fn));
    }
  }
  std::lock_guard lock(mu_);
  for (const auto& fn : module->functions) functions_.insert(fn.get());
  modules_.push_back(std::move(module));
  return modules_.back().get();
}

CUmod_st* KernelRegistry::LoadFatBinary(const void* fat_cubin) {
  const auto* wrapper = static_cast<const __fatBinC_Wrapper_t*>(fat_cubin);
  if (wrapper != nullptr && wrapper->magic == FATBINC_MAGIC) return Load(wrapper->data);
  return Load(nullptr);
}

bool KernelRegistry::Unload(CUmod_st* module) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(modules_.begin(), modules_.end(), [&](const auto& m) { return m.get() == module; });
  if (it == modules_.end()) return false;
  for (const void* stub : module->host_stubs) by_stub_.erase(stub);
  for (const auto& fn : module->functions) functions_.erase(fn.get());
  modules_.erase(it);
  return true;
}

bool KernelRegistry::IsModule(const CUmod_st* module) const {
  std::lock_guard lock(mu_);
  return std::any_of(modules_.begin(), modules_.end(), [&](const auto& m) { return m.get() == module; });
}

CUfunc_st* KernelRegistry::Find(CUmod_st* module, const char* name) {
  if (name == nullptr) return nullptr;
  std::lock_guard lock(mu_);
  for (const auto& fn : module->functions) {
    if (fn->name == name) return fn.get();
  }
  return nullptr;
}

bool KernelRegistry::BindHostStub(CUmod_st* module, const void* host_stub, const char* device_name) {
  CUfunc_st* fn = Find(module, device_name);
  if (fn == nullptr) return false;
  std::lock_guard lock(mu_);
  by_stub_[host_stub] = fn;
  module->host_stubs.push_back(host_stub);
  return true;
}

CUfunc_st* KernelRegistry::ByHostStub(const void* host_stub) const {
  std::lock_guard lock(mu_);
  auto it = by_stub_.find(host_stub);
  return it == by_stub_.end() ? nullptr : it->second;
}

bool KernelRegistry::IsFunction(const CUfunc_st* fn) const {
  std::lock_guard lock(mu_);
  return functions_.count(fn) != 0;
}

}  // namespace simcuda
