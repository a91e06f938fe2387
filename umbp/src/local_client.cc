// SPDX-License-Identifier: MIT
#include "src/local_client.h"

#include <algorithm>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/status.h"
#include "src/argument_checks.h"
#include "src/checksum.h"
#include "src/clients.h"

namespace mori::umbp {
namespace {

const char* role_name(Role r) {
  switch (r) {
    case Role::SharedSSDLeader: return "shared-SSD leader";
    case Role::SharedSSDFollower: return "shared-SSD follower";
    default: return "standalone";
  }
}

}  // namespace

LocalClient::LocalClient(const Config& config)
    : config_(config), role_(config.resolved_role()), promote_(config.eviction.auto_promote_on_read) {
  config_.validate();
  if (role_ != Role::Standalone && !config_.ssd.enabled)
    raise(Status::kInvalidArgument, "role %s needs the SSD tier: set ssd.enabled (and a storage_dir the ranks share)",
          role_name(role_));
  if (config_.ssd.enabled)
    ssd_ = std::make_unique<SsdTier>(config_.ssd,
                                     role_ == Role::SharedSSDFollower ? SsdAccess::kReadOnly : SsdAccess::kReadWrite);
  // A follower serves reads from the shared SSD only: no arena to fill.
  if (role_ != Role::SharedSSDFollower)
    dram_ = std::make_unique<DramTier>(config_.dram, config_.eviction, env::current().umbp_verify_dram,
                                       /*checksum_always=*/config_.distributed.has_value());
  if (ssd_ && dram_) pipeline_ = std::make_unique<CopyPipeline>(config_.copy_pipeline, *dram_, *ssd_);
  // The pool's view of these pages starts with the store: every key change is logged from the first.
  if (config_.distributed && dram_) peer_pages();
  MORI_LOG(kDebug, "umbp", "local store: %s, DRAM %zu bytes, SSD %s", role_name(role_),
           dram_ ? dram_->capacity() : size_t{0}, ssd_ ? config_.ssd.storage_dir.c_str() : "off");
}

LocalClient::~LocalClient() {
  peer_.reset();      // its leases and pending slots let go of their DRAM blocks
  pipeline_.reset();  // every queued copy reaches the SSD first
  if (ssd_ && role_ != Role::SharedSSDFollower) {
    try {
      ssd_->flush();
    } catch (const std::exception& e) {
      MORI_LOG(kError, "umbp", "closing the local store: SSD flush failed: %s", e.what());
    }
  }
}

bool LocalClient::on_ssd(const std::string& key, bool* rescanned) {
  if (!ssd_) return false;
  if (ssd_->contains(key)) return true;
  if (role_ != Role::SharedSSDFollower || *rescanned) return false;
  *rescanned = true;  // once per call: later misses of the same call see the same directory
  return ssd_->refresh() > 0 && ssd_->contains(key);
}

std::vector<bool> LocalClient::store(const std::string* keys, const uintptr_t* srcs, const size_t* sizes,
                                     const int* depths, size_t n) {
  std::vector<bool> ok(n, false);
  puts_ += n;
  if (role_ == Role::SharedSSDFollower) return ok;  // MORI: followers never write

  // Write-once across both tiers: a key the SSD holds (evicted from DRAM) keeps its value.
  std::vector<size_t> todo;
  todo.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (ssd_ && ssd_->contains(keys[i]))
      ok[i] = true;
    else
      todo.push_back(i);
  }
  if (todo.empty()) return ok;

  // The common case, no key on the SSD yet: the caller's arrays as they are, no copies.
  const size_t m = todo.size();
  std::vector<std::string> k_copy;
  std::vector<uintptr_t> s_copy;
  std::vector<size_t> z_copy;
  std::vector<int> d_copy;
  const std::string* k = keys;
  const uintptr_t* s = srcs;
  const size_t* z = sizes;
  const int* d = depths;
  if (m != n) {
    for (size_t i : todo) {
      k_copy.push_back(keys[i]);
      s_copy.push_back(srcs[i]);
      z_copy.push_back(sizes[i]);
      if (depths) d_copy.push_back(depths[i]);
    }
    k = k_copy.data();
    s = s_copy.data();
    z = z_copy.data();
    d = depths ? d_copy.data() : nullptr;
  }
  std::vector<DramTier::PutOutcome> outcome(m);
  std::vector<DramTier::Block*> held(m, nullptr);
  dram_->put(k, s, z, d, m, ssd_ != nullptr, outcome.data(), held.data());

