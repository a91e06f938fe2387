// SPDX-License-Identifier: MIT
// MORI-IO's tcp backend from several threads at once, in C++ alone, for ThreadSanitizer
// (scripts/tsan.sh builds libmori and this with -fsanitize=thread) and as a plain stress run.
//
// Two engines in one process, over sockets (tcp, ucx) or the same-host direct path (cma, whose
// copies the initiator's threads make). Every worker thread owns
// a slice of the initiator's source and destination buffers and of the target's region, and
// loops: fresh bytes into its source slice, a write of a random size (8 B up to past the
// striping size) as one transfer or a batch of segments, a read back into its destination
// slice, and a byte-for-byte check; for some writes the target pops their inbound status. How
// each status is waited for varies (Wait, WaitFor in short steps, polling Code(), or another
// thread's Wait through a hand-off queue), so that waiters reading their lane's replies, the
// parked receiving thread and pollers all meet.
// A further thread registers, writes to and deregisters a target region over and over.
// Then the target engine is dropped while transfers are in flight: every status must settle
// (no hang), and the initiator must keep working against a new target; three times over.
//
//   io_thread_stress [seconds] [threads] [tcp|cma|ucx]
// Exit 0: every check held; 1: one failed; 2: bad arguments; 3: the backend cannot be made here.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mori/io/engine.h"

using namespace mori::io;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<int> g_failures{0};
constexpr char kInitiator[] = "stress-initiator";

void fail(const std::string& what) {
  if (g_failures.fetch_add(1) < 20) std::fprintf(stderr, "io_thread_stress: %s\n", what.c_str());
}

// Statuses handed to the waiter thread, which waits for them as another thread would.
class HandOff {
 public:
  void push(TransferStatus st, std::shared_ptr<std::atomic<bool>> done) {
    std::lock_guard<std::mutex> lk(mu_);
    q_.emplace_back(std::move(st), std::move(done));
    cv_.notify_one();
  }
  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  void run() {
    for (;;) {
      std::pair<TransferStatus, std::shared_ptr<std::atomic<bool>>> item;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !q_.empty(); });
        if (q_.empty()) return;
        item = std::move(q_.front());
        q_.pop_front();
      }
      item.first.Wait();
      item.second->store(true, std::memory_order_release);
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<TransferStatus, std::shared_ptr<std::atomic<bool>>>> q_;
  bool stopping_ = false;
};

