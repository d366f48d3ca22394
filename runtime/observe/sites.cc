// Capturing and symbolizing allocation sites.
#include "runtime/observe/sites.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace karma::rt {
namespace {

uint64_t HashFrames(const void* const* pcs, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) {
    h ^= reinterpret_cast<uint64_t>(pcs[i]);
    h *= 1099511628211ull;
  }
  return h;
}

// The object this code was linked into: its frames are KARMA's, not the application's.
const void* OwnBase() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<const void*>(&OwnBase), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

std::string FrameName(const void* pc) {
  Dl_info info{};
  // A return address points after the call; one byte back lands inside the calling instruction.
  const void* lookup = static_cast<const char*>(pc) - 1;
  if (dladdr(lookup, &info) == 0) return "??";
  std::string lib;
  if (info.dli_fname != nullptr) {
    const char* slash = std::strrchr(info.dli_fname, '/');
    lib = slash != nullptr ? slash + 1 : info.dli_fname;
  }
  if (info.dli_sname == nullptr) return lib.empty() ? "??" : "?? (" + lib + ")";
  std::string name = info.dli_sname;
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  if (status == 0 && demangled != nullptr) {
    name = demangled;
    // Argument lists make sites long without telling them apart better.
    const size_t paren = name.find('(');
    if (paren != std::string::npos && paren > 0) name.resize(paren);
  }
  std::free(demangled);
  return lib.empty() ? name : name + " (" + lib + ")";
}

}  // namespace

BacktraceFn LoadBacktrace() {
  static BacktraceFn fn = [] {
    void* handle = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return static_cast<BacktraceFn>(nullptr);
    return reinterpret_cast<BacktraceFn>(dlsym(handle, "unw_backtrace"));
  }();
  return fn;
}

uint32_t SiteTable::Capture() {
  BacktraceFn backtrace = LoadBacktrace();
  if (backtrace == nullptr) return 0;
  void* pcs[kMaxFrames];
  const int n = backtrace(pcs, kMaxFrames);
  if (n <= 0) return 0;
  return Intern(pcs, n);
}

uint32_t SiteTable::Intern(const void* const* pcs, int n) {
  const uint64_t h = HashFrames(pcs, n);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t>& ids = by_hash_[h];
  for (uint32_t id : ids) {
    const auto& s = stacks_[id - 1];
    if (static_cast<int>(s.size()) == n && std::equal(s.begin(), s.end(), pcs)) return id;
  }
  stacks_.emplace_back(pcs, pcs + n);
  const auto id = static_cast<uint32_t>(stacks_.size());
  ids.push_back(id);
  return id;
}

std::string SiteTable::Describe(uint32_t id, int max_frames) const {
  std::vector<const void*> frames;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id == 0 || id > stacks_.size()) return "";
    frames = stacks_[id - 1];
  }
  std::string out;
  int shown = 0;
  for (const void* pc : frames) {
    Dl_info info{};
    if (dladdr(static_cast<const char*>(pc) - 1, &info) != 0 && info.dli_fbase == OwnBase()) continue;
    if (shown == max_frames) break;
    if (shown++ > 0) out += " <- ";
    out += FrameName(pc);
  }
  return out;
}

size_t SiteTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stacks_.size();
}

}  // namespace karma::rt