  uint64_t bytes = 0;
  std::vector<size_t> direct;  // no room in DRAM
  for (size_t j = 0; j < m; ++j) {
    if (outcome[j] == DramTier::PutOutcome::kNoRoom) {
      direct.push_back(j);
      continue;
    }
    ok[todo[j]] = true;
    if (outcome[j] == DramTier::PutOutcome::kStored) bytes += z[j];
  }
  if (pipeline_) {
    // The leader's followers read the directory, so its values are there before the put returns.
    if (role_ == Role::SharedSSDLeader || !config_.copy_pipeline.async_enabled)
      pipeline_->copy_now(held);
    else
      pipeline_->submit(held);
  }
  if (!direct.empty()) {
    if (ssd_) {
      std::vector<std::string> dk;
      std::vector<const void*> ds;
      std::vector<size_t> dz;
      for (size_t j : direct) {
        dk.push_back(k[j]);
        ds.push_back(reinterpret_cast<const void*>(s[j]));
        dz.push_back(z[j]);
      }
      const std::vector<bool> written = ssd_->write_batch(dk, ds, dz);
      for (size_t t = 0; t < direct.size(); ++t) {
        if (written[t]) {
          ok[todo[direct[t]]] = true;
          bytes += dz[t];
        } else {
          ++put_refusals_;
        }
      }
    } else {
      put_refusals_ += direct.size();
    }
  }
  if (role_ == Role::SharedSSDLeader && config_.ssd.durability.mode == DurabilityMode::Relaxed) ssd_->flush();
  put_bytes_ += bytes;
  return ok;
}

std::vector<bool> LocalClient::load(const std::string* keys, const uintptr_t* dsts, const size_t* sizes, size_t n) {
  gets_ += n;
  bool* hits = new bool[n]();
  std::unique_ptr<bool[]> own(hits);
  size_t dram_hits = 0;
  if (dram_) dram_hits = dram_->get(keys, dsts, sizes, n, promote_, hits);
  dram_hits_ += dram_hits;

  size_t ssd_hits = 0;
  if (ssd_ && dram_hits < n) {
    std::vector<size_t> miss;
    std::vector<std::string> mk;
    std::vector<void*> md;
    std::vector<size_t> mz;
    for (size_t i = 0; i < n; ++i) {
      if (hits[i]) continue;
      miss.push_back(i);
      mk.push_back(keys[i]);
      md.push_back(reinterpret_cast<void*>(dsts[i]));
      mz.push_back(sizes[i]);
    }
    const std::vector<bool> got = ssd_->read_batch(mk, md, mz);
    std::vector<std::string> pk;  // promotions
    std::vector<uintptr_t> ps;
    std::vector<size_t> pz;
    for (size_t j = 0; j < miss.size(); ++j) {
      if (!got[j]) continue;
      hits[miss[j]] = true;
      ++ssd_hits;
      if (dram_ && promote_) {
        pk.push_back(mk[j]);
        ps.push_back(reinterpret_cast<uintptr_t>(md[j]));
        pz.push_back(mz[j]);
      }
    }
    if (!pk.empty()) promote(pk.data(), ps.data(), pz.data(), pk.size());
  }
  ssd_hits_ += ssd_hits;
  misses_ += n - dram_hits - ssd_hits;
  std::vector<bool> out(hits, hits + n);
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i)
    if (hits[i]) bytes += sizes[i];
  get_bytes_ += bytes;
  return out;
}

