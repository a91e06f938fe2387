// SPDX-License-Identifier: MIT
#include "src/standalone_process_client.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "mori/core/unique_fd.h"
#include "src/argument_checks.h"
#include "src/clients.h"
#include "src/host_mem_allocator.h"
#include "src/checksum.h"
#include "src/memfd_lookup.h"
#include "src/ssd_io.h"
#include "src/ssd_record.h"
#include "src/ssd_segment.h"
#include "src/ssd_shared_index.h"
#include "src/unix_channel.h"

extern char** environ;

namespace mori::umbp {
namespace {

constexpr const char* kSubsys = "UMBP";

std::mutex g_command_mu;
std::vector<std::string> g_default_command;

// A transport failure (as opposed to an error reply): the connection is in an unknown state.
struct ChannelFailure {
  Status status;
  std::string what;
  bool before_reply;  // nothing of the reply arrived: the request may be sent again
};

struct Reply {
  Status status = Status::kOk;
  std::vector<char> payload;
  UniqueFd fd;  // a descriptor the server handed over with the reply
};

std::vector<bool> read_bools(const std::vector<char>& payload, size_t n, const char* what) {
  if (payload.size() != n)
    raise(Status::kRemote, "%s: the per-host server answered %zu results for %zu keys", what, payload.size(), n);
  std::vector<bool> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = payload[i] != 0;
  return out;
}

// The memory file behind [ptr, ptr + size): the host allocator's registry first (its own
// buffers), then whatever /proc/self/maps says (memfds the application mapped itself).
MemfdRange memory_file_of(void* ptr, size_t size) {
  if (const auto region = find_host_region(ptr, size)) {
    MORI_CHECK_ARG(region->fd >= 0,
                   "register_memory: this buffer was allocated with a private backing; the per-host server can only "
                   "map UMBPHostMemAllocator buffers of backing AnonymousShm (or AnonymousShmHugetlb)");
    MemfdRange r;
    r.fd = ::fcntl(region->fd, F_DUPFD_CLOEXEC, 0);
    if (r.fd < 0) raise_errno("register_memory: dup of the buffer's memory file");
    r.offset = reinterpret_cast<uintptr_t>(ptr) - reinterpret_cast<uintptr_t>(region->base);
    return r;
  }
  return find_memfd(ptr, size);
}

bool read_bool(const std::vector<char>& payload, const char* what) { return read_bools(payload, 1, what)[0]; }

void check_batch_limit(const std::vector<std::string>& keys, const char* call) {
  MORI_CHECK_ARG(keys.size() <= wire::kMaxBatch, "%s: a batch of %zu keys exceeds the per-host server's limit of %zu",
                 call, keys.size(), wire::kMaxBatch);
}

class StandaloneProcessClient final : public Client {
 public:
  explicit StandaloneProcessClient(const Config& config) : config_(config) {
    address_ = config.standalone_process->address;
    path_ = unix_socket_path(address_);
    const env::Settings s = env::current();
    MORI_CHECK_ARG(s.umbp_call_timeout_ms > 0, "UMBP_CALL_TIMEOUT_MS must be > 0 (got %" PRId64 ")",
                   s.umbp_call_timeout_ms);
    call_timeout_ms_ = s.umbp_call_timeout_ms;
    MORI_CHECK_ARG(s.umbp_server_poll_us >= 0 && s.umbp_server_poll_us <= 1000000,
                   "UMBP_SERVER_POLL_US must be 0..1000000 microseconds (got %" PRId64 ")", s.umbp_server_poll_us);
    reader_.set_spin(std::chrono::microseconds(s.umbp_server_poll_us));
    direct_reads_ = s.umbp_server_direct_reads;
    program_ = s.umbp_standalone_bin;
    std::lock_guard<std::mutex> lock(mu_);
    connect_locked();  // MORI's client checks the server at construction too
  }

  ~StandaloneProcessClient() override {
    std::lock_guard<std::mutex> lock(mu_);
    disconnect_locked();
    close_segments_locked();
    for (auto& [base, r] : regions_) ::close(r.fd);
  }

