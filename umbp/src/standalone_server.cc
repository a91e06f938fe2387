// SPDX-License-Identifier: MIT
#include "src/standalone_server.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "mori/core/acceptor.h"
#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "mori/io/direct_copy.h"
#include "src/clients.h"
#include "src/local_client.h"
#include "src/ssd_shared_index.h"
#include "src/unix_channel.h"

namespace mori::umbp {
namespace {

constexpr const char* kSubsys = "UMBP";
constexpr double kPayloadTimeoutS = 30;  // a frame's payload must follow its header within this
constexpr double kReplyTimeoutS = 30;    // a worker that stops reading its replies is cut off
constexpr size_t kMaxRegionsPerWorker = 4096;
constexpr size_t kMaxDirectBytes = size_t{1} << 30;  // staging for unregistered memory, per request
// Sizes the shared SSD index: room for the SSD's capacity in values of this size (a KV page of a
// few layers; smaller values fill it sooner, and the keys that find no slot are asked of the server).
constexpr uint64_t kTypicalValueBytes = uint64_t{64} << 10;

// A worker buffer mapped into the server (MAP_SHARED of the worker's memfd).
struct MappedRegion {
  uint64_t worker_base = 0;
  uint64_t size = 0;
  void* map = nullptr;
  size_t map_len = 0;
  char* data = nullptr;  // worker_base's byte in the mapping
};

// Where one item's bytes are on the server's side.
struct ItemRef {
  std::string key;
  uint32_t region = 0;
  uint64_t offset = 0;  // in the region, or the worker's address when region == kUnregistered
  uint64_t size = 0;
  int32_t depth = -1;
  char* at = nullptr;  // resolved: mapping or staging
};

std::string hostname() {
  char h[256] = {};
  if (::gethostname(h, sizeof(h) - 1) != 0 || !h[0]) return "localhost";
  return h;
}

void make_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) raise_errno("mkdir %s", dir.c_str());
}

std::vector<std::string> read_keys(wire::Reader& r) {
  const uint32_t n = r.get_count(wire::kMaxBatch, sizeof(uint32_t));
  std::vector<std::string> keys;
  keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) keys.push_back(r.get_string(kMaxKeyBytes));
  return keys;
}

TierType read_tier(wire::Reader& r) {
  const uint32_t t = r.get<uint32_t>();
  MORI_CHECK_ARG(t <= static_cast<uint32_t>(TierType::SSD), "tier: %u is not a UMBPTierType", t);
  return static_cast<TierType>(t);
}

void put_bools(wire::Writer& w, const std::vector<bool>& v) {
  for (bool b : v) w.put<uint8_t>(b ? 1 : 0);
}

}  // namespace

// One worker's connection: who it is and the regions it handed over. Used by its own thread only.
struct StandaloneServer::Session {
  PeerCred cred;
  std::string who;  // "pid N" for log lines and errors
  std::map<uint32_t, MappedRegion> regions;
  uint32_t next_region = 1;

  ~Session() {
    for (auto& [id, r] : regions) ::munmap(r.map, r.map_len);
  }

  const MappedRegion& region(uint32_t id) const {
    auto it = regions.find(id);
    MORI_CHECK_ARG(it != regions.end(), "region %u is not registered on this connection", id);
    return it->second;
  }
};

std::string default_server_address(const std::string& node_id) {
  std::string dir;
  // XDG_RUNTIME_DIR is the OS's per-user runtime directory (a session setting, not MORI's).
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && xdg[0] == '/')
    dir = std::string(xdg) + "/mori-umbp";
  else
    dir = format("/tmp/mori-umbp-%u", static_cast<unsigned>(::getuid()));
  std::string node = node_id.empty() ? hostname() : node_id;
  for (char& c : node)
    if (c == '/' || c == ':' || c == ' ') c = '_';
  return "unix://" + dir + "/" + node + ".sock";
}

