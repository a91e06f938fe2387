// SPDX-License-Identifier: MIT
#include "src/peer_events.h"

namespace mori::umbp {

void PeerEventLog::append(KvChange::Kind kind, const std::string& key, TierType tier, uint64_t size, uint64_t offset,
                          uint64_t checksum) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.size() >= kMaxQueued) {
    queue_.pop_front();
    ++overflowed_;
  }
  const bool add = kind == KvChange::Kind::Add;
  queue_.push_back(KvChange{kind, key, tier, add ? size : 0, ++seq_, add ? offset : 0, add ? checksum : 0});
}

std::vector<KvChange> PeerEventLog::drain(size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = max == 0 ? queue_.size() : std::min(max, queue_.size());
  std::vector<KvChange> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + n));
  queue_.erase(queue_.begin(), queue_.begin() + n);
  return out;
}

uint64_t PeerEventLog::mark_and_drop() {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  overflowed_ = 0;
  return seq_;
}

size_t PeerEventLog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

uint64_t PeerEventLog::last_seq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

uint64_t PeerEventLog::overflowed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overflowed_;
}

}  // namespace mori::umbp