  bool put(const std::string& key, const void* src, size_t size) override {
    check_key("put_from_ptr", key);
    check_buffer("put_from_ptr", reinterpret_cast<uintptr_t>(src), size, "src");
    return send_put({key}, {reinterpret_cast<uintptr_t>(src)}, {size}, {})[0];
  }
  bool get(const std::string& key, void* dst, size_t size) override {
    check_key("get_into_ptr", key);
    check_buffer("get_into_ptr", reinterpret_cast<uintptr_t>(dst), size, "dst");
    return send_get({key}, {reinterpret_cast<uintptr_t>(dst)}, {size})[0];
  }
  bool exists(const std::string& key) override {
    check_key("exists", key);
    return send_keys(wire::Op::kBatchExists, {key}, "exists")[0];
  }

  std::vector<bool> batch_put(const std::vector<std::string>& keys, const std::vector<uintptr_t>& srcs,
                              const std::vector<size_t>& sizes, const std::vector<int>& depths) override {
    const char* call_name = depths.empty() ? "batch_put_from_ptr" : "batch_put_from_ptr_with_depth";
    check_batch(call_name, keys, srcs, sizes, &depths);
    check_batch_limit(keys, call_name);
    return send_put(keys, srcs, sizes, depths);
  }

  std::vector<bool> send_put(const std::vector<std::string>& keys, const std::vector<uintptr_t>& srcs,
                             const std::vector<size_t>& sizes, const std::vector<int>& depths) {
    if (keys.empty()) return {};
    Reply r = call(wire::Op::kBatchPut, [&](wire::Writer& w) {
      w.put<uint8_t>(depths.empty() ? 0 : 1);
      w.put<uint32_t>(static_cast<uint32_t>(keys.size()));
      for (size_t i = 0; i < keys.size(); ++i) {
        put_item(w, keys[i], srcs[i], sizes[i]);
        if (!depths.empty()) w.put<int32_t>(depths[i]);
      }
    });
    return read_bools(r.payload, keys.size(), "batch_put");
  }

  std::vector<bool> batch_get(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                              const std::vector<size_t>& sizes) override {
    check_batch("batch_get_into_ptr", keys, dsts, sizes);
    check_batch_limit(keys, "batch_get_into_ptr");
    return send_get(keys, dsts, sizes);
  }

  std::vector<bool> send_get(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                             const std::vector<size_t>& sizes) {
    if (keys.empty()) return {};
    std::vector<bool> ok(keys.size(), false);
    size_t read = direct_reads_ ? read_direct(keys, dsts, sizes, ok) : 0;
    if (read == keys.size()) return ok;
    // The rest from the server: values in its DRAM, and whatever was not read here.
    std::vector<size_t> ask;
    ask.reserve(keys.size() - read);
    for (size_t i = 0; i < keys.size(); ++i)
      if (!ok[i]) ask.push_back(i);
    Reply r = call(wire::Op::kBatchGet, [&](wire::Writer& w) {
      w.put<uint32_t>(static_cast<uint32_t>(ask.size()));
      for (size_t i : ask) put_item(w, keys[i], dsts[i], sizes[i]);
    });
    const std::vector<bool> got = read_bools(r.payload, ask.size(), "batch_get");
    for (size_t j = 0; j < ask.size(); ++j) ok[ask[j]] = got[j];
    return ok;
  }

  std::vector<bool> batch_exists(const std::vector<std::string>& keys) override {
    check_keys("batch_exists", keys);
    check_batch_limit(keys, "batch_exists");
    return send_keys(wire::Op::kBatchExists, keys, "batch_exists");
  }

  std::vector<bool> send_keys(wire::Op op, const std::vector<std::string>& keys, const char* what) {
    if (keys.empty()) return {};
    Reply r = call(op, [&](wire::Writer& w) { put_keys(w, keys); });
    return read_bools(r.payload, keys.size(), what);
  }

  size_t batch_exists_consecutive(const std::vector<std::string>& keys) override {
    check_keys("batch_exists_consecutive", keys);
    check_batch_limit(keys, "batch_exists_consecutive");
    if (keys.empty()) return 0;
    Reply r = call(wire::Op::kBatchExistsConsecutive, [&](wire::Writer& w) { put_keys(w, keys); });
    wire::Reader rd(r.payload.data(), r.payload.size());
    const uint64_t n = rd.get<uint64_t>();
    return static_cast<size_t>(std::min<uint64_t>(n, keys.size()));
  }