// Waits for `st` in the way `how` names; false if it did not settle within 30 s.
bool settle(const TransferStatus& st, int how, HandOff& handoff) {
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  switch (how) {
    case 0: st.Wait(); return true;
    case 1:
      while (st.WaitFor(1) == StatusCode::IN_PROGRESS || st.Code() == StatusCode::INIT)
        if (Clock::now() > give_up) return false;
      return true;
    case 2:
      while (st.InProgress() || st.Init()) {
        if (Clock::now() > give_up) return false;
        std::this_thread::yield();
      }
      return true;
    default: {
      auto done = std::make_shared<std::atomic<bool>>(false);
      handoff.push(st, done);
      while (!done->load(std::memory_order_acquire)) {
        if (Clock::now() > give_up) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      return true;
    }
  }
}

struct Pair {
  std::shared_ptr<Engine> initiator, target;
  MemoryDesc src, dst, remote;
};

// "tcp"; "cma", the same-host direct path (the initiator's threads copy with
// process_vm_readv/writev once the target granted access); or "ucx": the RDMA backend (run
// with MORI_IO_RDMA_TRANSPORT=ucx and UCX_TLS=tcp,self where no RDMA device is; MORI_IO_DIRECT=0
// keeps it off the same-host path).
std::string g_backend = "tcp";

std::shared_ptr<Engine> make_engine(const std::string& key) {
  auto e = std::make_shared<Engine>(key, IOEngineConfig{"127.0.0.1", 0});
  if (g_backend == "ucx")
    e->create_rdma_backend(RdmaBackendConfig{});
  else
    e->create_tcp_backend(TcpBackendConfig{0, /*direct=*/g_backend == "cma"});
  return e;
}

// One worker: its slice [base, base + span) of every buffer.
void worker(int id, Pair& p, uint8_t* src, uint8_t* dst, size_t base, size_t span, Clock::time_point end,
            HandOff& handoff, std::atomic<uint64_t>& transfers) {
  std::mt19937_64 rng(0x5eed + id);
  // Sizes around the paths' edges: a header's worth, one loopback segment, the stripe size.
  const size_t sizes[] = {8, 100, 4096, 65536 - 48, 65536 + 8, 200 << 10, 512 << 10};
  uint64_t round = 0;
  while (Clock::now() < end && g_failures.load() == 0) {
    size_t size = std::min(span, sizes[rng() % (sizeof(sizes) / sizeof(sizes[0]))]);
    const int nseg = (rng() % 4 == 0) ? 1 + static_cast<int>(rng() % 8) : 1;
    size = std::max<size_t>(size / nseg, 1) * nseg;
    const size_t seg = size / nseg;
    Segments segs;
    for (int s = 0; s < nseg; ++s) {
      // Segments in a shuffled order: each lands where its offsets say, not in sequence.
      const size_t at = base + static_cast<size_t>((s * 7919 + round) % nseg) * seg;
      segs.local_offsets.push_back(at);
      segs.remote_offsets.push_back(at);
      segs.sizes.push_back(seg);
    }
    for (size_t i = 0; i < size; ++i) src[base + i] = static_cast<uint8_t>(rng());
    std::memset(dst + base, 0, size);
    const int how_w = static_cast<int>(rng() % 4), how_r = static_cast<int>(rng() % 4);
    const uint64_t wuid = p.initiator->allocate_transfer_uid();
    TransferStatus w = p.initiator->transfer(false, p.src, p.remote, segs, wuid);
    if (!settle(w, how_w, handoff)) return fail("worker " + std::to_string(id) + ": a write never settled");
    if (!w.Succeeded()) return fail("worker " + std::to_string(id) + ": write failed: " + w.Message());
    if (rng() % 4 == 0) {
      // The target hears of the write (MORI's inbound status), at once or soon after the reply.
      const auto give_up = Clock::now() + std::chrono::seconds(10);
      std::optional<TransferStatus> in;
      while (!(in = p.target->pop_inbound_transfer_status(kInitiator, wuid)) && Clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (!in || !in->Succeeded())
        return fail("worker " + std::to_string(id) + ": the target never heard of write " + std::to_string(wuid));
    }
    TransferStatus r = p.initiator->transfer(true, p.dst, p.remote, segs, p.initiator->allocate_transfer_uid());
    if (!settle(r, how_r, handoff)) return fail("worker " + std::to_string(id) + ": a read never settled");
    if (!r.Succeeded()) return fail("worker " + std::to_string(id) + ": read failed: " + r.Message());
    if (std::memcmp(src + base, dst + base, size) != 0)
      return fail("worker " + std::to_string(id) + ": read back other bytes than written (" + std::to_string(size) +
                  " B in " + std::to_string(nseg) + " segments)");
    transfers.fetch_add(2, std::memory_order_relaxed);
    ++round;
  }
}

// Registration churn beside the workers: a region of the target is registered, written to,
// and deregistered while the write may still be on its way, over and over. The write either
// lands whole or fails; it never hangs, and the workers' transfers are untouched.
void churn(Pair& p, Clock::time_point end, std::atomic<uint64_t>& rounds) {
  std::vector<uint8_t> src(64 << 10, 0xab);
  const MemoryDesc local =
      p.initiator->register_memory(reinterpret_cast<uint64_t>(src.data()), src.size(), -1, MemoryLocationType::CPU);
  while (Clock::now() < end && g_failures.load() == 0) {
    std::vector<uint8_t> scratch(src.size(), 0);
    const MemoryDesc remote = p.target->register_memory(reinterpret_cast<uint64_t>(scratch.data()), scratch.size(), -1,
                                                        MemoryLocationType::CPU);
    const Segments segs{{0}, {0}, {src.size()}};
    TransferStatus w = p.initiator->transfer(false, local, remote, segs, p.initiator->allocate_transfer_uid());
    if (rounds.load(std::memory_order_relaxed) % 2 == 0) w.WaitFor(1);
    p.target->deregister_memory(remote);  // waits for a write that got in
    if (w.WaitFor(30000) == StatusCode::IN_PROGRESS)
      return fail("churn: a write to a deregistered region never settled");
    if (w.Succeeded() && std::memcmp(scratch.data(), src.data(), src.size()) != 0)
      return fail("churn: a write that succeeded left other bytes");
    rounds.fetch_add(1, std::memory_order_relaxed);
  }
  p.initiator->deregister_memory(local);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 5.0;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 4;
  if (argc > 3) g_backend = argv[3];
  if (seconds <= 0 || threads < 1 || threads > 64 || (g_backend != "tcp" && g_backend != "cma" && g_backend != "ucx")) {
    std::fprintf(stderr, "usage: io_thread_stress [seconds > 0] [threads 1-64] [tcp|cma|ucx]\n");
    return 2;
  }
  const size_t span = 1 << 20;  // each worker's slice
  const size_t bytes = span * static_cast<size_t>(threads);
  std::vector<uint8_t> src(bytes), dst(bytes), region(bytes), region2(bytes);

  Pair p;
  try {
    p.initiator = make_engine(kInitiator);
    p.target = make_engine("stress-target");
  } catch (const std::exception& e) {  // UCX not loadable, say: the caller may skip
    std::fprintf(stderr, "io_thread_stress: no %s backend here: %s\n", g_backend.c_str(), e.what());
    return 3;
  }
  p.initiator->register_remote_engine(p.target->engine_desc());
  p.target->register_remote_engine(p.initiator->engine_desc());
  p.src = p.initiator->register_memory(reinterpret_cast<uint64_t>(src.data()), bytes, -1, MemoryLocationType::CPU);
  p.dst = p.initiator->register_memory(reinterpret_cast<uint64_t>(dst.data()), bytes, -1, MemoryLocationType::CPU);
  p.remote = p.target->register_memory(reinterpret_cast<uint64_t>(region.data()), bytes, -1, MemoryLocationType::CPU);
  if (p.initiator->backend_for(p.src, p.remote).rfind(g_backend, 0) != 0) {
    std::fprintf(stderr, "io_thread_stress: expected the %s backend, got '%s'\n", g_backend.c_str(),
                 p.initiator->backend_for(p.src, p.remote).c_str());
    return 1;
  }

  HandOff handoff;
  std::thread waiter([&] { handoff.run(); });
  std::atomic<uint64_t> transfers{0}, churned{0};
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  {
    std::vector<std::thread> ws;
    for (int i = 0; i < threads; ++i)
      ws.emplace_back(worker, i, std::ref(p), src.data(), dst.data(), span * static_cast<size_t>(i), span, end,
                      std::ref(handoff), std::ref(transfers));
    ws.emplace_back(churn, std::ref(p), end, std::ref(churned));
    for (auto& t : ws) t.join();
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();

  // Three times over, the target goes away with transfers in flight (every one of them settles,
  // failed or not), and the initiator then serves a new target, which the next round drops.
  constexpr int kDrops = 3;
  const Segments big{{0}, {0}, {bytes}};
  int settled_failed = 0;
  for (int round = 0; round < kDrops && g_failures.load() == 0; ++round) {
    std::vector<TransferStatus> inflight;
    for (int i = 0; i < 8; ++i)
      inflight.push_back(p.initiator->transfer(i % 2 == 0, i % 2 == 0 ? p.dst : p.src, p.remote, big,
                                               p.initiator->allocate_transfer_uid()));
    p.target.reset();
    for (auto& st : inflight) {
      if (st.WaitFor(30000) == StatusCode::IN_PROGRESS) fail("a transfer to a dropped target never settled");
      settled_failed += st.Failed() ? 1 : 0;
    }
    p.target = make_engine("stress-target-" + std::to_string(round + 2));
    p.initiator->register_remote_engine(p.target->engine_desc());
    p.target->register_remote_engine(p.initiator->engine_desc());
    p.remote =
        p.target->register_memory(reinterpret_cast<uint64_t>(region2.data()), bytes, -1, MemoryLocationType::CPU);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 31 + 7 * round);
    TransferStatus w = p.initiator->transfer(false, p.src, p.remote, big, p.initiator->allocate_transfer_uid());
    w.Wait();
    if (!w.Succeeded() || std::memcmp(src.data(), region2.data(), bytes) != 0)
      fail("a write to a new target after the last was dropped: " + w.Message());
  }

  handoff.stop();
  waiter.join();
  std::printf(
      "io_thread_stress: %d threads, %llu transfers checked in %.1f s, %llu regions registered and dropped "
      "under a write; %d of %d in flight to dropped targets failed, the rest completed; %s\n",
      threads, static_cast<unsigned long long>(transfers.load()), took, static_cast<unsigned long long>(churned.load()),
      settled_failed, 8 * kDrops, g_failures.load() == 0 ? "ok" : "FAILED");
  return g_failures.load() == 0 ? 0 : 1;
}
