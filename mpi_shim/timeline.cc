// Recording the shim's timeline and writing it as JSON.
#include "mpi_shim/timeline.h"

#include <time.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace karma::dp {

double MonotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Timeline::AddCall(const CallRecord& c) {
  std::lock_guard lock(mu_);
  if (calls_.size() >= kMaxCalls) {
    truncated_ = true;
    return;
  }
  calls_.push_back(c);
}

void Timeline::AddGroup(const GroupRecord& g) {
  std::lock_guard lock(mu_);
  if (truncated_) return;
  groups_.push_back(g);
}

void Timeline::AddPlan(const PlanRecord& p) {
  std::lock_guard lock(mu_);
  plans_.push_back(p);
}

void Timeline::SetCost(const CostModel& cost, bool measured) {
  std::lock_guard lock(mu_);
  cost_ = cost;
  measured_ = measured;
}

Status Timeline::Write(const std::string& path, int rank, int size) const {
  std::lock_guard lock(mu_);
  nlohmann::json j;
  j["rank"] = rank;
  j["size"] = size;
  j["clock"] = "CLOCK_MONOTONIC seconds (host time)";
  j["cost"] = {{"alpha_s", cost_.alpha_s}, {"beta_s_per_byte", cost_.beta_s_per_byte}, {"measured", measured_}};
  j["truncated"] = truncated_;
  auto& calls = j["calls"] = nlohmann::json::array();
  for (const CallRecord& c : calls_) {
    calls.push_back({{"round", c.round}, {"index", c.index}, {"bytes", c.bytes}, {"issued", c.issued},
                     {"group", c.group}, {"blocking", c.blocking}});
  }
  auto& groups = j["groups"] = nlohmann::json::array();
  for (const GroupRecord& g : groups_) {
    groups.push_back({{"id", g.id}, {"round", g.round}, {"first", g.first}, {"last", g.last}, {"bytes", g.bytes},
                      {"planned", g.planned}, {"closed", g.closed}, {"start", g.start}, {"moved", g.moved},
                      {"reduced", g.reduced}, {"updated", g.updated}, {"done", g.done}});
  }
  auto& plans = j["plans"] = nlohmann::json::array();
  for (const PlanRecord& p : plans_) {
    plans.push_back({{"round", p.round}, {"calls", p.calls}, {"group_ends", p.group_ends},
                     {"predicted_s", p.predicted_s}, {"wfbp_s", p.wfbp_s}});
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) return IoError("cannot write " + tmp);
    out << j.dump(1) << '\n';
    if (!out) return IoError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return IoError("cannot rename " + tmp + " to " + path);
  return Status::Ok();
}

std::string TimelinePath(const std::string& pattern, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      out += std::to_string(rank);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace karma::dp