  bool clear() override { return read_bool(call(wire::Op::kClear, nullptr).payload, "clear"); }
  bool flush() override { return read_bool(call(wire::Op::kFlush, nullptr).payload, "flush"); }
  DeploymentMode deployment_mode() const override { return DeploymentMode::StandaloneProcess; }

  bool register_memory(void* ptr, size_t size) override {
    MORI_CHECK_ARG(ptr != nullptr, "register_memory: ptr must not be null");
    MORI_CHECK_ARG(size > 0, "register_memory: size must be > 0");
    const uintptr_t lo = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [base, r] : regions_) {
      if (base <= lo && lo + size <= base + r.size) return true;  // already handed over
      MORI_CHECK_ARG(lo + size <= base || base + r.size <= lo,
                     "register_memory: [0x%" PRIxPTR ", +%zu) overlaps the registered [0x%" PRIxPTR ", +%" PRIu64
                     "); deregister_memory it first",
                     lo, size, base, r.size);
    }
    const MemfdRange m = memory_file_of(ptr, size);
    Region reg{size, m.fd, m.offset, 0};
    try {
      if (fd_ < 0) connect_locked();
      register_on_connection_locked(lo, reg);
    } catch (...) {
      ::close(reg.fd);
      throw;
    }
    regions_.emplace(lo, reg);
    return true;
  }

  void deregister_memory(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == regions_.end()) return;
    const uint32_t id = it->second.id;
    ::close(it->second.fd);
    regions_.erase(it);
    if (fd_ < 0 || id == 0) return;
    // The server unmaps it now; were it gone, it unmapped it with the connection already.
    try {
      wire::Writer w;
      w.put<uint32_t>(id);
      Reply r = exchange_locked(wire::Op::kDeregister, w, -1);
      if (r.status != Status::kOk)
        MORI_LOG(kWarn, kSubsys, "deregister_memory: %s", std::string(r.payload.begin(), r.payload.end()).c_str());
    } catch (const ChannelFailure&) {
      disconnect_locked();
    }
  }

  bool report_external_kv_blocks(const std::vector<std::string>& hashes, TierType tier) override {
    return tier_hashes_call(wire::Op::kReportExternalKv, hashes, tier);
  }
  bool revoke_external_kv_blocks(const std::vector<std::string>& hashes, TierType tier) override {
    return tier_hashes_call(wire::Op::kRevokeExternalKv, hashes, tier);
  }
  bool revoke_all_external_kv_blocks_at_tier(TierType tier) override {
    Reply r =
        call(wire::Op::kRevokeAllExternalKv, [&](wire::Writer& w) { w.put<uint32_t>(static_cast<uint32_t>(tier)); });
    return read_bool(r.payload, "revoke_all_external_kv_blocks_at_tier");
  }

  std::vector<ExternalKvMatch> match_external_kv(const std::vector<std::string>& hashes, bool count_as_hit) override {
    check_batch_limit(hashes, "match_external_kv");
    Reply r = call(wire::Op::kMatchExternalKv, [&](wire::Writer& w) {
      w.put<uint8_t>(count_as_hit ? 1 : 0);
      put_keys(w, hashes);
    });
    wire::Reader rd(r.payload.data(), r.payload.size());
    std::vector<ExternalKvMatch> out(rd.get_count(wire::kMaxBatch, 12));
    for (auto& m : out) {
      m.node_id = rd.get_string(kMaxKeyBytes);
      m.peer_address = rd.get_string(kMaxKeyBytes);
      const uint32_t tiers = rd.get_count(16, 8);
      for (uint32_t t = 0; t < tiers; ++t) {
        const auto tier = static_cast<TierType>(rd.get<uint32_t>());
        std::vector<std::string> hs(rd.get_count(wire::kMaxBatch, 4));
        for (auto& h : hs) h = rd.get_string(kMaxKeyBytes);
        m.hashes_by_tier.emplace_back(tier, std::move(hs));
      }
    }
    return out;
  }

