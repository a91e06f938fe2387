// SPDX-License-Identifier: MIT
// The shmem runtime of one PE: bootstrap, topology, symmetric heap, one
// transport per peer, ordering, waiting and barriers. The C API (shmem.h)
// and the Python API (mori.shmem) are both thin layers over this class.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mori/core/bootstrap.h"
#include "mori/core/doorbell.h"
#include "mori/core/heap_allocator.h"
#include "mori/core/process_watch.h"
#include "mori/core/shared_segment.h"
#include "mori/core/topology.h"
#include "mori/transports/transport.h"

namespace mori::shmem {

class GpuHeap;

// Comparison of a wait/test. Values follow OpenSHMEM's SHMEM_CMP_* numbering.
enum class Cmp : int { kEq = 0, kNe = 1, kGt = 2, kLe = 3, kLt = 4, kGe = 5 };

// How the bytes of a waited-on variable compare.
enum class Num : uint8_t { kSigned, kUnsigned, kFloat };

struct Word {
  int width;  // 1, 2, 4 or 8 bytes
  Num num;
};

// Lives at offset 0 of every PE's host heap; peers reach it through the transports.
struct alignas(64) ControlBlock {
  static constexpr uint64_t kMagic = 0x4d4f5249434e544cull;  // "MORICNTL"
  static constexpr int kBarrierRounds = 32;
  uint64_t magic;
  std::atomic<uint32_t> state;  // kStateRunning / kStateFinalized
  int32_t pid;
  std::atomic<uint64_t> barrier_done;  // the last barrier_all epoch this PE completed
  // Set while this PE sleeps in a wait (Runtime::wait_for): since when (CLOCK_MONOTONIC ns, one
  // clock for every process of the host; 0: not blocked), in which call, for which PE (-1: any).
  // PE 0 reads its same-host peers' to diagnose a deadlock (Runtime::diagnose_deadlock).
  std::atomic<int64_t> blocked_since_ns;
  std::atomic<int32_t> blocked_on;
  char blocked_in[44];
  // 1 + the first PE this PE knew lost (0: none), written before it can fail on that loss: a
  // same-host peer that sees this PE exit names that PE, not this one (Runtime::check_dead).
  std::atomic<int32_t> first_lost;
  Doorbell doorbell;
  alignas(64) uint64_t barrier_counters[kBarrierRounds];
  // barrier_all when every PE shares this host (Runtime::barrier_same_host): PE 0's arrival
  // mask, and this PE's release flag. Zero between barriers.
  alignas(64) uint64_t barrier_arrived;
  alignas(64) uint64_t barrier_released;
};
constexpr uint32_t kStateRunning = 1;
constexpr uint32_t kStateFinalized = 2;
// Bytes reserved at the start of the heap (control block plus room for runtime scratch).
constexpr size_t kHeapReserved = 64 * 1024;
// Heaps are mapped at this alignment; symmetric allocations may ask for any alignment up to it.
constexpr size_t kMaxAlignment = size_t(1) << 30;

// What a wait waits for, so that it can fail at once when that can no longer come, and name it.
struct WaitFrom {
  int source = -1;           // the PE whose write ends the wait (-1: unknown or any)
  uint64_t world_epoch = 0;  // a barrier_all epoch: PEs that completed it are not needed, PEs that
                             // finalized or died before it are
  bool rung = false;         // only this library's atomics/notifies write the watched word, over
                             // transports that ring on delivery (Runtime::rings_on_delivery)
};

enum class ThreadLevel : int { kSingle = 0, kFunneled = 1, kSerialized = 2, kMultiple = 3 };

class Runtime {
 public:
  // Collective. Takes ownership of the bootstrap. Throws if already initialized.
  static void init(std::unique_ptr<Bootstrap> bootstrap);
  // Collective: quiet, barrier, tear down. A later init() starts afresh.
  static void finalize();
  static bool initialized();
  // Counts successful init() calls: state cached outside the runtime (collective workspaces)
  // compares it to know whether the runtime it was built for is still the live one.
  static uint64_t generation();
  // The live runtime; `caller` names the API function in the "used before init" error.
  // Inline: every C API call starts here (a 64-byte nbi put costs about 30 ns in all).
  static Runtime& get(const char* caller) {
    if (Runtime* rt = live_) [[likely]]
      return *rt;
    raise_not_initialized(caller);
  }

