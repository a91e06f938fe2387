// SPDX-License-Identifier: MIT
#include "mori/shmem/runtime.h"

#include <sched.h>
#include <sys/random.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/spin.h"
#include "mori/core/status.h"
#include "mori/shmem/gpu_heap.h"
#include "mori/transports/registry.h"
#include "mori/shmem/tuned_wait.h"

namespace mori::shmem {
namespace {

std::mutex g_init_mu;
int g_bound_device = -1;  // Runtime::bind_device
std::atomic<uint64_t> g_generation{0};

template <typename T>
bool compare(T a, Cmp cmp, T b) {
  switch (cmp) {
    case Cmp::kEq: return a == b;
    case Cmp::kNe: return a != b;
    case Cmp::kGt: return a > b;
    case Cmp::kLe: return a <= b;
    case Cmp::kLt: return a < b;
    case Cmp::kGe: return a >= b;
  }
  return false;
}

uint64_t load_word(const void* p, int width) {
  switch (width) {
    case 1: return __atomic_load_n(static_cast<const uint8_t*>(p), __ATOMIC_ACQUIRE);
    case 2: return __atomic_load_n(static_cast<const uint16_t*>(p), __ATOMIC_ACQUIRE);
    case 4: return __atomic_load_n(static_cast<const uint32_t*>(p), __ATOMIC_ACQUIRE);
    default: return __atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
  }
}

// A waited-on value as the program sees it, for error messages.
std::string word_text(uint64_t raw, Word w) {
  char text[32];
  int shift = 64 - 8 * w.width;
  if (w.num == Num::kFloat) {
    double d;
    if (w.width == 4) {
      float f;
      uint32_t r = static_cast<uint32_t>(raw);
      std::memcpy(&f, &r, 4);
      d = f;
    } else {
      std::memcpy(&d, &raw, 8);
    }
    std::snprintf(text, sizeof(text), "%g", d);
  } else if (w.num == Num::kSigned) {
    std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(static_cast<int64_t>(raw << shift) >> shift));
  } else {
    std::snprintf(text, sizeof(text), "%llu", static_cast<unsigned long long>((raw << shift) >> shift));
  }
  return text;
}

bool compare_word(uint64_t raw, Cmp cmp, uint64_t value, Word w) {
  switch (w.num) {
    case Num::kUnsigned: {
      uint64_t mask = w.width == 8 ? ~0ull : ((1ull << (8 * w.width)) - 1);
      return compare<uint64_t>(raw & mask, cmp, value & mask);
    }
    case Num::kSigned: {
      int shift = 64 - 8 * w.width;
      int64_t a = static_cast<int64_t>(raw << shift) >> shift, b = static_cast<int64_t>(value << shift) >> shift;
      return compare<int64_t>(a, cmp, b);
    }
    case Num::kFloat:
      if (w.width == 4) {
        float a, b;
        uint32_t ra = static_cast<uint32_t>(raw), rb = static_cast<uint32_t>(value);
        std::memcpy(&a, &ra, 4);
        std::memcpy(&b, &rb, 4);
        return compare<float>(a, cmp, b);
      } else {
        double a, b;
        std::memcpy(&a, &raw, 8);
        std::memcpy(&b, &value, 8);
        return compare<double>(a, cmp, b);
      }
  }
  return false;
}

// Element i of a strided array: unsigned arithmetic, which wraps instead of overflowing; only
// addresses inside a span checked by strided_span (or the caller's own buffer) are used.
const char* strided_element(const void* base, ptrdiff_t stride, size_t i, size_t elem) {
  return reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(stride) * elem * i);
}

// The symmetric span of elements 0..nelems-1 at `stride` (in elements) from `first`, resolved;
// throws naming `caller` when it leaves the heap or the address space.
RemoteRef strided_span(const Runtime& rt, const void* first, ptrdiff_t stride, size_t nelems, size_t elem,
                       const char* caller) {
  // Bytes from the first to the last element, in unsigned arithmetic with overflow checks: a
  // product that wraps (nelems = 2^61 + 1) would otherwise pass as a short span.
  size_t abs_stride = stride < 0 ? 0 - static_cast<size_t>(stride) : static_cast<size_t>(stride);
  size_t step = 0, reach = 0, bytes = 0;
  auto a = reinterpret_cast<uintptr_t>(first);
  if (__builtin_mul_overflow(abs_stride, elem, &step) || __builtin_mul_overflow(step, nelems - 1, &reach) ||
      __builtin_add_overflow(reach, elem, &bytes) || (stride < 0 ? a < reach : a > UINTPTR_MAX - reach))
    raise(Status::kInvalidArgument,
          "%s: %zu elements of %zu bytes at stride %td from %p span more than the address space", caller, nelems, elem,
          stride, first);
  return rt.resolve(reinterpret_cast<const void*>(stride < 0 ? a - reach : a), bytes, caller);
}

}  // namespace

// ---------------------------------------------------------------- lifecycle

void Runtime::init(std::unique_ptr<Bootstrap> bootstrap) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (live_) raise(Status::kInvalidUsage, "shmem is already initialized (PE %d of %d)", live_->my_pe_, live_->n_pes_);
  if (!bootstrap) raise(Status::kInvalidArgument, "shmem init: no bootstrap");
  env::reload();
  std::unique_ptr<Runtime> rt(new Runtime(std::move(bootstrap)));  // the constructor is private
  rt->setup();
  live_ = rt.release();
  g_generation.fetch_add(1);
}

