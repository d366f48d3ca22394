// The live-view segment, with Boost.Interprocess (whose exceptions stop here).
#include "runtime/base/live_view.h"

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <new>

namespace bip = boost::interprocess;

namespace karma::rt {

struct LiveView::Impl {
  bip::shared_memory_object shm;
  bip::mapped_region region;
};

LiveView::LiveView(std::unique_ptr<Impl> impl, live::Stats* stats, std::string name)
    : impl_(std::move(impl)), stats_(stats), name_(std::move(name)) {}

Result<std::unique_ptr<LiveView>> LiveView::Create(int64_t pid) {
  const std::string name = live::SegmentName(pid);
  try {
    // A segment left by a crashed process with a recycled pid is ours to replace.
    bip::shared_memory_object::remove(name.c_str());
    bip::permissions owner_only(0600);
    auto impl = std::make_unique<Impl>();
    impl->shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, owner_only);
    impl->shm.truncate(sizeof(live::Stats));
    impl->region = bip::mapped_region(impl->shm, bip::read_write);
    auto* stats = new (impl->region.get_address()) live::Stats();
    stats->pid = pid;
    return std::unique_ptr<LiveView>(new LiveView(std::move(impl), stats, name));
  } catch (const std::exception& e) {
    return IoError("cannot create the shared-memory segment " + name + ": " + e.what());
  }
}

void LiveView::Unlink() {
  if (!linked_) return;
  linked_ = false;
  try {
    bip::shared_memory_object::remove(name_.c_str());
  } catch (...) {
  }
}

LiveView::~LiveView() { Unlink(); }

}  // namespace karma::rt