void LocalClient::set_tier_events(TierEvents* events) {
  if (dram_) dram_->set_event_log(events);
  if (ssd_) ssd_->set_event_log(events);
}

void LocalClient::count_direct_reads(uint64_t values, uint64_t bytes) {
  gets_ += values;
  ssd_hits_ += values;
  get_bytes_ += bytes;
}

bool LocalClient::admit_read(const std::string& key, const void* src, size_t size, uint64_t checksum) {
  if (!dram_ || !promote_ || size == 0 || size > dram_->capacity()) return false;
  std::vector<char> copy(static_cast<const char*>(src), static_cast<const char*>(src) + size);
  if (value_checksum(copy.data(), size) != checksum || !ssd_ || !ssd_->contains(key)) return false;
  const auto p = reinterpret_cast<uintptr_t>(copy.data());
  return promote(&key, &p, &size, 1) == 1;
}

size_t LocalClient::promote(const std::string* keys, const uintptr_t* srcs, const size_t* sizes, size_t n) {
  // The SSD has these already: admitted without a hold, evictable at once.
  std::vector<DramTier::PutOutcome> outcome(n);
  dram_->put(keys, srcs, sizes, nullptr, n, false, outcome.data(), nullptr);
  return static_cast<size_t>(std::count(outcome.begin(), outcome.end(), DramTier::PutOutcome::kStored));
}

bool LocalClient::put(const std::string& key, const void* src, size_t size) {
  check_key("put_from_ptr", key);
  const auto p = reinterpret_cast<uintptr_t>(src);
  check_buffer("put_from_ptr", p, size, "src");
  return store(&key, &p, &size, nullptr, 1)[0];
}

bool LocalClient::get(const std::string& key, void* dst, size_t size) {
  check_key("get_into_ptr", key);
  const auto p = reinterpret_cast<uintptr_t>(dst);
  check_buffer("get_into_ptr", p, size, "dst");
  return load(&key, &p, &size, 1)[0];
}

bool LocalClient::exists(const std::string& key) {
  check_key("exists", key);
  bool rescanned = false;
  return (dram_ && dram_->contains(key)) || on_ssd(key, &rescanned);
}

std::vector<bool> LocalClient::batch_put(const std::vector<std::string>& keys, const std::vector<uintptr_t>& srcs,
                                         const std::vector<size_t>& sizes, const std::vector<int>& depths) {
  check_batch(depths.empty() ? "batch_put_from_ptr" : "batch_put_from_ptr_with_depth", keys, srcs, sizes, &depths);
  return store(keys.data(), srcs.data(), sizes.data(), depths.empty() ? nullptr : depths.data(), keys.size());
}

std::vector<bool> LocalClient::batch_get(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                                         const std::vector<size_t>& sizes) {
  check_batch("batch_get_into_ptr", keys, dsts, sizes);
  return load(keys.data(), dsts.data(), sizes.data(), keys.size());
}

std::vector<bool> LocalClient::batch_exists(const std::vector<std::string>& keys) {
  check_keys("batch_exists", keys);
  const size_t n = keys.size();
  std::unique_ptr<bool[]> present(new bool[n]());
  if (dram_) dram_->contains(keys.data(), n, present.get());
  std::vector<bool> out(n);
  bool rescanned = false;
  for (size_t i = 0; i < n; ++i) out[i] = present[i] || on_ssd(keys[i], &rescanned);
  return out;
}

size_t LocalClient::consecutive_from(const std::string* keys, size_t n, size_t i) {
  if (!ssd_) return i;
  // The rest, key by key, until the first key neither tier has (DRAM may hold later ones).
  bool rescanned = false;
  for (; i < n; ++i)
    if (!(dram_ && dram_->contains(keys[i])) && !on_ssd(keys[i], &rescanned)) break;
  return i;
}

size_t LocalClient::batch_exists_consecutive(const std::vector<std::string>& keys) {
  check_keys("batch_exists_consecutive", keys);
  const size_t i = dram_ ? dram_->count_present_prefix(keys.data(), keys.size()) : 0;
  return consecutive_from(keys.data(), keys.size(), i);
}