  std::vector<ExternalKvHitCount> get_external_kv_hit_counts(const std::vector<std::string>& hashes) override {
    check_batch_limit(hashes, "get_external_kv_hit_counts");
    Reply r = call(wire::Op::kExternalKvHitCounts, [&](wire::Writer& w) { put_keys(w, hashes); });
    wire::Reader rd(r.payload.data(), r.payload.size());
    std::vector<ExternalKvHitCount> out(rd.get_count(wire::kMaxBatch, 12));
    for (auto& c : out) {
      c.hash = rd.get_string(kMaxKeyBytes);
      c.hit_count_total = rd.get<uint64_t>();
    }
    return out;
  }

  ClientStats stats() const override {
    Reply r = const_cast<StandaloneProcessClient*>(this)->call(wire::Op::kStats, nullptr);
    ClientStats st;
    if (r.payload.size() != sizeof(st))
      raise(Status::kRemote, "stats: the per-host server at %s answered %zu bytes, expected %zu", address_.c_str(),
            r.payload.size(), sizeof(st));
    std::memcpy(&st, r.payload.data(), sizeof(st));
    return st;
  }

 private:
  struct Region {
    uint64_t size;
    int fd;              // our descriptor of the memory file, handed over again on reconnect
    uint64_t fd_offset;  // where the region starts in the file
    uint32_t id;         // the server's id on the current connection (0: not there)
  };