std::unique_ptr<StandaloneServer> StandaloneServer::start(ServerOptions options) {
  MORI_CHECK_ARG(!options.config.standalone_process,
                 "the per-host server's config must not itself name a per-host server (standalone_process)");
  MORI_CHECK_ARG(!options.config.distributed, "the per-host server wraps the local store (distributed is unset)");
  MORI_CHECK_ARG(options.idle_exit_timeout_ms >= 0, "idle_exit_timeout_ms must be >= 0 (got %" PRId64 ")",
                 options.idle_exit_timeout_ms);
  // Every rank of the host shares this one store: MORI's shared-SSD leader/follower roles,
  // which let ranks with separate local stores share one SSD directory, do not apply.
  if (options.config.resolved_role() != Role::Standalone)
    MORI_LOG(kInfo, kSubsys, "per-host server: the store runs as Standalone (the ranks share it; UMBP_ROLE ignored)");
  options.config.role = Role::Standalone;
  options.config.follower_mode = false;
  options.config.force_ssd_copy_on_write = false;
  std::unique_ptr<StandaloneServer> srv(new StandaloneServer());
  srv->address_ = options.address.empty() ? default_server_address() : options.address;
  srv->path_ = unix_socket_path(srv->address_);
  srv->idle_exit_timeout_ms_ = options.idle_exit_timeout_ms;
  const std::string dir = srv->path_.substr(0, srv->path_.rfind('/'));
  if (!dir.empty()) make_private_dir(dir);

  // The lock decides which of several servers started for one address serves it.
  const std::string lock_path = srv->path_ + ".lock";
  srv->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (srv->lock_fd_ < 0) raise_errno("open %s", lock_path.c_str());
  if (::flock(srv->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(srv->lock_fd_);
    srv->lock_fd_ = -1;
    if (err == EWOULDBLOCK) {
      MORI_LOG(kInfo, kSubsys, "per-host server: %s is already served by another process", srv->address_.c_str());
      return nullptr;
    }
    errno = err;
    raise_errno("flock %s", lock_path.c_str());
  }

  srv->config_ = options.config;
  srv->store_ = std::make_unique<LocalClient>(options.config);
  // Ranks read SSD-only values themselves where the SSD tier's files are theirs to open too.
  if (options.config.ssd.enabled && env::current().umbp_server_direct_reads) {
    srv->ssd_index_ = SsdSharedIndex::create(options.config.ssd.capacity_bytes / kTypicalValueBytes);
    srv->store_->set_tier_events(srv->ssd_index_.get());
  }
  const int listen_fd = listen_unix(srv->path_);
  srv->idle_since_ = net::now();
  net::Acceptor::Options ao;
  ao.service = "UMBP per-host server";
  ao.subsys = kSubsys;
  srv->acceptor_ =
      std::make_unique<net::Acceptor>(UniqueFd(listen_fd), ao, [s = srv.get()](net::Connection& c) { s->serve(c); });
  MORI_LOG(kInfo, kSubsys, "per-host server listening at %s (pid %d)", srv->address_.c_str(),
           static_cast<int>(::getpid()));
  return srv;
}

StandaloneServer::~StandaloneServer() {
  stop();
  if (store_) store_->set_tier_events(nullptr);  // the index goes first
}

void StandaloneServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  cv_.notify_all();
  if (acceptor_) acceptor_->stop();
  // The socket goes before the lock: a successor that takes the lock binds a fresh one.
  if (lock_fd_ >= 0) {
    ::unlink(path_.c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
}

bool StandaloneServer::wait(double timeout_s) {
  const double until = timeout_s < 0 ? -1 : net::now() + timeout_s;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    double step = 0.1;
    const double t = net::now();
    if (idle_exit_timeout_ms_ > 0 && counters_.active == 0 &&
        t - idle_since_ >= static_cast<double>(idle_exit_timeout_ms_) / 1000) {
      MORI_LOG(kInfo, kSubsys, "per-host server %s: no worker for %" PRId64 " ms, exiting", address_.c_str(),
               idle_exit_timeout_ms_);
      lock.unlock();
      stop();
      return true;
    }
    if (until >= 0) {
      if (t >= until) return false;
      step = std::min(step, until - t);
    }
    cv_.wait_for(lock, std::chrono::duration<double>(step));
  }
  return true;
}

ClientStats StandaloneServer::store_stats() const { return store_->stats(); }

ServerCounters StandaloneServer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void StandaloneServer::connection_ended() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--counters_.active == 0) idle_since_ = net::now();
}