size_t LocalClient::batch_exists_consecutive(const std::string_view* keys, size_t n) {
  check_keys("batch_exists_consecutive", keys, n);
  const size_t i = dram_ ? dram_->count_present_prefix(keys, n) : 0;
  if (!ssd_ || i == n) return i;
  const std::vector<std::string> rest(keys + i, keys + n);
  return i + consecutive_from(rest.data(), rest.size(), 0);
}

PeerPages* LocalClient::peer_pages_if_made() {
  std::lock_guard<std::mutex> lock(peer_mu_);
  return peer_.get();
}

bool LocalClient::clear() {
  // A distributed worker's HBM values go too; first, so that their SSD copies in flight land
  // before the SSD is cleared.
  PeerPages* peers = peer_pages_if_made();
  if (peers) peers->clear_hbm();
  if (pipeline_) pipeline_->drain();  // no copy may land on the SSD after it is cleared
  if (dram_) dram_->clear();
  if (ssd_) ssd_->clear();
  // Remote readers' leases end with the clear: the values they pinned go back to the heap now
  // (their bytes stop matching their checksums), so a reader that remembered their places
  // misses them instead of reading them there until the leases would have run out.
  if (peers) peers->end_leases();
  return true;
}

bool LocalClient::flush() {
  if (pipeline_) pipeline_->drain();
  if (PeerPages* peers = peer_pages_if_made()) peers->drain_hbm_copies();  // a worker's HBM values' copies
  if (ssd_ && role_ != Role::SharedSSDFollower) ssd_->flush();
  return true;
}

ClientStats LocalClient::stats() const {
  ClientStats s;
  s.puts = puts_;
  s.put_bytes = put_bytes_;
  s.gets = gets_;
  s.get_bytes = get_bytes_;
  s.dram_hits = dram_hits_;
  s.ssd_hits = ssd_hits_;
  s.misses = misses_;
  s.put_refusals = put_refusals_;
  if (dram_) {
    const DramStats d = dram_->stats();
    s.dram_evictions = d.evictions;
    s.corrupt_reads += d.corrupt_reads;
    s.dram_used_bytes = d.used_bytes;
    s.dram_pinned_bytes = d.pinned_bytes;
    s.dram_capacity_bytes = d.capacity_bytes;
    s.dram_keys = d.keys;
  }
  if (ssd_) {
    const SsdStats d = ssd_->stats();
    s.ssd_evictions = d.evicted_keys;
    s.corrupt_reads += d.corrupt_reads;
    s.ssd_used_bytes = d.used_bytes;
    s.ssd_capacity_bytes = d.capacity_bytes;
    s.ssd_keys = d.keys;
  }
  if (pipeline_) {
    const CopyPipelineStats c = pipeline_->stats();
    s.ssd_copies = c.copied;
    s.ssd_copy_failures = c.failed;
  }
  return s;
}

PeerPages& LocalClient::peer_pages() {
  std::lock_guard<std::mutex> lock(peer_mu_);
  if (peer_) return *peer_;
  if (!dram_)
    raise(Status::kInvalidUsage, "peer pages: a %s has no DRAM tier to share (distributed mode needs role Standalone)",
          role_name(role_));
  const env::Settings settings = env::current();
  const DistributedConfig d = config_.distributed.value_or(DistributedConfig{});
  peer_ = std::make_unique<PeerPages>(
      *dram_, ssd_.get(), pipeline_.get(), !config_.copy_pipeline.async_enabled, d.ssd_staging_buffer_size,
      d.ssd_staging_buffer_slots, static_cast<int>(settings.umbp_dram_read_lease_ms),
      static_cast<int>(settings.umbp_ssd_read_lease_ms), d.hbm, config_.dram, config_.eviction, config_.copy_pipeline);
  return *peer_;
}

std::unique_ptr<Client> make_local_client(const Config& config) { return std::make_unique<LocalClient>(config); }

}  // namespace mori::umbp
