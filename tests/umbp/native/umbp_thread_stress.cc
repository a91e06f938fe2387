// SPDX-License-Identifier: MIT
// MORI-UMBP's local store (DRAM tier over an SSD tier, the asynchronous copy pipeline) from
// several threads at once, in C++ alone, for ThreadSanitizer (scripts/tsan.sh) and as a plain
// stress run. The DRAM tier is a few MiB, so puts keep evicting to the SSD tier and gets keep
// reading (and promoting) from it while other threads put.
//
// Every value is a function of its key, so whichever thread reads a key, a get that succeeds
// must return exactly those bytes. Worker threads put fresh keys of 1 KiB to 192 KiB (single and
// batched), get back their own recent keys and random keys of the others, and ask whether keys
// exist; one thread flushes now and then. Gets that miss are allowed (a value may have been
// evicted from both tiers); wrong bytes, a failed put of a fitting value, or a hang are not.
//
// "server" runs the same store in the per-host server (StandaloneServer, in this process, on a
// Unix socket in <ssd dir>), and the threads reach it through two clients of that server, half
// of them on each: the server's connections and the clients' shared use are what is exercised.
//
//   umbp_thread_stress <ssd dir> [seconds] [threads] [local|server]
// Exit 0: every check held; 1: one failed; 2: bad arguments.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mori/umbp/client.h"
#include "mori/umbp/config.h"
#include "src/standalone_server.h"

using namespace mori::umbp;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<int> g_failures{0};

void fail(const std::string& what) {
  if (g_failures.fetch_add(1) < 20) std::fprintf(stderr, "umbp_thread_stress: %s\n", what.c_str());
}

std::string key_of(int thread, uint64_t i) { return "t" + std::to_string(thread) + "/k" + std::to_string(i); }

// The value of a key: its size and bytes follow from the key alone.
size_t size_of(const std::string& key) {
  const size_t h = std::hash<std::string>{}(key);
  const size_t sizes[] = {1024, 4096, 16384, 65536, 196608};
  return sizes[h % 5] + (h >> 8) % 64;
}

void fill(const std::string& key, std::vector<uint8_t>& out) {
  out.resize(size_of(key));
  std::mt19937_64 rng(std::hash<std::string>{}(key));
  for (size_t i = 0; i < out.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, out.size() - i));
  }
}