  int my_pe() const { return my_pe_; }
  int n_pes() const { return n_pes_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  const Topology& topology() const { return topology_; }
  const char* transport_name(int pe) const;
  // Whether the library's atomics and notifies from `pe` ring this PE's doorbell as they land
  // (see Transport::rings_on_delivery): a wait for them may set WaitFrom::rung.
  bool rings_on_delivery(int pe) const;
  // Where the transport to `pe` reaches it ("ip:port" for tcp, "" for shm).
  std::string transport_endpoint(int pe) const;

  // ---- symmetric memory (collective: every PE calls with the same arguments).
  // malloc/calloc/realloc end with a barrier and free starts with one, as OpenSHMEM requires,
  // unless `barrier` is false (the caller then synchronizes itself).
  void* malloc(size_t bytes, size_t alignment, const char* caller, bool barrier = true);
  void* calloc(size_t count, size_t size, const char* caller);
  void* realloc(void* ptr, size_t bytes, const char* caller);
  void free(void* ptr, const char* caller, bool barrier = true);
  size_t heap_size() const { return heap_region_.size; }
  size_t heap_free() const;
  void* heap_base() const { return heap_region_.local_base; }

  // Adds a symmetric region that already exists on every PE (same size everywhere);
  // `handle` lets same-host peers map it (shm name) or is empty. Collective.
  int add_region(void* base, size_t size, MemKind kind, const std::string& handle);
  // Registers/deregisters a local buffer (MORI's shmem_buffer_register). Local only.
  void register_buffer(void* ptr, size_t size);
  void deregister_buffer(void* ptr, size_t size);

  // The region and offset of a symmetric address, checked to hold n bytes; throws naming `caller`.
  RemoteRef resolve(const void* sym, size_t n, const char* caller) const {
    // Inline for the common case (the heap): every RMA call starts here.
    if (heap_region_.contains(sym, n)) [[likely]]
      return RemoteRef{&heap_region_, static_cast<size_t>(static_cast<const char*>(sym) - heap_region_.local_base)};
    return resolve_other(sym, n, caller);
  }
  bool is_symmetric(const void* sym) const;
  // Address of `sym` on `pe` that this process can load/store, or nullptr.
  void* ptr(const void* sym, int pe) const;
  // The address `sym` has in `pe`'s own address space (MORI's shmem_ptr_p2p semantics use ptr()).
  uint64_t remote_address(const void* sym, int pe) const;

  void check_pe(int pe, const char* caller) const {
    if (pe < 0 || pe >= n_pes_) [[unlikely]]
      raise_bad_pe(pe, caller);
  }

  // ---- GPU symmetric heap (gpu_heap.h), present when this PE is bound to a CUDA device
  // Device the next init binds when MORI_DEVICE is unset (-1: none); set by mori.shmem from torch.
  static void bind_device(int device);
  GpuHeap* gpu() const { return gpu_.get(); }
  GpuHeap& gpu_heap(const char* caller) const;  // throws Unavailable when not bound to a GPU
  // Collective like malloc/free, on the GPU heap.
  void* gpu_malloc(size_t bytes, size_t alignment, const char* caller, bool barrier = true);
  void gpu_free(void* ptr, const char* caller, bool barrier = true);
  // Chooses the transports of device regions for this PE's `device` (the registry's device
  // table) and installs them. Collective. Returns the one reaching this PE's own device memory.
  Transport& choose_device_transports(int device);
  // "cuda", or "none" when `pe`'s device regions are not reachable from here.
  const char* device_transport_name(int pe) const;

  // ---- RMA and atomics (dst/src/target on the remote side are symmetric addresses)
  void put(void* dst, const void* src, size_t n, int pe, bool nbi = false);
  void get(void* dst, const void* src, size_t n, int pe, bool nbi = false);
  // Strided: nelems elements of `elem` bytes; dst advances by dst_stride elements, src by src_stride.
  void iput(void* dst, const void* src, ptrdiff_t dst_stride, ptrdiff_t src_stride, size_t nelems, size_t elem, int pe);
  void iget(void* dst, const void* src, ptrdiff_t dst_stride, ptrdiff_t src_stride, size_t nelems, size_t elem, int pe);
  uint64_t atomic(void* target, AmoOp op, int width, uint64_t operand, uint64_t compare, int pe,
                  const char* caller = "shmem_atomic");
  void put_signal(void* dst, const void* src, size_t n, uint64_t* signal, uint64_t value, SignalOp op, int pe,
                  bool nbi = false);
  // The library's own signalling (Transport::notify): put_signal whose completion quiet()
  // need not wait for; `dst` may be nullptr when n is 0.
  void notify(void* dst, const void* src, size_t n, uint64_t* signal, uint64_t value, SignalOp op, int pe,
              const char* caller);
  uint64_t signal_fetch(const uint64_t* signal) const;
  void fence();
  void quiet();

  // ---- point-to-point synchronization on local symmetric variables
  bool test(const void* ivar, Cmp cmp, uint64_t value, Word word) const;
  // Waits until the comparison holds; returns the value that satisfied it.
  uint64_t wait_until(const void* ivar, Cmp cmp, uint64_t value, Word word, const char* caller = "shmem_wait_until");
  // Waits until `ready()` is true, spinning then sleeping on this PE's doorbell. `watched`
  // is the local symmetric word the predicate reads (nullptr: any write may matter). It fails
  // (naming the PE) when a peer dies, when `from` has finalized, or after MORI_SHMEM_WAIT_TIMEOUT;
  // `describe()` says in that error what it waited for. `spins` >= 0 replaces the default spin
  // phase by that many polls without yielding (the caller has spun already); `ring` false
  // sleeps in short naps instead of asking writers to ring (for waits on several words).
  template <typename Pred, typename Describe = std::nullptr_t>
  void wait_for(Pred ready, const char* caller, const void* watched = nullptr, WaitFrom from = {},
                Describe describe = nullptr, int spins = -1, bool ring = true);

  // ---- barriers
  // Over every PE: the same-host barrier when all of 3 or more PEs share this host, else
  // dissemination.
  void barrier_all();
  // Whether the `n` PEs of `pes` (at most 64) all share this host's memory with this PE: one
  // node, MORI_DISABLE_P2P off, and each one's copy of the symmetric `word` mapped here. Every
  // PE gets the same answer (topology, environment and transport choice are the job's).
  bool shares_host(const int* pes, int n, const void* word) const;
  // Same-host barrier over `pes` (shares_host true; my index `me`): each member sets its bit
  // in the arrival mask `arrived` on pes[0] (a direct atomic on the shared mapping); the one
  // that completes the mask clears it and sets every other member's release flag `released`,
  // which wakes it if it sleeps. Each member sleeps at most once per barrier (a dissemination
  // barrier wakes it once per round), which is what counts when PEs outnumber cores. Both
  // symmetric words are zero again afterwards; a flag is consumed before its owner can arrive
  // at the next barrier, so it is never set twice. `world_epoch`: see WaitFrom.
  void barrier_same_host(const int* pes, int n, int me, uint64_t* arrived, uint64_t* released, uint64_t world_epoch,
                         const char* caller);
  // Dissemination barrier over `pes` (my index `me`): in round k a member signals member
  // me + 2^k and waits for member me - 2^k, on the symmetric counters `counters` (one 64-bit
  // word per round, >= ceil(log2(n)), zero at first use). Each arrival is consumed, so the
  // counters are zero again afterwards and an early arrival of the next barrier is kept. The
  // barrier's signals skip the liveness check of user operations: it fails only when one of
  // its waits cannot complete, not because a PE that already did its part left. The one
  // dissemination barrier of the library: barrier_all across hosts and the collective engine's
  // groups (teams, active sets, MORI-CCL) use it. `world_epoch`: see WaitFrom.
  void barrier_dissemination(const int* pes, int n, int me, uint64_t* counters, uint64_t world_epoch,
                             const char* caller);

  // Throws naming a PE that died (process exited or connection lost) before finalizing.
  void check_peers(const char* caller) const { check_dead(WaitFrom{}, caller); }
  // The check of every operation: free unless a peer on this host has exited (then it throws
  // naming a PE that died, or `pe` if that one has finalized and is gone).
  void check_alive(int pe, const char* caller) const {
    if (peer_exited_.load(std::memory_order_relaxed)) [[unlikely]]
      check_target(pe, caller);
  }

  // While alive, the calling thread may drive the target-side progress of the transports
  // that have it (Transport::poll), and their progress threads stand aside: a PE waiting in
  // the library serves its peers' emulated RMA itself, as Open MPI's PEs do, instead of a
  // thread wake-up per incoming operation. Costs nothing where no transport is pollable.
  class Polling {
   public:
    explicit Polling(const Runtime& rt) : polled_(rt.polled_) {
      for (Progress* t : polled_) t->begin_polling();
    }
    ~Polling() { end(false); }
    // Ends polling before the caller sleeps: the transports' threads take over at once.
    void before_sleep() { end(true); }
    Polling(const Polling&) = delete;
    Polling& operator=(const Polling&) = delete;
    // Whether a transport has peers' operations for a waiting caller to serve (ucx).
    bool serves() const { return !polled_.empty(); }
    // One round of every pollable transport; true when one of them did something.
    bool poll() {
      bool any = false;
      for (Progress* t : polled_) any |= t->poll();
      return any;
    }

   private:
    void end(bool will_sleep) {
      if (ended_) return;
      ended_ = true;
      for (Progress* t : polled_) t->end_polling(will_sleep);
    }
    const std::vector<Progress*>& polled_;
    bool ended_ = false;
  };

  ThreadLevel thread_level() const { return thread_level_; }
  // More PEs on this host than cores this process may run on (a PE with tcp peers counting
  // twice, for its progress thread): waits yield and sleep instead of spinning.
  bool oversubscribed() const { return oversubscribed_; }
  void set_thread_level(ThreadLevel l) { thread_level_ = l; }

  ~Runtime();

 private:
  // Set by init(), cleared by finalize(). Defined in runtime.cc, not inline: an inline variable
  // would get a copy of its own in every shared library that hides its symbols (libmori_shmem).
  static Runtime* live_;
  [[noreturn]] static void raise_not_initialized(const char* caller);
  explicit Runtime(std::unique_ptr<Bootstrap> bootstrap);
  void setup();
  void teardown();
  ControlBlock* control() const { return reinterpret_cast<ControlBlock*>(heap_region_.local_base); }
  Transport& transport(int pe) const { return *peer_transport_[pe]; }
  // The transport for `pe`'s part of r's region (device regions have their own); throws if none.
  Transport& transport(const RemoteRef& r, int pe, const char* caller) const {
    Transport* t = transport_or_null(*r.region, pe);
    if (!t) [[unlikely]]
      raise_unreachable(r, pe, caller);
    return *t;
  }
  Transport* transport_or_null(const MemRegion& region, int pe) const {
    if (region.kind == MemKind::kDevice)
      return pe < static_cast<int>(peer_device_transport_.size()) ? peer_device_transport_[pe] : nullptr;
    return peer_transport_[pe];
  }
  // Polls the pollable transports until `ready()` (true) or until they did nothing for
  // kServedPollQuiet (false).
  template <typename Pred>
  bool poll_while_served(Pred ready);
  RemoteRef resolve_other(const void* sym, size_t n, const char* caller) const;  // regions past the heap
  [[noreturn]] void raise_bad_pe(int pe, const char* caller) const;
  [[noreturn]] void raise_unreachable(const RemoteRef& r, int pe, const char* caller) const;
  void check_target(int pe, const char* caller) const;
  // check_peers for a wait: a same-host PE that died after completing `from.world_epoch` is not needed.
  void check_dead(const WaitFrom& from, const char* caller) const;
  // Called by the process watch's thread when a peer on this host has exited.
  void on_peer_exit(int pe);
  // Records `pe` as the first PE this PE knew lost (a later call changes nothing).
  void note_lost(int pe) const;
  // The PE whose loss a same-host `pe` recorded before it exited, or -1.
  int loss_behind(int pe) const;
  // A PE that finalized and so will never write what `from` waits for, or -1.
  int finalized_source(const WaitFrom& from) const;
  [[noreturn]] void raise_wait_timeout(const char* caller, double waited, const std::string& what) const;
  // PE 0, blocked `waited` seconds in `caller`: when every PE is blocked in a wait too (all on this
  // host), says so once on stderr, naming each PE's wait. Unbounded waits then do not hang silently.
  // `describe` (-> std::string) says what this PE waits for; called only when reporting.
  template <typename DescribeFn>
  void diagnose_deadlock(const char* caller, double waited, DescribeFn describe);
  // Each other PE's wait ("PE 1 in shmem_barrier_all (for PE 2) for 3.1 s"), or "" unless every
  // other PE is on this host, running, and blocked in a wait for at least `min_s`.
  std::string peers_all_blocked(double min_s) const;
  bool deadlock_reported_ = false;

  std::unique_ptr<Bootstrap> bootstrap_;
  Topology topology_;
  int my_pe_ = 0, n_pes_ = 1;
  SharedSegment heap_segment_;
  MemRegion heap_region_;
  std::vector<std::unique_ptr<MemRegion>> extra_regions_;
  std::unique_ptr<HeapAllocator> allocator_;
  mutable std::mutex alloc_mu_;
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<Transport*> peer_transport_;
  std::vector<Progress*> polled_;                   // transports a waiting caller can progress (Polling)
  std::vector<ControlBlock*> peer_control_;         // directly mapped control blocks (same host) or nullptr
  std::atomic<bool> peer_exited_{false};            // some watched peer has exited (finalized or not)
  std::atomic<int> dead_pe_{-1};                    // the first that exited without finalizing
  std::unique_ptr<std::atomic<bool>[]> peer_gone_;  // per PE: exited
  ProcessWatch watch_;  // after the members its thread uses: it is destroyed (stopped) first
  uint64_t barrier_epoch_ = 0;
  std::mutex barrier_mu_;
  std::vector<std::pair<uintptr_t, size_t>> registered_;
  ThreadLevel thread_level_ = ThreadLevel::kMultiple;
  bool oversubscribed_ = false;
  bool world_same_host_ = false;                   // barrier_all takes barrier_same_host (set at the end of setup)
  std::vector<Transport*> peer_device_transport_;  // per PE, for MemKind::kDevice regions
  std::unique_ptr<GpuHeap> gpu_;
};

}  // namespace mori::shmem

#include "mori/shmem/runtime_wait.h"