void Runtime::finalize() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (!live_) return;
  std::unique_ptr<Runtime> rt(std::exchange(live_, nullptr));
  rt->teardown();
}

Runtime* Runtime::live_ = nullptr;

bool Runtime::initialized() { return live_ != nullptr; }

uint64_t Runtime::generation() { return g_generation.load(); }

void Runtime::raise_not_initialized(const char* caller) {
  raise(Status::kInvalidUsage, "%s: shmem is not initialized (call shmem_init / a mori.shmem init function first)",
        caller);
}

Runtime::Runtime(std::unique_ptr<Bootstrap> bootstrap) : bootstrap_(std::move(bootstrap)) {
  my_pe_ = bootstrap_->rank();
  n_pes_ = bootstrap_->size();
  log::set_pe(my_pe_);
}

Runtime::~Runtime() = default;

void Runtime::setup() {
  const auto& settings = env::get();
  int device = settings.device >= 0 ? static_cast<int>(settings.device) : g_bound_device;
  topology_ = Topology::discover(*bootstrap_, device);
  const int ncpu = usable_cpus();
  int bound = 0;
  for (int pe = 0; pe < n_pes_; ++pe) bound += topology_.pe(pe).cuda_device >= 0;
  if (bound != 0 && bound != n_pes_)
    raise(Status::kInvalidUsage,
          "%d of %d PEs are bound to a CUDA device (MORI_DEVICE or torch's current device): bind every PE or none",
          bound, n_pes_);

  // Job tag shared by all PEs names the heap segments.
  uint64_t tag = 0;
  if (my_pe_ == 0 && getrandom(&tag, sizeof(tag), 0) != sizeof(tag)) raise_errno("getrandom");
  bootstrap_->broadcast(&tag, sizeof(tag), 0);

  size_t heap_bytes = settings.heap_size;
  if (heap_bytes < 2 * kHeapReserved)
    raise(Status::kInvalidArgument, "MORI_SHMEM_HEAP_SIZE=%zu is too small (minimum %zu bytes)", heap_bytes,
          2 * kHeapReserved);
  heap_bytes = (heap_bytes + 4095) / 4096 * 4096;
  char name[64];  // a label in /proc/PID/maps; peers open the heap by heap_segment_.name()
  std::snprintf(name, sizeof(name), "mori-heap-%016llx-%d", static_cast<unsigned long long>(tag), my_pe_);
  // Every PE's heap starts on a kMaxAlignment boundary, so an aligned offset is an aligned
  // address on every PE and allocations stay symmetric for any alignment up to it.
  heap_segment_ = SharedSegment::create(name, heap_bytes, kMaxAlignment);

  auto* ctrl = new (heap_segment_.data()) ControlBlock();
  ctrl->magic = ControlBlock::kMagic;
  ctrl->pid = static_cast<int32_t>(getpid());
  ctrl->barrier_done.store(0);
  ctrl->state.store(0);

  heap_region_.id = 0;
  heap_region_.kind = MemKind::kHost;
  heap_region_.local_base = static_cast<char*>(heap_segment_.data());
  heap_region_.size = heap_bytes;
  allocator_ = std::make_unique<HeapAllocator>(kHeapReserved, heap_bytes);

  // Transports: the registry's host table (shm for this host unless P2P is disabled, then
  // ucx or tcp as MORI_NET_TRANSPORT says) picks one per peer.
  TransportContext ctx{*bootstrap_, topology_, settings};
  ctx.on_delivery = [ctrl](uint32_t region, uint64_t offset, uint64_t length) {
    ctrl->doorbell.ring(Doorbell::key(static_cast<int>(region), offset),
                        Doorbell::key(static_cast<int>(region), offset + length));
  };
  // Progress (ucx) may have landed remote data anywhere here: sleeping waiters look again.
  ctx.on_progress = [ctrl] { ctrl->doorbell.ring(0, Doorbell::kWatchAll); };
  TransportChoice chosen = choose_transports(ctx, host_transport_table());
  transports_ = std::move(chosen.transports);
  peer_transport_ = std::move(chosen.per_peer);
  for (int pe = 0; pe < n_pes_; ++pe)
    if (!peer_transport_[pe]) raise(Status::kInternal, "PE %d: no transport reaches PE %d", my_pe_, pe);
  for (auto& t : transports_) t->expose_region(heap_region_);
  for (auto& t : transports_)
    if (Progress* p = t->progress()) polled_.push_back(p);
  // A PE whose peers' operations a thread of its transport applies needs a core for that
  // thread as much as for itself: such a PE counts twice, or a long busy-poll starves the
  // thread (2-PE C API barriers over ucx took 2-5 ms that way, before waits polled). A
  // waiting PE progresses ucx itself (Polling), so a transport with Progress does not count.
  bool progress_thread = false;
  for (auto& t : transports_) progress_thread |= t->has_progress_thread() && !t->progress();
  oversubscribed_ = topology_.local_size() * (progress_thread ? 2 : 1) > ncpu;
  for (Progress* p : polled_) p->set_crowded(oversubscribed_);

  // Exchange the heap's base and sharing handle, connect every peer.
  struct Announce {
    uint64_t base;
    uint64_t size;
    char name[64];
  } mine{reinterpret_cast<uint64_t>(heap_region_.local_base), heap_bytes, {}};
  std::strncpy(mine.name, heap_segment_.name().c_str(), sizeof(mine.name) - 1);
  auto all = bootstrap_->allgather_values(mine);
  heap_region_.remote_bases.resize(n_pes_);
  heap_region_.handles.resize(n_pes_);
  heap_region_.mapped.assign(n_pes_, nullptr);
  for (int pe = 0; pe < n_pes_; ++pe) {
    if (all[pe].size != heap_bytes)
      raise(Status::kInvalidUsage,
            "PE %d has a %llu-byte heap but PE %d has %zu: MORI_SHMEM_HEAP_SIZE must match on all PEs", pe,
            static_cast<unsigned long long>(all[pe].size), my_pe_, heap_bytes);
    heap_region_.remote_bases[pe] = all[pe].base;
    heap_region_.handles[pe] = all[pe].name;
  }
  peer_control_.assign(n_pes_, nullptr);
  for (int pe = 0; pe < n_pes_; ++pe) {
    peer_transport_[pe]->connect_region(heap_region_, pe);
    // A heap mapped here (same host): its control block is read directly, its PE watched.
    if (pe < static_cast<int>(heap_region_.mapped.size()) && heap_region_.mapped[pe]) {
      auto* peer_ctrl = static_cast<ControlBlock*>(heap_region_.mapped[pe]);
      peer_control_[pe] = peer_ctrl;
      peer_transport_[pe]->set_peer_doorbell(pe, &peer_ctrl->doorbell);
      if (pe != my_pe_) watch_.watch(pe, topology_.pe(pe).pid);
    }
  }
  bootstrap_->barrier();  // everyone has mapped everyone: the handle can go
  heap_segment_.release_handle();
  ctrl->state.store(kStateRunning, std::memory_order_release);
  peer_gone_ = std::make_unique<std::atomic<bool>[]>(n_pes_);
  watch_.start([this](int pe) { on_peer_exit(pe); });
  {
    std::vector<int> world(n_pes_);
    for (int i = 0; i < n_pes_; ++i) world[i] = i;
    // Two PEs meet in one dissemination round, one wake-up each already, and without the
    // shared arrival word's extra cache-line trip.
    world_same_host_ = n_pes_ > 2 && shares_host(world.data(), n_pes_, &ctrl->barrier_arrived);
  }
  MORI_LOG(kInfo, "SHMEM", "PE %d of %d up: %s heap, bootstrap %s, waits %s", my_pe_, n_pes_,
           human_bytes(heap_bytes).c_str(), bootstrap_->describe().c_str(),
           oversubscribed_   ? "yield (PEs outnumber cores)"
           : polled_.empty() ? "spin"
                             : "spin and progress ucx");
  if (device >= 0) gpu_ = GpuHeap::create(*this, device, settings.gpu_heap_size);
}