void StandaloneServer::serve(net::Connection& conn) {
  const int fd = conn.fd();
  Session s;
  s.cred = peer_cred(fd);
  s.who = format("pid %d", static_cast<int>(s.cred.pid));
  if (s.cred.uid != ::getuid()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.refused;
    }
    MORI_LOG(kWarn, kSubsys, "per-host server %s: refused a connection of uid %u (pid %d): only uid %u may connect",
             address_.c_str(), static_cast<unsigned>(s.cred.uid), static_cast<int>(s.cred.pid),
             static_cast<unsigned>(::getuid()));
    const std::string msg = format("refused: the UMBP per-host server at %s serves uid %u only", address_.c_str(),
                                   static_cast<unsigned>(::getuid()));
    wire::Frame f{
        wire::kMagic, wire::kVersion, 0, 0, static_cast<uint32_t>(Status::kRemote), static_cast<uint32_t>(msg.size())};
    try {
      send_frame(fd, f, msg.data(), -1, net::now() + 1);
    } catch (const Error&) {
    }
    return;
  }
  if (!conn.admit()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.connections;
    ++counters_.active;
  }
  struct Ended {
    StandaloneServer* srv;
    Session* s;
    ~Ended() {
      {
        std::lock_guard<std::mutex> lock(srv->mu_);
        srv->counters_.regions -= s->regions.size();
      }
      srv->connection_ended();
    }
  } ended{this, &s};

  // UMBP_SERVER_POLL_US: the rank's next request is polled for before this thread sleeps.
  FrameReader reader(std::chrono::microseconds(std::clamp<int64_t>(env::current().umbp_server_poll_us, 0, 1000000)));
  while (true) {
    wire::Frame f{};
    const char* payload = nullptr;
    int passed = -1;
    bool framing_ok = true;
    std::string framing_error;
    try {
      // Between requests there is no deadline; a payload must follow its header.
      if (!reader.next(fd, &f, &payload, &passed, -1, kPayloadTimeoutS, /*wait_first=*/true))
        return;  // the worker closed: its regions go with it
    } catch (const Error& e) {
      if (e.status() != Status::kInvalidArgument) {
        if (reader.buffered() == 0) return;  // reset, or the server stopping
        throw;                               // gone or stalled in the middle of a request
      }
      framing_ok = false;
      framing_error = e.what();
    }
    if (!framing_ok) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.bad_frames;
      }
      MORI_LOG(kWarn, kSubsys, "per-host server %s: %s sent a bad frame (%s); closing its connection", address_.c_str(),
               s.who.c_str(), framing_error.c_str());
      wire::Frame r{wire::kMagic,
                    wire::kVersion,
                    0,
                    0,
                    static_cast<uint32_t>(Status::kInvalidArgument),
                    static_cast<uint32_t>(framing_error.size())};
      try {
        send_frame(fd, r, framing_error.data(), -1, net::now() + 1);
      } catch (const Error&) {
      }
      return;
    }
    struct FdGuard {
      int fd;
      ~FdGuard() {
        if (fd >= 0) ::close(fd);
      }
    } passed_guard{passed};

    wire::Writer reply;
    Status status = Status::kOk;
    std::string error;
    int reply_fd = -1;  // ours, lent to the reply
    try {
      dispatch(s, f.op, payload, f.length, passed, reply, &reply_fd);
    } catch (const Error& e) {
      status = e.status();
      error = e.what();
    } catch (const std::bad_alloc&) {
      status = Status::kOutOfMemory;
      error = "the per-host server ran out of memory serving this request";
    } catch (const std::exception& e) {
      status = Status::kInternal;
      error = e.what();
    }
    if (f.op == static_cast<uint16_t>(wire::Op::kDirectReads)) {  // one-way: no reply
      if (status != Status::kOk)
        MORI_LOG(kDebug, kSubsys, "per-host server %s: %s's direct-read notice: %s", address_.c_str(), s.who.c_str(),
                 error.c_str());
      continue;
    }
    if (status != Status::kOk) {
      reply_fd = -1;
      if (error.size() > wire::kMaxMessage) error.resize(wire::kMaxMessage);
      reply = wire::Writer();
      reply.put_bytes(error.data(), error.size());
    }
    if (f.op == static_cast<uint16_t>(wire::Op::kRegister) && status == Status::kOk) passed_guard.fd = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.requests;
      counters_.errors += status != Status::kOk;
    }
    wire::Frame r{
        wire::kMagic, wire::kVersion, f.op, f.id, static_cast<uint32_t>(status), static_cast<uint32_t>(reply.size())};
    send_frame(fd, r, reply.buffer().data(), reply_fd, net::now() + kReplyTimeoutS);
  }
}

