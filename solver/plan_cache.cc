// Plan cache keys, directory resolution, loading with checks and storing.
#include "solver/plan_cache.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "policy/plan_io.h"
#include "ground/common/env.h"

namespace karma::solver {
namespace {

// FNV-1a over the settings that change the plan.
uint64_t SettingsHash(const SolverOptions& o) {
  const std::string text = fmt::format("karma-solver/{} {} {} {} {} {} {}", kPlannerVersion, Name(o.kind),
                                       o.time_limit_s, o.mip_gap, o.max_layers, o.lp_iteration_limit, o.warm_start);
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

std::string DefaultPlanCacheDir() {
  const EnvConfig env = EnvConfig::FromProcessEnvironment();
  if (env.is_set(EnvVar::KARMA_PLAN_CACHE) && !env.text(EnvVar::KARMA_PLAN_CACHE).empty()) {
    const std::string& v = env.text(EnvVar::KARMA_PLAN_CACHE);
    return v == "off" ? "" : v;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/karma/plans";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && std::strlen(home) > 0) {
    return std::string(home) + "/.cache/karma/plans";
  }
  return "";
}

std::string PlanCacheKey(const policy::SimInput& in, const SolverOptions& options) {
  return fmt::format("{}-{:016x}", policy::Fingerprint(*in.it, policy::ProfileLabel(in.hw), in.capacity),
                     SettingsHash(options));
}

Result<policy::Plan> PlanKarmaCached(const policy::SimInput& in, const SolverOptions& options, const std::string& dir,
                                     CacheOutcome* cache, SolveReport* report) {
  CacheOutcome local;
  CacheOutcome& c = cache != nullptr ? *cache : local;
  c = CacheOutcome{};
  const std::string fingerprint = policy::Fingerprint(*in.it, policy::ProfileLabel(in.hw), in.capacity);
  c.enabled = !dir.empty();
  if (c.enabled) {
    c.path = (std::filesystem::path(dir) / (PlanCacheKey(in, options) + ".json")).string();
    std::error_code ec;
    if (std::filesystem::exists(c.path, ec)) {
      Result<policy::Plan> cached = policy::ReadPlanFile(c.path);
      Status valid = cached.ok() ? Status::Ok() : cached.status();
      if (valid.ok() && cached->fingerprint != fingerprint) {
        valid = Corrupt(fmt::format("made for other inputs (fingerprint {})", cached->fingerprint));
      }
      if (valid.ok()) valid = policy::CheckPlanShape(*cached, *in.it);
      if (valid.ok()) {
        c.hit = true;
        return cached;
      }
      c.note = fmt::format("ignored {}: {}", c.path, valid.message());
    }
  }
  Result<policy::Plan> plan = PlanKarma(in, options, report);
  if (!plan.ok() || !c.enabled) return plan;
  plan->fingerprint = fingerprint;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (Status st = ec ? IoError(fmt::format("cannot create {}: {}", dir, ec.message()))
                     : policy::WritePlanFile(c.path, *plan);
      !st.ok()) {
    c.note += (c.note.empty() ? "" : "; ") + std::string("not stored: ") + st.message();
  } else {
    c.stored = true;
  }
  return plan;
}

}  // namespace karma::solver