void Runtime::teardown() {
  std::exception_ptr error;
  try {
    barrier_all();
  } catch (...) {
    error = std::current_exception();
  }
  control()->state.store(kStateFinalized, std::memory_order_release);
  watch_.clear();  // its thread reads the peers' control blocks, unmapped below
  for (int pe = 0; pe < n_pes_; ++pe)
    if (peer_transport_[pe]) peer_transport_[pe]->disconnect_region(heap_region_, pe);
  for (auto& r : extra_regions_)
    for (int pe = 0; pe < n_pes_; ++pe)
      if (Transport* t = transport_or_null(*r, pe)) t->disconnect_region(*r, pe);
  if (gpu_) {
    // Every PE has unmapped our GPU heap before it is freed.
    if (!error) {
      try {
        bootstrap_->barrier();
      } catch (...) {
        error = std::current_exception();
      }
    }
    gpu_.reset();
  }
  transports_.clear();
  if (!error) {
    try {
      bootstrap_->shutdown();
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

const char* Runtime::transport_name(int pe) const {
  check_pe(pe, "transport_name");
  return peer_transport_[pe]->name();
}

bool Runtime::rings_on_delivery(int pe) const {
  return pe >= 0 && pe < n_pes_ && peer_transport_[pe] && peer_transport_[pe]->rings_on_delivery();
}

std::string Runtime::transport_endpoint(int pe) const {
  check_pe(pe, "transport_endpoint");
  return peer_transport_[pe]->endpoint(pe);
}

// ---------------------------------------------------------------- memory

void* Runtime::malloc(size_t bytes, size_t alignment, const char* caller, bool barrier) {
  if (bytes == 0) return nullptr;
  if (alignment > kMaxAlignment)
    raise(Status::kInvalidArgument, "%s: alignment %zu exceeds the largest supported (%zu)", caller, alignment,
          kMaxAlignment);
  void* p;
  {
    std::lock_guard<std::mutex> lock(alloc_mu_);
    auto off = allocator_->allocate(bytes, alignment);
    if (!off)
      raise(Status::kOutOfMemory, "%s: symmetric heap exhausted on PE %d: %s (raise MORI_SHMEM_HEAP_SIZE)", caller,
            my_pe_, allocator_->describe_exhaustion(bytes, alignment).c_str());
    p = heap_region_.local_base + *off;
  }
  // OpenSHMEM: allocation ends with a barrier, so no peer writes into memory this PE has not allocated yet.
  if (barrier) barrier_all();
  return p;
}

void* Runtime::calloc(size_t count, size_t size, const char* caller) {
  // More bytes than size_t holds cannot be allocated: out of memory (the C API returns NULL).
  if (size && count > SIZE_MAX / size)
    raise(Status::kOutOfMemory, "%s: %zu elements of %zu bytes overflow size_t", caller, count, size);
  void* p = malloc(count * size, HeapAllocator::kMinAlign, caller, false);
  if (p) std::memset(p, 0, count * size);
  barrier_all();
  return p;
}

void* Runtime::realloc(void* ptr, size_t bytes, const char* caller) {
  if (!ptr) return malloc(bytes, HeapAllocator::kMinAlign, caller);
  if (bytes == 0) {
    free(ptr, caller);
    return nullptr;
  }
  size_t off = static_cast<char*>(ptr) - heap_region_.local_base;
  size_t old;
  bool in_place;
  {
    std::lock_guard<std::mutex> lock(alloc_mu_);
    if (!heap_region_.contains(ptr) || (old = allocator_->block_size(off)) == 0)
      raise(Status::kInvalidArgument, "%s: %p is not the start of a symmetric allocation", caller, ptr);
    in_place = allocator_->resize_in_place(off, bytes);
  }
  if (in_place) {
    barrier_all();
    return ptr;
  }
  void* fresh = malloc(bytes, HeapAllocator::kMinAlign, caller, false);
  std::memcpy(fresh, ptr, std::min(old, bytes));
  free(ptr, caller, false);
  barrier_all();
  return fresh;
}

void Runtime::free(void* ptr, const char* caller, bool barrier) {
  if (!ptr) return;
  // OpenSHMEM: free starts with a barrier, so nobody is still writing into the block.
  if (barrier) barrier_all();
  std::lock_guard<std::mutex> lock(alloc_mu_);
  if (!heap_region_.contains(ptr) ||
      !allocator_->release(static_cast<size_t>(static_cast<char*>(ptr) - heap_region_.local_base)))
    raise(Status::kInvalidArgument, "%s: %p is not a live symmetric allocation", caller, ptr);
}

size_t Runtime::heap_free() const {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  return allocator_->bytes_free();
}

int Runtime::add_region(void* base, size_t size, MemKind kind, const std::string& handle) {
  auto region = std::make_unique<MemRegion>();
  region->id = static_cast<int>(extra_regions_.size()) + 1;
  region->kind = kind;
  region->local_base = static_cast<char*>(base);
  region->size = size;
  struct Announce {
    uint64_t base, size;
    char handle[128];
  } mine{reinterpret_cast<uint64_t>(base), size, {}};
  if (handle.size() >= sizeof(mine.handle)) raise(Status::kInternal, "region handle too long");
  std::memcpy(mine.handle, handle.data(), handle.size());
  auto all = bootstrap_->allgather_values(mine);
  region->remote_bases.resize(n_pes_);
  region->handles.resize(n_pes_);
  region->mapped.assign(n_pes_, nullptr);
  for (int pe = 0; pe < n_pes_; ++pe) {
    if (all[pe].size != size)
      raise(Status::kInvalidUsage, "symmetric region sizes differ: PE %d has %llu bytes, PE %d has %zu", pe,
            static_cast<unsigned long long>(all[pe].size), my_pe_, size);
    region->remote_bases[pe] = all[pe].base;
    region->handles[pe] = std::string(all[pe].handle, strnlen(all[pe].handle, sizeof(all[pe].handle)));
  }
  for (auto& t : transports_) t->expose_region(*region);
  for (int pe = 0; pe < n_pes_; ++pe)
    if (Transport* t = transport_or_null(*region, pe)) t->connect_region(*region, pe);
  extra_regions_.push_back(std::move(region));
  return extra_regions_.back()->id;
}

void Runtime::register_buffer(void* ptr, size_t size) {
  if (!ptr || size == 0) raise(Status::kInvalidArgument, "shmem_buffer_register: null pointer or zero size");
  std::lock_guard<std::mutex> lock(alloc_mu_);
  registered_.emplace_back(reinterpret_cast<uintptr_t>(ptr), size);
}

void Runtime::deregister_buffer(void* ptr, size_t size) {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  for (auto it = registered_.begin(); it != registered_.end(); ++it)
    if (it->first == reinterpret_cast<uintptr_t>(ptr) && it->second == size) {
      registered_.erase(it);
      return;
    }
  raise(Status::kInvalidArgument, "shmem_buffer_deregister: %p (%zu bytes) is not registered", ptr, size);
}

// ---------------------------------------------------------------- addresses

RemoteRef Runtime::resolve_other(const void* sym, size_t n, const char* caller) const {
  for (auto& r : extra_regions_)
    if (r->contains(sym, n))
      return RemoteRef{r.get(), static_cast<size_t>(static_cast<const char*>(sym) - r->local_base)};
  if (heap_region_.contains(sym))
    raise(Status::kInvalidArgument, "%s: %zu bytes at %p run past the end of the symmetric heap", caller, n, sym);
  raise(Status::kInvalidArgument,
        "%s: address %p is not symmetric (not in the symmetric heap [%p, +%zu) or a registered symmetric region)",
        caller, sym, static_cast<const void*>(heap_region_.local_base), heap_region_.size);
}

bool Runtime::is_symmetric(const void* sym) const {
  if (heap_region_.contains(sym)) return true;
  for (auto& r : extra_regions_)
    if (r->contains(sym)) return true;
  return false;
}

void* Runtime::ptr(const void* sym, int pe) const {
  if (pe < 0 || pe >= n_pes_ || !is_symmetric(sym)) return nullptr;
  RemoteRef ref = resolve(sym, 0, "shmem_ptr");
  Transport* t = transport_or_null(*ref.region, pe);
  return t ? t->direct_ptr(pe, ref) : nullptr;
}

uint64_t Runtime::remote_address(const void* sym, int pe) const {
  check_pe(pe, "remote_address");
  RemoteRef ref = resolve(sym, 0, "remote_address");
  return ref.region->remote_bases[pe] + ref.offset;
}

void Runtime::raise_bad_pe(int pe, const char* caller) const {
  raise(Status::kInvalidArgument, "%s: PE %d is out of range (the job has PEs 0..%d)", caller, pe, n_pes_ - 1);
}

// ---------------------------------------------------------------- RMA

void Runtime::put(void* dst, const void* src, size_t n, int pe, bool nbi) {
  check_pe(pe, "shmem_put");
  check_alive(pe, "shmem_put");
  if (n == 0) return;
  RemoteRef ref = resolve(dst, n, "shmem_put");
  transport(ref, pe, "shmem_put").put(pe, ref, src, n, nbi);
}

void Runtime::get(void* dst, const void* src, size_t n, int pe, bool nbi) {
  check_pe(pe, "shmem_get");
  check_alive(pe, "shmem_get");
  if (n == 0) return;
  RemoteRef ref = resolve(src, n, "shmem_get");
  transport(ref, pe, "shmem_get").get(pe, dst, ref, n, nbi);
}

void Runtime::iput(void* dst, const void* src, ptrdiff_t dst_stride, ptrdiff_t src_stride, size_t nelems, size_t elem,
                   int pe) {
  check_pe(pe, "shmem_iput");
  check_alive(pe, "shmem_iput");
  if (nelems == 0) return;
  // Validate the whole span once, then move element by element.
  Transport& t = transport(strided_span(*this, dst, dst_stride, nelems, elem, "shmem_iput"), pe, "shmem_iput");
  for (size_t i = 0; i < nelems; ++i) {
    t.put(pe, resolve(strided_element(dst, dst_stride, i, elem), elem, "shmem_iput"),
          strided_element(src, src_stride, i, elem), elem, true);
  }
}

void Runtime::iget(void* dst, const void* src, ptrdiff_t dst_stride, ptrdiff_t src_stride, size_t nelems, size_t elem,
                   int pe) {
  check_pe(pe, "shmem_iget");
  check_alive(pe, "shmem_iget");
  if (nelems == 0) return;
  Transport& t = transport(strided_span(*this, src, src_stride, nelems, elem, "shmem_iget"), pe, "shmem_iget");
  for (size_t i = 0; i < nelems; ++i) {
    t.get(pe, const_cast<char*>(strided_element(dst, dst_stride, i, elem)),
          resolve(strided_element(src, src_stride, i, elem), elem, "shmem_iget"), elem, true);
  }
  t.quiet();
}

uint64_t Runtime::atomic(void* target, AmoOp op, int width, uint64_t operand, uint64_t compare, int pe,
                         const char* caller) {
  check_pe(pe, caller);
  check_alive(pe, caller);
  RemoteRef ref = resolve(target, static_cast<size_t>(width), caller);
  if (ref.offset % static_cast<size_t>(width))
    raise(Status::kInvalidArgument, "%s: %d-byte atomic on address %p that is not %d-byte aligned", caller, width,
          target, width);
  return transport(ref, pe, caller).atomic(pe, ref, op, width, operand, compare);
}

void Runtime::put_signal(void* dst, const void* src, size_t n, uint64_t* signal, uint64_t value, SignalOp op, int pe,
                         bool nbi) {
  check_pe(pe, "shmem_put_signal");
  check_alive(pe, "shmem_put_signal");
  RemoteRef d = resolve(dst, n, "shmem_put_signal");
  RemoteRef s = resolve(signal, 8, "shmem_put_signal (signal)");
  if (s.offset % 8)
    raise(Status::kInvalidArgument, "shmem_put_signal: signal address %p is not 8-byte aligned", signal);
  if (d.region->kind != s.region->kind)
    raise(Status::kInvalidArgument,
          "shmem_put_signal: data and signal must both be in host memory or both in GPU memory");
  transport(d, pe, "shmem_put_signal").put_signal(pe, d, src, n, s, value, op, nbi);
}

void Runtime::notify(void* dst, const void* src, size_t n, uint64_t* signal, uint64_t value, SignalOp op, int pe,
                     const char* caller) {
  check_pe(pe, caller);
  RemoteRef s = resolve(signal, 8, caller);
  RemoteRef d = n ? resolve(dst, n, caller) : s;
  transport(s, pe, caller).notify(pe, d, src, n, s, value, op);
}

uint64_t Runtime::signal_fetch(const uint64_t* signal) const { return __atomic_load_n(signal, __ATOMIC_ACQUIRE); }

void Runtime::fence() {
  check_alive(-1, "shmem_fence");
  for (auto& t : transports_) t->fence(-1);
}

void Runtime::quiet() {
  check_alive(-1, "shmem_quiet");
  for (auto& t : transports_) t->quiet();
}

// ---------------------------------------------------------------- waiting

bool Runtime::test(const void* ivar, Cmp cmp, uint64_t value, Word word) const {
  return compare_word(load_word(ivar, word.width), cmp, value, word);
}

uint64_t Runtime::wait_until(const void* ivar, Cmp cmp, uint64_t value, Word word, const char* caller) {
  if (static_cast<int>(cmp) < 0 || static_cast<int>(cmp) > 5)
    raise(Status::kInvalidArgument, "%s: unknown comparison %d", caller, static_cast<int>(cmp));
  uint64_t seen = 0;
  wait_for(
      [&] {
        seen = load_word(ivar, word.width);
        return compare_word(seen, cmp, value, word);
      },
      caller, ivar, WaitFrom{},
      [&] {
        static const char* ops[] = {"==", "!=", ">", "<=", "<", ">="};
        char text[200];
        std::snprintf(text, sizeof(text), "the %d-byte word at %p to become %s %s (it holds %s)", word.width, ivar,
                      ops[static_cast<int>(cmp)], word_text(value, word).c_str(), word_text(seen, word).c_str());
        return std::string(text);
      });
  return seen;
}

void Runtime::note_lost(int pe) const {
  int32_t none = 0;
  control()->first_lost.compare_exchange_strong(none, pe + 1, std::memory_order_acq_rel);
}

int Runtime::loss_behind(int pe) const {
  const ControlBlock* c = pe >= 0 && pe != my_pe_ ? peer_control_[pe] : nullptr;
  int lost = c ? c->first_lost.load(std::memory_order_acquire) - 1 : -1;
  return lost >= 0 && lost != my_pe_ && lost != pe && lost < n_pes_ ? lost : -1;
}

void Runtime::check_dead(const WaitFrom& from, const char* caller) const {
  // What this PE knows lost: a remote PE (its transport), a same-host PE that exited (the
  // process watch). The first PE lost is named first, whichever way it was learnt: a survivor
  // that failed on a loss and exited recorded that loss (first_lost) before it left.
  int remote = -1;
  std::string via;
  for (auto& t : transports_) {
    int dead = t->dead_peer();
    if (dead >= 0 && remote < 0) {
      remote = dead;
      via = t->name();
    }
  }
  int pe = dead_pe_.load(std::memory_order_acquire);
  auto excused = [&](int p) {  // it completed the barrier we wait in: we do not need it
    return from.world_epoch && peer_control_[p] &&
           peer_control_[p]->barrier_done.load(std::memory_order_acquire) >= from.world_epoch;
  };
  if (pe < 0 && remote >= 0) {
    // Only a remote loss is known, but a same-host PE may have died before it (the remote PE
    // failing on that death and leaving): the watch's thread, woken by the exit, may not have
    // run yet while the transport already saw the remote PE go. Ask the watch now.
    for (int other = 0; other < n_pes_ && pe < 0; ++other) {
      const ControlBlock* c = peer_control_[other];
      if (other != my_pe_ && c && c->state.load(std::memory_order_acquire) != kStateFinalized && !excused(other) &&
          watch_.exited(other))
        pe = other;
    }
  }
  if (pe >= 0 && excused(pe)) {
    pe = -1;
    for (int other = 0; other < n_pes_ && pe < 0; ++other) {
      ControlBlock* c = peer_control_[other];
      if (other != my_pe_ && peer_gone_[other].load(std::memory_order_acquire) && !excused(other) &&
          !(c && c->state.load(std::memory_order_acquire) == kStateFinalized))
        pe = other;
    }
  }
  if (pe < 0 && remote < 0) return;
  // A same-host PE that left names the loss it recorded, else itself (it was killed: a PE that
  // fails on a loss records it first, here or in the error path); else the remote PE.
  const int behind = loss_behind(pe);
  const int first = pe >= 0 ? (behind >= 0 ? behind : pe) : remote;
  note_lost(first);
  auto exited = [&](int p) {
    return "PE " + std::to_string(p) + " (pid " + std::to_string(topology_.pe(p).pid) + " on " +
           topology_.pe(p).hostname + ") exited without finalizing";
  };
  std::string text;
  if (first == pe)
    text = exited(pe);
  else if (pe >= 0)
    text = "lost PE " + std::to_string(first) + " (" + exited(pe) + " after failing on that loss)";
  else
    text = "lost PE " + std::to_string(remote) + " (" + via + " transport)";
  if (remote >= 0 && remote != first) text += "; lost PE " + std::to_string(remote) + " (" + via + " transport)";
  // Name every PE known dead: the watch may see two deaths at once, in no particular order.
  std::string also;
  for (int other = 0; other < n_pes_; ++other) {
    ControlBlock* c = peer_control_[other];
    if (other == pe || other == first || !peer_gone_[other].load(std::memory_order_acquire) || excused(other) ||
        (c && c->state.load(std::memory_order_acquire) == kStateFinalized))
      continue;
    also += (also.empty() ? "; so did PE " : ", PE ") + std::to_string(other) + " (pid " +
            std::to_string(topology_.pe(other).pid) + ")";
  }
  raise(Status::kRemote, "%s on PE %d: %s%s", caller, my_pe_, text.c_str(), also.c_str());
}

void Runtime::check_target(int pe, const char* caller) const {
  check_peers(caller);
  if (pe >= 0 && pe != my_pe_ && peer_gone_ && peer_gone_[pe].load(std::memory_order_acquire))
    raise(Status::kRemote, "%s on PE %d: PE %d (pid %d) has finalized and exited", caller, my_pe_, pe,
          topology_.pe(pe).pid);
}

void Runtime::on_peer_exit(int pe) {
  ControlBlock* c = peer_control_[pe];
  if (!c || c->state.load(std::memory_order_acquire) != kStateFinalized) {
    int none = -1;
    dead_pe_.compare_exchange_strong(none, pe, std::memory_order_acq_rel);
    int behind = loss_behind(pe);  // it failed on an earlier loss and left: that one came first
    note_lost(behind >= 0 ? behind : pe);
  }
  peer_gone_[pe].store(true, std::memory_order_release);
  peer_exited_.store(true, std::memory_order_release);
  control()->doorbell.wake_all();  // sleeping waits look now, not at their next timeout
}

int Runtime::finalized_source(const WaitFrom& from) const {
  auto finalized = [&](int pe) {
    ControlBlock* c = pe >= 0 && pe != my_pe_ ? peer_control_[pe] : nullptr;
    return c && c->state.load(std::memory_order_acquire) == kStateFinalized;
  };
  if (finalized(from.source)) return from.source;
  if (from.world_epoch)
    for (int pe = 0; pe < n_pes_; ++pe)
      if (finalized(pe) && peer_control_[pe]->barrier_done.load(std::memory_order_acquire) < from.world_epoch)
        return pe;
  return -1;
}

std::string Runtime::peers_all_blocked(double min_s) const {
  const int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::string out;
  for (int pe = 0; pe < n_pes_; ++pe) {
    if (pe == my_pe_) continue;
    const ControlBlock* c = peer_control_[pe];  // another host's PE: nothing to tell
    if (!c || c->state.load(std::memory_order_acquire) != kStateRunning) return "";
    int64_t since = c->blocked_since_ns.load(std::memory_order_acquire);
    double blocked_s = since ? (now_ns - since) * 1e-9 : 0;
    if (!since || blocked_s < min_s) return "";
    char in[sizeof(c->blocked_in)];
    std::memcpy(in, c->blocked_in, sizeof(in));  // a racing update tears the name, never overruns it
    in[sizeof(in) - 1] = 0;
    int on = c->blocked_on.load(std::memory_order_relaxed);
    char line[128];
    if (on >= 0)
      std::snprintf(line, sizeof(line), "PE %d in %s (for PE %d) for %.1f s", pe, in, on, blocked_s);
    else
      std::snprintf(line, sizeof(line), "PE %d in %s for %.1f s", pe, in, blocked_s);
    out += (out.empty() ? "" : ", ") + std::string(line);
  }
  return out;
}

void Runtime::raise_wait_timeout(const char* caller, double waited, const std::string& what) const {
  raise(Status::kTimeout, "%s on PE %d: waited %.1f s (MORI_SHMEM_WAIT_TIMEOUT=%g) for %s", caller, my_pe_, waited,
        env::get().shmem_wait_timeout, what.c_str());
}

// ---------------------------------------------------------------- barriers

void Runtime::barrier_dissemination(const int* pes, int n, int me, uint64_t* counters, uint64_t world_epoch,
                                    const char* caller) {
  for (int round = 0, dist = 1; dist < n; ++round, dist <<= 1) {
    const int partner = pes[(me + dist) % n];
    const int from = pes[(me - dist % n + n) % n];  // who signals me in this round
    RemoteRef ref = resolve(&counters[round], 8, caller);
    transport(ref, partner, caller).notify(partner, ref, nullptr, 0, ref, 1, SignalOp::kAdd);
    uint64_t* mine = &counters[round];
    tuned_wait(
        *this, [&] { return __atomic_load_n(mine, __ATOMIC_ACQUIRE) >= 1; }, caller, mine,
        WaitFrom{from, world_epoch, rings_on_delivery(from)},
        [&] { return "PE " + std::to_string(from) + " to reach the barrier (round " + std::to_string(round) + ")"; });
    __atomic_fetch_sub(mine, 1, __ATOMIC_ACQ_REL);
  }
}

bool Runtime::shares_host(const int* pes, int n, const void* word) const {
  if (n > 64 || env::get().disable_p2p) return false;
  for (int i = 0; i < n; ++i) {
    if (topology_.num_nodes() > 1 && !topology_.same_node(pes[i], my_pe_)) return false;
    if (pes[i] != my_pe_ && !ptr(word, pes[i])) return false;
  }
  return true;
}

void Runtime::barrier_same_host(const int* pes, int n, int me, uint64_t* arrived, uint64_t* released,
                                uint64_t world_epoch, const char* caller) {
  auto* mask = static_cast<uint64_t*>(ptr(arrived, pes[0]));
  if (!mask) raise(Status::kInternal, "%s: the barrier word of PE %d is not mapped", caller, pes[0]);
  const uint64_t full = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
  const uint64_t bit = uint64_t(1) << me;
  const uint64_t before = __atomic_fetch_or(mask, bit, __ATOMIC_ACQ_REL);
  if ((before | bit) == full) {
    __atomic_store_n(mask, 0, __ATOMIC_RELEASE);  // before any release: nobody arrives again until then
    for (int k = 1; k < n; ++k) atomic(released, AmoOp::kSet, 8, 1, 0, pes[(me + k) % n], caller);
    return;
  }
  // Only the last arriver's atomic sets the flag: any member may be it.
  bool rung = true;
  for (int k = 0; k < n; ++k) rung = rung && (k == me || rings_on_delivery(pes[k]));
  tuned_wait(
      *this, [&] { return __atomic_load_n(released, __ATOMIC_ACQUIRE) != 0; }, caller, released,
      WaitFrom{-1, world_epoch, rung},
      [&] {
        const uint64_t seen = __atomic_load_n(mask, __ATOMIC_ACQUIRE);
        std::string missing;
        for (int i = 0; i < n; ++i)
          if (!(seen & (uint64_t(1) << i))) missing += (missing.empty() ? "PE " : ", PE ") + std::to_string(pes[i]);
        return "the barrier's other members; not arrived: " + missing;
      });
  __atomic_store_n(released, 0, __ATOMIC_RELAXED);
}

void Runtime::barrier_all() {
  std::lock_guard<std::mutex> lock(barrier_mu_);
  // Guarded by barrier_mu_. Not thread_local: a thread's TLS is destroyed before exit's
  // handlers run, and the C API's finalize-at-exit handler still calls barrier_all.
  static std::vector<int> world;
  if (static_cast<int>(world.size()) != n_pes_) {
    world.resize(n_pes_);
    for (int i = 0; i < n_pes_; ++i) world[i] = i;
  }
  // The barrier's own signals skip the liveness check of user operations (see
  // barrier_dissemination); what this PE put before it is complete first.
  for (auto& t : transports_) t->quiet();
  const uint64_t epoch = ++barrier_epoch_;
  if (world_same_host_)
    barrier_same_host(world.data(), n_pes_, my_pe_, &control()->barrier_arrived, &control()->barrier_released, epoch,
                      "shmem_barrier_all");
  else
    barrier_dissemination(world.data(), n_pes_, my_pe_, control()->barrier_counters, epoch, "shmem_barrier_all");
  control()->barrier_done.store(epoch, std::memory_order_release);
}

}  // namespace mori::shmem

// ---------------------------------------------------------------- GPU heap

namespace mori::shmem {

void Runtime::bind_device(int device) { g_bound_device = device; }

GpuHeap& Runtime::gpu_heap(const char* caller) const {
  if (!gpu_)
    raise(Status::kUnavailable,
          "%s: PE %d is not bound to a GPU (set MORI_DEVICE, or make a CUDA device current in torch before init)",
          caller, my_pe_);
  return *gpu_;
}

void* Runtime::gpu_malloc(size_t bytes, size_t alignment, const char* caller, bool barrier) {
  if (bytes == 0) return nullptr;
  void* p = gpu_heap(caller).allocate(bytes, alignment, caller);
  if (barrier) barrier_all();
  return p;
}

void Runtime::gpu_free(void* ptr, const char* caller, bool barrier) {
  if (!ptr) return;
  GpuHeap& heap = gpu_heap(caller);
  if (barrier) barrier_all();
  heap.release(ptr, caller);
}

Transport& Runtime::choose_device_transports(int device) {
  TransportContext ctx{*bootstrap_, topology_, env::get()};
  ctx.cuda_device = device;
  TransportChoice chosen = choose_transports(ctx, device_transport_table());
  if (!chosen.per_peer[my_pe_])
    raise(Status::kInternal, "PE %d: no transport reaches its own device %d's memory", my_pe_, device);
  peer_device_transport_ = std::move(chosen.per_peer);
  for (auto& t : chosen.transports) transports_.push_back(std::move(t));
  return *peer_device_transport_[my_pe_];
}

const char* Runtime::device_transport_name(int pe) const {
  check_pe(pe, "device_transport_name");
  Transport* t = pe < static_cast<int>(peer_device_transport_.size()) ? peer_device_transport_[pe] : nullptr;
  return t ? t->name() : "none";
}

void Runtime::raise_unreachable(const RemoteRef& r, int pe, const char* caller) const {
  raise(Status::kUnavailable, "%s: PE %d's %s memory is not reachable from PE %d by any transport", caller, pe,
        r.region->kind == MemKind::kDevice ? "GPU" : "host", my_pe_);
}

}  // namespace mori::shmem