void StandaloneServer::dispatch(Session& s, uint16_t op_code, const char* payload, size_t length, int passed_fd,
                                wire::Writer& reply, int* reply_fd) {
  wire::Reader r(payload, length);
  const auto op = static_cast<wire::Op>(op_code);
  switch (op) {
    case wire::Op::kPing: {
      r.expect_end();
      reply.put<uint8_t>(1);
      reply.put<uint32_t>(static_cast<uint32_t>(store_->deployment_mode()));
      reply.put<uint64_t>(static_cast<uint64_t>(::getpid()));
      return;
    }
    case wire::Op::kRegister: {
      const uint64_t base = r.get<uint64_t>(), size = r.get<uint64_t>(), fd_offset = r.get<uint64_t>();
      r.expect_end();
      MORI_CHECK_ARG(passed_fd >= 0, "register_memory: no memory file descriptor came with the request");
      MORI_CHECK_ARG(size > 0, "register_memory: size must be > 0");
      MORI_CHECK_ARG(s.regions.size() < kMaxRegionsPerWorker, "register_memory: at most %zu regions per worker",
                     kMaxRegionsPerWorker);
      // A file that later shrank under the mapping would fault the server: forbid it where the
      // file allows seals (core's SharedSegment, so UMBPHostMemAllocator's buffers, is sealed at its
      // size already), and only then read the size the bounds are checked against.
      ::fcntl(passed_fd, F_ADD_SEALS, F_SEAL_SHRINK);
      struct stat st{};
      if (::fstat(passed_fd, &st) != 0) raise_errno("register_memory: fstat of the worker's memory file");
      MORI_CHECK_ARG(S_ISREG(st.st_mode), "register_memory: the descriptor is not a memory file");
      MORI_CHECK_ARG(
          fd_offset <= static_cast<uint64_t>(st.st_size) && size <= static_cast<uint64_t>(st.st_size) - fd_offset,
          "register_memory: [offset %" PRIu64 ", +%" PRIu64 ") runs past the memory file's %" PRId64 " bytes",
          fd_offset, size, static_cast<int64_t>(st.st_size));
      // Huge-page memory files (hugetlbfs) map only at multiples of their page: st_blksize.
      uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
      const auto blk = static_cast<uint64_t>(st.st_blksize);
      if (blk > page && (blk & (blk - 1)) == 0) page = blk;
      const uint64_t map_off = fd_offset & ~(page - 1), lead = fd_offset - map_off;
      MappedRegion m;
      m.worker_base = base;
      m.size = size;
      m.map_len = lead + size;
      m.map = ::mmap(nullptr, m.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, passed_fd, static_cast<off_t>(map_off));
      if (m.map == MAP_FAILED) raise_errno("register_memory: mmap of the worker's memory file");
      m.data = static_cast<char*>(m.map) + lead;
      const uint32_t id = s.next_region++;
      s.regions.emplace(id, m);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.regions;
      }
      MORI_LOG(kDebug, kSubsys, "%s registered region %u: 0x%" PRIx64 " +%" PRIu64, s.who.c_str(), id, base, size);
      reply.put<uint32_t>(id);
      return;
    }
    case wire::Op::kDeregister: {
      const uint32_t id = r.get<uint32_t>();
      r.expect_end();
      auto it = s.regions.find(id);
      MORI_CHECK_ARG(it != s.regions.end(), "deregister_memory: region %u is not registered", id);
      ::munmap(it->second.map, it->second.map_len);
      s.regions.erase(it);
      std::lock_guard<std::mutex> lock(mu_);
      --counters_.regions;
      return;
    }
    case wire::Op::kBatchPut:
    case wire::Op::kBatchGet: {
      const bool put = op == wire::Op::kBatchPut;
      const bool with_depth = put && r.get<uint8_t>() != 0;
      const size_t min_item = 4 + 4 + 8 + 8 + (with_depth ? 4 : 0);
      const uint32_t n = r.get_count(wire::kMaxBatch, min_item);
      std::vector<ItemRef> items(n);
      for (uint32_t i = 0; i < n; ++i) {
        ItemRef& it = items[i];
        it.key = r.get_string(kMaxKeyBytes);
        it.region = r.get<uint32_t>();
        it.offset = r.get<uint64_t>();
        it.size = r.get<uint64_t>();
        if (with_depth) it.depth = r.get<int32_t>();
      }
      r.expect_end();
      // Resolve and bounds-check everything before a byte moves.
      size_t direct_bytes = 0;
      for (uint32_t i = 0; i < n; ++i) {
        ItemRef& it = items[i];
        MORI_CHECK_ARG(it.size > 0, "sizes[%u] must be > 0", i);
        if (it.region == wire::kUnregistered) {
          MORI_CHECK_ARG(it.size <= kMaxDirectBytes - direct_bytes,
                         "%s: more than %zu bytes of unregistered memory in one request; register the buffer "
                         "(register_memory) so the server maps it",
                         put ? "srcs" : "dsts", kMaxDirectBytes);
          direct_bytes += it.size;
          continue;
        }
        const MappedRegion& m = s.region(it.region);
        MORI_CHECK_ARG(it.offset <= m.size && it.size <= m.size - it.offset,
                       "%s[%u]: [offset %" PRIu64 ", +%" PRIu64 ") is outside registered region %u (%" PRIu64
                       " bytes at 0x%" PRIx64 ")",
                       put ? "srcs" : "dsts", i, it.offset, it.size, it.region, m.size, m.worker_base);
        it.at = m.data + it.offset;
      }
      std::vector<char> staging(direct_bytes);
      std::vector<io::DirectSegment> direct;
      for (size_t i = 0, at = 0; i < items.size(); ++i) {
        if (items[i].region != wire::kUnregistered) continue;
        items[i].at = staging.data() + at;
        direct.push_back({items[i].at, items[i].offset, items[i].size});
        at += items[i].size;
      }
      std::vector<std::string> keys(n);
      std::vector<uintptr_t> ptrs(n);
      std::vector<size_t> sizes(n);
      for (uint32_t i = 0; i < n; ++i) {
        keys[i] = std::move(items[i].key);
        ptrs[i] = reinterpret_cast<uintptr_t>(items[i].at);
        sizes[i] = items[i].size;
      }
      auto direct_failed = [&](const std::string& why) {
        raise(Status::kInvalidArgument,
              "%s: unregistered memory of worker %s is out of the server's reach (%s); register the buffer "
              "(register_memory) with memory from UMBPHostMemAllocator(AnonymousShm)",
              put ? "srcs" : "dsts", s.who.c_str(), why.c_str());
      };
      if (put) {
        if (!direct.empty()) {
          const std::string err = io::direct_copy(true, s.cred.pid, direct.data(), direct.size());
          if (!err.empty()) direct_failed(err);
        }
        std::vector<int> depths;
        if (with_depth) {
          depths.resize(n);
          for (uint32_t i = 0; i < n; ++i) depths[i] = items[i].depth;
        }
        put_bools(reply, store_->batch_put(keys, ptrs, sizes, depths));
        return;
      }
      std::vector<bool> ok = store_->batch_get(keys, ptrs, sizes);
      if (!direct.empty()) {
        std::vector<io::DirectSegment> hits;
        for (size_t i = 0, d = 0; i < items.size(); ++i) {
          if (items[i].region != wire::kUnregistered) continue;
          if (ok[i]) hits.push_back(direct[d]);
          ++d;
        }
        const std::string err = io::direct_copy(false, s.cred.pid, hits.data(), hits.size());
        if (!err.empty()) direct_failed(err);
      }
      put_bools(reply, ok);
      return;
    }
    case wire::Op::kBatchExists: {
      auto keys = read_keys(r);
      r.expect_end();
      put_bools(reply, store_->batch_exists(keys));
      return;
    }
    case wire::Op::kBatchExistsConsecutive: {
      auto keys = read_keys(r);
      r.expect_end();
      reply.put<uint64_t>(store_->batch_exists_consecutive(keys));
      return;
    }
    case wire::Op::kClear:
      r.expect_end();
      reply.put<uint8_t>(store_->clear());
      return;
    case wire::Op::kFlush:
      r.expect_end();
      reply.put<uint8_t>(store_->flush());
      return;
    case wire::Op::kStats: {
      r.expect_end();
      static_assert(sizeof(ClientStats) % sizeof(uint64_t) == 0 && std::is_trivially_copyable_v<ClientStats>);
      const ClientStats st = store_->stats();
      reply.put_bytes(&st, sizeof(st));
      return;
    }
    case wire::Op::kReportExternalKv:
    case wire::Op::kRevokeExternalKv: {
      const TierType tier = read_tier(r);
      auto hashes = read_keys(r);
      r.expect_end();
      reply.put<uint8_t>(op == wire::Op::kReportExternalKv ? store_->report_external_kv_blocks(hashes, tier)
                                                           : store_->revoke_external_kv_blocks(hashes, tier));
      return;
    }
    case wire::Op::kRevokeAllExternalKv: {
      const TierType tier = read_tier(r);
      r.expect_end();
      reply.put<uint8_t>(store_->revoke_all_external_kv_blocks_at_tier(tier));
      return;
    }
    case wire::Op::kMatchExternalKv: {
      const bool count_as_hit = r.get<uint8_t>() != 0;
      auto hashes = read_keys(r);
      r.expect_end();
      const auto matches = store_->match_external_kv(hashes, count_as_hit);
      reply.put<uint32_t>(static_cast<uint32_t>(matches.size()));
      for (const auto& m : matches) {
        reply.put_string(m.node_id);
        reply.put_string(m.peer_address);
        reply.put<uint32_t>(static_cast<uint32_t>(m.hashes_by_tier.size()));
        for (const auto& [tier, hs] : m.hashes_by_tier) {
          reply.put<uint32_t>(static_cast<uint32_t>(tier));
          reply.put<uint32_t>(static_cast<uint32_t>(hs.size()));
          for (const auto& h : hs) reply.put_string(h);
        }
      }
      return;
    }
    case wire::Op::kSsdIndex: {
      r.expect_end();
      reply.put<uint8_t>(ssd_index_ ? 1 : 0);
      if (!ssd_index_) return;
      // Absolute: the ranks open the segment files by path, from their own working directories.
      reply.put_string(std::filesystem::absolute(config_.ssd.storage_dir).string());
      *reply_fd = ssd_index_->fd();
      return;
    }
    case wire::Op::kDirectReads: {
      const uint32_t n = r.get_count(wire::kMaxBatch, 4 + 4 + 8 + 8 + 8);
      uint64_t bytes = 0;
      std::vector<char> ok;
      for (uint32_t i = 0; i < n; ++i) {
        const std::string key = r.get_string(kMaxKeyBytes);
        const uint32_t region = r.get<uint32_t>();
        const uint64_t offset = r.get<uint64_t>(), size = r.get<uint64_t>(), checksum = r.get<uint64_t>();
        bytes += size;
        if (region == wire::kUnregistered) continue;  // counted; out of reach for promote on read
        const MappedRegion& m = s.region(region);
        MORI_CHECK_ARG(offset <= m.size && size <= m.size - offset,
                       "direct reads[%u]: [offset %" PRIu64 ", +%" PRIu64 ") is outside region %u", i, offset, size,
                       region);
        store_->admit_read(key, m.data + offset, size, checksum);
      }
      r.expect_end();
      store_->count_direct_reads(n, bytes);
      std::lock_guard<std::mutex> lock(mu_);
      counters_.direct_reads += n;
      return;
    }
    case wire::Op::kExternalKvHitCounts: {
      auto hashes = read_keys(r);
      r.expect_end();
      const auto counts = store_->get_external_kv_hit_counts(hashes);
      reply.put<uint32_t>(static_cast<uint32_t>(counts.size()));
      for (const auto& c : counts) {
        reply.put_string(c.hash);
        reply.put<uint64_t>(c.hit_count_total);
      }
      return;
    }
  }
  raise(Status::kInvalidArgument, "unknown request op %u", op_code);
}

}  // namespace mori::umbp