  static void put_keys(wire::Writer& w, const std::vector<std::string>& keys) {
    w.put<uint32_t>(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.put_string(k);
  }

  // (region, offset, size) when [ptr, ptr + size) lies in a region on this connection, else
  // (kUnregistered, address, size).
  void put_item(wire::Writer& w, const std::string& key, uintptr_t ptr, size_t size) const {
    w.put_string(key);
    auto it = regions_.upper_bound(ptr);
    if (it != regions_.begin()) {
      --it;
      const uintptr_t base = it->first;
      if (it->second.id != 0 && ptr - base < it->second.size && size <= it->second.size - (ptr - base)) {
        w.put<uint32_t>(it->second.id);
        w.put<uint64_t>(ptr - base);
        w.put<uint64_t>(size);
        return;
      }
    }
    w.put<uint32_t>(wire::kUnregistered);
    w.put<uint64_t>(ptr);
    w.put<uint64_t>(size);
  }

  bool tier_hashes_call(wire::Op op, const std::vector<std::string>& hashes, TierType tier) {
    check_batch_limit(hashes, "external kv hashes");
    Reply r = call(op, [&](wire::Writer& w) {
      w.put<uint32_t>(static_cast<uint32_t>(tier));
      put_keys(w, hashes);
    });
    return read_bool(r.payload, "external kv");
  }

  // ---- reads straight from the server's SSD (ssd_shared_index.h) ----

  struct SegmentFiles {
    UniqueFd fd, direct_fd;  // buffered, O_DIRECT (may be -1 where the file system refuses it)
  };

  // Reads the values the server holds on its SSD only (not in DRAM) straight from its segment
  // files into their destinations, and tells the server which (its counters, promote on read).
  // ok[i] for each one read whole with the checksum the index gave; the others are the server's
  // to answer. Returns how many were read.
  size_t read_direct(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                     const std::vector<size_t>& sizes, std::vector<bool>& ok) {
    std::lock_guard<std::mutex> lock(mu_);
    // The index of a server that died is frozen: a successor's clear() would not reach it.
    if (fd_ >= 0 && !connection_open_locked()) disconnect_locked();
    if (fd_ < 0) connect_locked();
    if (!ssd_index_) return 0;
    forget_dropped_segments_locked();
    struct Item {
      size_t i;
      SsdPlace place;
      bool failed = false;
    };
    std::vector<Item> items;
    std::vector<ssd::ReadOp> ops;
    std::vector<size_t> owner;  // ops[k] reads part of items[owner[k]]
    struct Cached {
      int fd;
      uint64_t offset, size;
    };
    std::vector<Cached> buffered;  // what is read through the page cache
    for (size_t i = 0; i < keys.size(); ++i) {
      SsdPlace place;
      if (!ssd_index_->find_ssd_only(keys[i], &place) || place.size != sizes[i]) continue;
      const SegmentFiles* files = segment_locked(place.segment);
      if (!files) continue;
      const bool aligned = dsts[i] % ssd::kRecordAlign == 0;
      ssd::add_value_reads(ops, files->fd.get(), aligned ? files->direct_fd.get() : -1,
                           reinterpret_cast<void*>(dsts[i]), place.offset, place.size, keys.size() == 1);
      owner.resize(ops.size(), items.size());
      if (!aligned || !files->direct_fd || place.size % ssd::kRecordAlign)
        buffered.push_back(Cached{files->fd.get(), place.offset, place.size});
      items.push_back(Item{i, place});
    }
    if (items.empty()) return 0;
    if (!ssd_reader_) ssd_reader_ = std::make_unique<ssd::ReadEngine>(IoBackend::IoUring, kDirectReadDepth);
    ssd_reader_->read_all(
        ops, [&](const ssd::ReadOp& op) { items[owner[op.tag]].failed |= op.error != 0; },
        /*spread=*/items.size() == 1 && ops.size() > 1);
    wire::Writer notice;
    notice.put<uint32_t>(0);
    uint32_t read = 0;
    for (const Item& it : items) {
      if (it.failed || value_checksum(reinterpret_cast<const void*>(dsts[it.i]), it.place.size) != it.place.checksum)
        continue;  // moved or rewritten since the index said so, or corrupt: the server answers
      ok[it.i] = true;
      ++read;
      put_item(notice, keys[it.i], dsts[it.i], sizes[it.i]);
      notice.put<uint64_t>(it.place.checksum);
    }
    // What came through the page cache leaves it, as the server's own reads do.
    for (const Cached& c : buffered)
      ::posix_fadvise(c.fd, static_cast<off_t>(c.offset), static_cast<off_t>(c.size), POSIX_FADV_DONTNEED);
    if (read == 0) return 0;
    std::memcpy(notice.buffer().data(), &read, sizeof(read));
    try {
      const wire::Frame f{wire::kMagic,
                          wire::kVersion,
                          static_cast<uint16_t>(wire::Op::kDirectReads),
                          next_id_++,
                          0,
                          static_cast<uint32_t>(notice.size())};
      send_frame(fd_, f, notice.buffer().data(), -1, net::now() + static_cast<double>(call_timeout_ms_) / 1000);
    } catch (const Error&) {
      disconnect_locked();  // the values are read; the next call reconnects
    }
    return read;
  }

  // Whether the server still holds its end of the connection (nothing is due from it between
  // calls: a readable socket means it closed, or broke the protocol).
  bool connection_open_locked() const {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 0;
  }

  // The segment's files, opened on first use; null when they cannot be opened (dropped since).
  const SegmentFiles* segment_locked(uint64_t id) {
    auto it = segment_files_.find(id);
    if (it != segment_files_.end()) return &it->second;
    if (segment_files_.size() >= kMaxOpenSegments) close_segments_locked();
    const std::string path = ssd_dir_ + "/" + ssd::segment_file_name(id);
    SegmentFiles f;
    f.fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f.fd) {
      // Gone (dropped since the lookup): the server answers. Not ours to read (another user's
      // server, a private directory): said once, as the rank then asks the server for every value.
      if ((errno == EACCES || errno == EPERM) && !warned_no_access_) {
        warned_no_access_ = true;
        MORI_LOG(kWarn, kSubsys,
                 "UMBP per-host server at %s: this process may not read its SSD files in %s (%s); its SSD-only "
                 "values are read through the server",
                 address_.c_str(), ssd_dir_.c_str(), std::strerror(errno));
      }
      return nullptr;
    }
    f.direct_fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
    return &segment_files_.emplace(id, std::move(f)).first->second;
  }

  // A segment the server deleted stays on the disk while a descriptor holds it: all of them are
  // closed whenever the server has deleted one (the next direct read opens what it needs again).
  void forget_dropped_segments_locked() {
    if (!ssd_index_) return;
    const uint64_t dropped = ssd_index_->dropped_segments();
    if (dropped == dropped_seen_) return;
    dropped_seen_ = dropped;
    close_segments_locked();
  }

