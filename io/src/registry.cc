// SPDX-License-Identifier: MIT
#include "src/registry.h"

#include <chrono>

#include "mori/core/status.h"

namespace mori::io {

RegionUse::RegionUse(std::shared_ptr<Region> r, Registry* owner) : region_(std::move(r)), owner_(owner) {
  region_->users.fetch_add(1);
}

RegionUse& RegionUse::operator=(RegionUse&& o) noexcept {
  if (this != &o) {
    release();
    region_ = std::move(o.region_);
    owner_ = o.owner_;
    o.owner_ = nullptr;
  }
  return *this;
}

void RegionUse::release() {
  if (region_ && owner_) {
    region_->users.fetch_sub(1);
    owner_->released();
  }
  region_.reset();
  owner_ = nullptr;
}

std::shared_ptr<Region> Registry::add(MemoryDesc desc, char* ptr, uint64_t size, MemoryLocationType loc, int device) {
  auto r = std::make_shared<Region>();
  r->desc = std::move(desc);
  r->ptr = ptr;
  r->size = size;
  r->loc = loc;
  r->device = device;
  std::lock_guard<std::mutex> lock(mu_);
  regions_[r->desc.id] = r;
  return r;
}

RegionUse Registry::acquire(uint32_t id, uint64_t key, uint64_t offset, uint64_t length, bool check_key,
                            std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second->dead.load()) {
    *why = format("memory region %u is not registered", id);
    return {};
  }
  const auto& r = it->second;
  if (check_key && r->desc.region_key != key) {
    *why = format("wrong key for memory region %u", id);
    return {};
  }
  if (!range_ok(offset, length, r->size)) {
    *why = format("offset %llu + size %llu is outside memory region %u of %llu bytes",
                  static_cast<unsigned long long>(offset), static_cast<unsigned long long>(length), id,
                  static_cast<unsigned long long>(r->size));
    return {};
  }
  return RegionUse(r, this);
}

bool Registry::alive(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  return it != regions_.end() && !it->second->dead.load();
}

void Registry::retire(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  if (it != regions_.end()) it->second->dead.store(true);
}

bool Registry::remove(uint32_t id, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return true;
  auto r = it->second;
  r->dead.store(true);
  bool idle = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return r->users.load() == 0; });
  regions_.erase(id);
  return idle;
}

void Registry::released() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

}  // namespace mori::io
