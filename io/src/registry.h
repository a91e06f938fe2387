// SPDX-License-Identifier: MIT
// The engine's registered memory. A region stays valid while a transfer uses it
// (RegionUse); deregistration waits for those to finish, then the id is gone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "mori/io/types.h"

namespace mori::io {

struct Region {
  MemoryDesc desc;
  char* ptr = nullptr;
  uint64_t size = 0;
  MemoryLocationType loc = MemoryLocationType::CPU;
  int device = -1;
  std::atomic<int> users{0};
  std::atomic<bool> dead{false};
};

class Registry;

// Keeps a region registered for as long as it lives.
class RegionUse {
 public:
  RegionUse() = default;
  RegionUse(std::shared_ptr<Region> r, Registry* owner);
  RegionUse(RegionUse&& o) noexcept : region_(std::move(o.region_)), owner_(o.owner_) { o.owner_ = nullptr; }
  RegionUse& operator=(RegionUse&& o) noexcept;
  RegionUse(const RegionUse&) = delete;
  RegionUse& operator=(const RegionUse&) = delete;
  ~RegionUse() { release(); }
  Region* operator->() const { return region_.get(); }
  Region* get() const { return region_.get(); }
  explicit operator bool() const { return region_ != nullptr; }

 private:
  void release();
  std::shared_ptr<Region> region_;
  Registry* owner_ = nullptr;
};

class Registry {
 public:
  std::shared_ptr<Region> add(MemoryDesc desc, char* ptr, uint64_t size, MemoryLocationType loc, int device);
  // A use of region `id` for [offset, offset + length): checks that it exists, that
  // `key` is its key (unless check_key is false: the engine's own descriptor was
  // verified already) and the range. On failure returns an empty use and sets *why.
  RegionUse acquire(uint32_t id, uint64_t key, uint64_t offset, uint64_t length, bool check_key, std::string* why);
  bool alive(uint32_t id) const;
  // No new use of the region from now on.
  void retire(uint32_t id);
  // Marks the region dead and waits up to timeout_s for its users. False: still in use.
  bool remove(uint32_t id, double timeout_s);
  void released();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, std::shared_ptr<Region>> regions_;
};

// offset + length <= size without overflow.
inline bool range_ok(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

}  // namespace mori::io
