// The host link's rates as a run measured them, kept for the next run on the same device: it plans with them from
// its first plan instead of planning with the profile's figures and again once it has measured (runtime/README.md).
#pragma once

#include <string>
#include <vector>

#include "ground/common/status.h"

namespace karma::rt {

struct LinkRecord {
  std::string device;      // cudaDeviceProp::name of the device measured
  double h2d_bw = 0;       // bytes/s to the device, policy::RoundedRate; 0: not measured
  double d2h_bw = 0;       // bytes/s to the host
  // Plan keys (PlanKey) of plans made for these rates that replayed slower than the plan they replaced: a later
  // run keeps the plan made with the profile's figures for those inputs. Most recent last, at most kMaxWentBack.
  std::vector<std::string> went_back;
  static constexpr size_t kMaxWentBack = 64;
};

// DIR/link-NAME.json, NAME the device's name with every character other than a letter, a digit, '.' or '-' as
// '_' ("Tesla V100-PCIE-16GB" -> link-Tesla_V100-PCIE-16GB.json).
std::string LinkRecordPath(const std::string& dir, const std::string& device);

// NotFound when there is no file; InvalidArgument naming the file when it is not a record.
Result<LinkRecord> ReadLinkRecord(const std::string& path);
// Written atomically (a reader sees the old record or the new one).
Status WriteLinkRecord(const std::string& path, const LinkRecord& record);

// Adds `key` to the record's went_back (once, as the most recent), or removes it.
void MarkWentBack(LinkRecord* record, const std::string& key, bool went_back);

}  // namespace karma::rt