void worker(int id, int threads, Client& store, Clock::time_point end, std::vector<std::atomic<uint64_t>>& made,
            std::atomic<uint64_t>& checked) {
  std::mt19937_64 rng(0xbeef + id);
  std::vector<uint8_t> want, got;
  uint64_t next = 0;
  while (Clock::now() < end && g_failures.load() == 0) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 3) {  // a put of a fresh key of ours
      const std::string key = key_of(id, next);
      fill(key, want);
      if (!store.put(key, want.data(), want.size())) return fail("put of " + key + " failed");
      made[id].store(++next, std::memory_order_release);
    } else if (what == 3) {  // a batch of 4 fresh keys
      std::vector<std::string> keys;
      std::vector<std::vector<uint8_t>> values(4);
      std::vector<uintptr_t> srcs;
      std::vector<size_t> sizes;
      for (int b = 0; b < 4; ++b) {
        keys.push_back(key_of(id, next + b));
        fill(keys.back(), values[b]);
        srcs.push_back(reinterpret_cast<uintptr_t>(values[b].data()));
        sizes.push_back(values[b].size());
      }
      // Depths as a prefix chain would have them: deeper ones go first on eviction.
      const std::vector<bool> ok = store.batch_put(keys, srcs, sizes, {0, 1, 2, 3});
      for (size_t b = 0; b < ok.size(); ++b)
        if (!ok[b]) return fail("batch put of " + keys[b] + " failed");
      next += 4;
      made[id].store(next, std::memory_order_release);
    } else if (what < 9) {  // a get of a key someone put: ours lately, or anyone's
      const int owner = what < 6 ? id : static_cast<int>(rng() % threads);
      const uint64_t n = made[owner].load(std::memory_order_acquire);
      if (n == 0) continue;
      const uint64_t i = owner == id ? n - 1 - rng() % std::min<uint64_t>(n, 8) : rng() % n;
      const std::string key = key_of(owner, i);
      fill(key, want);
      got.assign(want.size(), 0);
      if (store.get(key, got.data(), got.size())) {
        if (got != want) return fail("get of " + key + " returned other bytes than were put");
        checked.fetch_add(1, std::memory_order_relaxed);
      }
      (void)store.exists(key);
      (void)store.batch_exists_consecutive({key_of(owner, 0), key_of(owner, 1), key});
    } else if (id == 0) {
      if (!store.flush()) return fail("flush failed");
    } else {  // a batch get of 4 keys of one owner
      const int owner = static_cast<int>(rng() % threads);
      const uint64_t n = made[owner].load(std::memory_order_acquire);
      if (n < 4) continue;
      const uint64_t first = rng() % (n - 3);
      std::vector<std::string> keys;
      std::vector<std::vector<uint8_t>> bufs(4);
      std::vector<uintptr_t> dsts;
      std::vector<size_t> sizes;
      for (int b = 0; b < 4; ++b) {
        keys.push_back(key_of(owner, first + b));
        bufs[b].assign(size_of(keys.back()), 0);
        dsts.push_back(reinterpret_cast<uintptr_t>(bufs[b].data()));
        sizes.push_back(bufs[b].size());
      }
      const std::vector<bool> ok = store.batch_get(keys, dsts, sizes);
      for (size_t b = 0; b < ok.size(); ++b) {
        if (!ok[b]) continue;
        fill(keys[b], want);
        if (bufs[b] != want) return fail("batch get of " + keys[b] + " returned other bytes than were put");
        checked.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 2 ? std::atof(argv[2]) : 5.0;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 4;
  const std::string mode = argc > 4 ? argv[4] : "local";
  if (argc < 2 || seconds <= 0 || threads < 1 || threads > 64 || (mode != "local" && mode != "server")) {
    std::fprintf(stderr, "usage: umbp_thread_stress <ssd dir> [seconds > 0] [threads 1-64] [local|server]\n");
    return 2;
  }
  Config config;
  config.dram.capacity_bytes = size_t{6} << 20;  // a few values: puts keep evicting to the SSD
  config.dram.prefault = false;
  config.ssd.storage_dir = argv[1];
  config.ssd.capacity_bytes = size_t{256} << 20;
  config.ssd.segment_size_bytes = size_t{8} << 20;
  config.copy_pipeline.async_enabled = true;

  std::unique_ptr<StandaloneServer> server;
  std::vector<std::unique_ptr<Client>> clients;
  if (mode == "server") {
    ServerOptions options;
    options.address = std::string("unix://") + argv[1] + "/server.sock";
    options.config = config;
    server = StandaloneServer::start(options);
    if (!server) {
      std::fprintf(stderr, "umbp_thread_stress: another server holds %s\n", options.address.c_str());
      return 1;
    }
    Config client_config;
    client_config.standalone_process = StandaloneProcessConfig{};
    client_config.standalone_process->address = server->address();
    for (int c = 0; c < 2; ++c) clients.push_back(create_client(client_config));
  } else {
    clients.push_back(create_client(config));
  }

  std::vector<std::atomic<uint64_t>> made(threads);
  std::atomic<uint64_t> checked{0};
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> ws;
  for (int i = 0; i < threads; ++i)
    ws.emplace_back(worker, i, threads, std::ref(*clients[i % clients.size()]), end, std::ref(made), std::ref(checked));
  for (auto& t : ws) t.join();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  if (g_failures.load() == 0 && !clients[0]->flush()) fail("the last flush failed");
  const ClientStats stats = server ? server->store_stats() : clients[0]->stats();
  if (stats.corrupt_reads != 0) fail(std::to_string(stats.corrupt_reads) + " reads failed their checksum");
  uint64_t puts = 0;
  for (auto& m : made) puts += m.load();
  clients.clear();
  if (server) server->stop();
  server.reset();  // the tiers' threads stop here
  std::printf(
      "umbp_thread_stress: %s, %d threads, %llu puts, %llu gets checked in %.1f s (%llu from DRAM, %llu from the "
      "SSD, %llu evicted to it); %s\n",
      mode.c_str(), threads, static_cast<unsigned long long>(puts), static_cast<unsigned long long>(checked.load()),
      took, static_cast<unsigned long long>(stats.dram_hits), static_cast<unsigned long long>(stats.ssd_hits),
      static_cast<unsigned long long>(stats.dram_evictions), g_failures.load() == 0 ? "ok" : "FAILED");
  return g_failures.load() == 0 ? 0 : 1;
}