  void close_segments_locked() { segment_files_.clear(); }

  // Asks the server for its shared SSD index (after the Ping of a new connection).
  void attach_ssd_index_locked() {
    ssd_index_.reset();
    close_segments_locked();
    if (!direct_reads_) return;
    wire::Writer none;
    Reply r = exchange_locked(wire::Op::kSsdIndex, none, -1);
    if (r.status != Status::kOk) return;  // a server that does not offer one: every get asks it
    wire::Reader rd(r.payload.data(), r.payload.size());
    if (rd.get<uint8_t>() == 0 || !r.fd) return;
    ssd_dir_ = rd.get_string(4096);
    try {
      ssd_index_ = SsdSharedIndex::attach(r.fd.get());
      dropped_seen_ = ssd_index_->dropped_segments();
    } catch (const Error& e) {
      MORI_LOG(kWarn, kSubsys, "UMBP per-host server at %s: its shared SSD index is unusable (%s); every get asks it",
               address_.c_str(), e.what());
    }
  }

  // One request: connects when needed, encodes (region ids are per connection), exchanges.
  // A broken connection that was already open is retried once on a fresh one: the server may
  // have restarted since the last call (every request is idempotent: puts are write-once).
  Reply call(wire::Op op, const std::function<void(wire::Writer&)>& encode) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int attempt = 0;; ++attempt) {
      const bool fresh = fd_ < 0;
      if (fresh) connect_locked();
      wire::Writer w;
      if (encode) encode(w);
      MORI_CHECK_ARG(w.size() <= wire::kMaxPayload,
                     "keys: the request encodes to %zu bytes, over the per-host server's limit of %zu; split the batch",
                     w.size(), wire::kMaxPayload);
      try {
        Reply r = exchange_locked(op, w, -1);
        if (r.status != Status::kOk)
          raise(r.status, "UMBP per-host server at %s: %s", address_.c_str(),
                std::string(r.payload.begin(), r.payload.end()).c_str());
        return r;
      } catch (const ChannelFailure& f) {
        disconnect_locked();
        if (!fresh && attempt == 0 && f.before_reply && f.status == Status::kRemote) continue;
        raise_channel_failure(f);
      }
    }
  }

  [[noreturn]] void raise_channel_failure(const ChannelFailure& f) const {
    if (f.status == Status::kTimeout)
      raise(Status::kTimeout,
            "UMBP per-host server at %s did not answer within %" PRId64 " ms (UMBP_CALL_TIMEOUT_MS): %s",
            address_.c_str(), call_timeout_ms_, f.what.c_str());
    raise(Status::kRemote, "UMBP per-host server at %s: the connection failed: %s", address_.c_str(), f.what.c_str());
  }

  // Sends a request and reads its reply; throws ChannelFailure when the channel breaks.
  Reply exchange_locked(wire::Op op, wire::Writer& w, int pass_fd) {
    const double deadline = net::now() + static_cast<double>(call_timeout_ms_) / 1000;
    const uint64_t id = next_id_++;
    bool reply_started = false;
    try {
      wire::Frame f{wire::kMagic, wire::kVersion, static_cast<uint16_t>(op), id, 0, static_cast<uint32_t>(w.size())};
      send_frame(fd_, f, w.buffer().data(), pass_fd, deadline);
      wire::Frame rf{};
      const char* body = nullptr;
      int junk = -1;
      if (!reader_.next(fd_, &rf, &body, &junk, deadline, -1, /*wait_first=*/true))
        throw ChannelFailure{Status::kRemote, "the server closed the connection (did it exit?)", true};
      reply_started = true;
      Reply r;
      r.fd.reset(junk);
      r.status = static_cast<Status>(rf.status);
      r.payload.assign(body, body + rf.length);
      if (rf.id != id) {
        // The server ends a connection it will not serve (another user, a broken frame) with
        // an unsolicited error reply (id 0).
        const std::string text(r.payload.begin(), r.payload.end());
        throw ChannelFailure{
            rf.status != 0 ? r.status : Status::kRemote,
            rf.id == 0 && !text.empty() ? text : format("reply %" PRIu64 " to request %" PRIu64, rf.id, id), false};
      }
      return r;
    } catch (const Error& e) {
      const bool gone = e.status() == Status::kRemote || e.status() == Status::kSystem;
      reply_started = reply_started || reader_.buffered() > 0;  // part of the reply came
      throw ChannelFailure{gone ? Status::kRemote : e.status(), e.what(), !reply_started && gone};
    }
  }

  void register_on_connection_locked(uintptr_t base, Region& reg) {
    wire::Writer w;
    w.put<uint64_t>(base);
    w.put<uint64_t>(reg.size);
    w.put<uint64_t>(reg.fd_offset);
    Reply r;
    try {
      r = exchange_locked(wire::Op::kRegister, w, reg.fd);
    } catch (const ChannelFailure& f) {
      disconnect_locked();
      raise_channel_failure(f);
    }
    if (r.status != Status::kOk)
      raise(r.status, "register_memory(0x%" PRIxPTR ", %" PRIu64 "): UMBP per-host server at %s: %s", base, reg.size,
            address_.c_str(), std::string(r.payload.begin(), r.payload.end()).c_str());
    wire::Reader rd(r.payload.data(), r.payload.size());
    reg.id = rd.get<uint32_t>();
  }

  void disconnect_locked() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    reader_.reset();
    ssd_index_.reset();  // a restarted server has a new one
    for (auto& [base, r] : regions_) r.id = 0;
  }

  // Connects (starting the server when auto_start says so), checks it with a Ping, and hands
  // every registered region over again.
  void connect_locked() {
    int fd = connect_unix(path_);
    int err = errno;
    if (fd < 0 && err == EAGAIN)
      raise(Status::kTimeout,
            "UMBP per-host server at %s accepts no connection (its backlog is full: stopped or "
            "overloaded)",
            address_.c_str());
    if (fd < 0 && config_.standalone_process->auto_start) {
      fd = start_server_and_connect();
      err = errno;
    }
    if (fd < 0)
      raise(Status::kRemote, "no UMBP per-host server answers at %s: %s%s", address_.c_str(), std::strerror(err),
            config_.standalone_process->auto_start
                ? ""
                : " (start one with `mori umbp-server --address ...`, or set standalone_process.auto_start)");
    fd_ = fd;
    wire::Writer none;
    Reply r;
    try {
      r = exchange_locked(wire::Op::kPing, none, -1);
    } catch (const ChannelFailure& f) {
      disconnect_locked();
      raise_channel_failure(f);
    }
    if (r.status != Status::kOk) {
      disconnect_locked();
      raise(r.status, "UMBP per-host server at %s: %s", address_.c_str(),
            std::string(r.payload.begin(), r.payload.end()).c_str());
    }
    wire::Reader rd(r.payload.data(), r.payload.size());
    const bool ready = rd.get<uint8_t>() != 0;
    rd.get<uint32_t>();  // the server's store: local (a distributed one in part 2)
    server_pid_ = static_cast<pid_t>(rd.get<uint64_t>());
    if (!ready) {
      disconnect_locked();
      raise(Status::kRemote, "UMBP per-host server at %s is not ready", address_.c_str());
    }
    try {
      attach_ssd_index_locked();
    } catch (const ChannelFailure& f) {
      disconnect_locked();
      raise_channel_failure(f);
    }
    for (auto& [base, reg] : regions_) register_on_connection_locked(base, reg);
  }

  std::vector<std::string> server_argv() const {
    std::vector<std::string> argv;
    if (!program_.empty()) {
      argv.push_back(program_);
    } else {
      argv = default_server_command();
      if (argv.empty())
        raise(Status::kUnavailable,
              "standalone_process.auto_start: no server program to start; set UMBP_STANDALONE_BIN (e.g. to the "
              "`mori` launcher's umbp-server, or a script running `python -m mori.umbp.server`)");
    }
    const Config& c = config_;
    for (const std::string& a :
         {std::string("--address"), address_, std::string("--dram-capacity"), std::to_string(c.dram.capacity_bytes)})
      argv.push_back(a);
    if (c.ssd.enabled) {
      for (const std::string& a : {std::string("--ssd-dir"), c.ssd.storage_dir, std::string("--ssd-capacity"),
                                   std::to_string(c.ssd.capacity_bytes)})
        argv.push_back(a);
    } else {
      argv.push_back("--no-ssd");
    }
    return argv;
  }

  // Starts the server program in a session of its own (it outlives this worker and ignores the
  // worker's terminal signals) and connects once it listens. Another worker's server may win the
  // address: ours then exits 0 and we connect to the winner.
  int start_server_and_connect() {
    const std::vector<std::string> argv = server_argv();
    const std::string dir = path_.substr(0, path_.rfind('/'));
    if (!dir.empty() && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      raise_errno("auto_start: mkdir %s", dir.c_str());
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // The server outlives this worker: it must not hold the worker's output pipes open.
    const std::string log_path = path_ + ".log";
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
      raise(Status::kSystem, "standalone_process.auto_start: cannot start %s: %s", argv[0].c_str(), std::strerror(rc));
    MORI_LOG(kInfo, kSubsys, "auto-started the UMBP per-host server for %s (pid %d: %s; log %s)", address_.c_str(),
             static_cast<int>(pid), argv[0].c_str(), log_path.c_str());
    const double deadline = net::now() + config_.standalone_process->startup_timeout_ms / 1000.0;
    bool child_running = true;
    int fd = -1;
    while (true) {
      fd = connect_unix(path_);
      if (fd >= 0) break;
      const int err = errno;
      if (child_running) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          child_running = false;
          // Exit 0: another server holds the address (we connect to it). Else it failed.
          if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            raise(Status::kRemote,
                  "standalone_process.auto_start: the server started for %s (%s) exited with %s %d (its log: %s)",
                  address_.c_str(), argv[0].c_str(), WIFEXITED(status) ? "status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log_path.c_str());
        }
      }
      if (net::now() > deadline) {
        if (child_running) ::kill(pid, SIGTERM);
        raise(Status::kTimeout,
              "standalone_process.auto_start: no UMBP per-host server answered at %s within %d ms (%s)",
              address_.c_str(), config_.standalone_process->startup_timeout_ms, std::strerror(err));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (child_running) std::thread([pid] { ::waitpid(pid, nullptr, 0); }).detach();  // no zombie left behind
    return fd;
  }

  const Config config_;
  std::string address_, path_, program_;
  int64_t call_timeout_ms_ = 30000;
  mutable std::mutex mu_;
  int fd_ = -1;
  FrameReader reader_;  // fd_'s replies
  pid_t server_pid_ = 0;
  uint64_t next_id_ = 1;
  std::map<uintptr_t, Region> regions_;  // by the worker's base address
  // UMBP_SERVER_DIRECT_READS: the server's shared SSD index, where its segment files are, and
  // those opened so far (all under mu_).
  bool direct_reads_ = false;
  std::unique_ptr<SsdSharedIndex> ssd_index_;
  std::string ssd_dir_;
  uint64_t dropped_seen_ = 0;
  bool warned_no_access_ = false;  // the segment files are not this process's to read: said once
  std::map<uint64_t, SegmentFiles> segment_files_;
  std::unique_ptr<ssd::ReadEngine> ssd_reader_;
  static constexpr size_t kMaxOpenSegments = 64;
  static constexpr size_t kDirectReadDepth = 64;  // reads in flight at once (io_uring)
};

}  // namespace

void set_default_server_command(std::vector<std::string> argv) {
  std::lock_guard<std::mutex> lock(g_command_mu);
  g_default_command = std::move(argv);
}

std::vector<std::string> default_server_command() {
  std::lock_guard<std::mutex> lock(g_command_mu);
  return g_default_command;
}

std::unique_ptr<Client> make_standalone_process_client(const Config& config) {
  MORI_CHECK_ARG(config.standalone_process.has_value(),
                 "standalone_process must be set for the per-host server client");
  return std::make_unique<StandaloneProcessClient>(config);
}

}  // namespace mori::umbp
