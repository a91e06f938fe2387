// SPDX-License-Identifier: MIT
// MORI-CCL's host path: makes the caller's buffers reachable (staged into the symmetric heap
// unless they are on it), checks that every PE makes the same call, and leaves the rest to the
// host collective engine (mori/shmem/collective_engine.h) over its library world group.
#include "mori/collectives/host_collectives.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "mori/core/env.h"
#include "mori/core/reduce.h"
#include "mori/core/status.h"
#include "mori/shmem/collective_engine.h"
#include "mori/shmem/runtime.h"

namespace mori::collectives {
namespace {

enum OpCode : int32_t { kAllgather = 1, kBroadcast = 2, kAllreduce = 3, kReduceScatter = 4, kAlltoallv = 5 };

const char* op_name(int op) {
  switch (op) {
    case kAllgather: return "allgather";
    case kBroadcast: return "broadcast";
    case kAllreduce: return "allreduce";
    case kReduceScatter: return "reduce_scatter";
    case kAlltoallv: return "alltoall";
  }
  return "?";
}

constexpr size_t kMinStage = 64 * 1024;
constexpr size_t kAlign = 64;

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

size_t stage_capacity(size_t bytes) {
  size_t c = kMinStage;
  while (c < bytes) c <<= 1;
  return c;
}

std::mutex g_mu;  // one collective at a time per process
// A plain pointer on purpose: at process exit the runtime may be gone, and the workspace
// must not be freed into it. release() frees it collectively while the runtime lives.
HostCollectives* g_instance = nullptr;

}  // namespace

// What a PE publishes for one round; peers read it after the round's barrier.
struct HostCollectives::Descriptor {
  uint64_t seq;       // round number: equal on every PE
  int32_t op, dtype;  // OpCode, DataType (or -1)
  uint64_t count;     // op-specific size (elements or bytes)
  uint64_t aux;       // root, reduce op, chunk index ...
  uint64_t data_off;  // heap offset of this PE's published data for the round
  uint64_t stride;    // reduce_scatter: elements between published blocks
  uint32_t in_place;  // the published data is the caller's own buffer
  uint32_t pad0;
  uint64_t pad1;
};

struct HostCollectives::Round {
  int slot;
  bool any_in_place;
};

HostCollectives& HostCollectives::get(const char* caller) {
  auto& rt = shmem::Runtime::get(caller);
  if (!g_instance || g_instance->generation_ != shmem::Runtime::generation()) {
    // A stale instance belongs to a finalized runtime whose heap is gone: forget it unfreed.
    g_instance = new HostCollectives(rt);
  }
  return *g_instance;
}

void HostCollectives::release() {
  if (!g_instance) return;
  HostCollectives* h = g_instance;
  g_instance = nullptr;
  if (shmem::Runtime::initialized() && h->generation_ == shmem::Runtime::generation()) delete h;
}

HostCollectives::HostCollectives(shmem::Runtime& rt)
    : rt_(rt),
      group_(shmem::coll::library_world(rt)),
      generation_(shmem::Runtime::generation()),
      me_(rt.my_pe()),
      n_(rt.n_pes()) {
  chunk_ = round_up(std::max<size_t>(env::get().ccl_chunk_size, 4096), kAlign);
  // Collective: every PE builds its instance on its first collective call.
  control_ = static_cast<Descriptor*>(rt_.malloc(2 * sizeof(Descriptor), kAlign, "mori.ccl"));
  offsets_ = static_cast<uint64_t*>(rt_.malloc(2 * (2 * n_ + 1) * sizeof(uint64_t), kAlign, "mori.ccl"));
  std::memset(control_, 0, 2 * sizeof(Descriptor));
  peer_desc_.resize(n_);
}

HostCollectives::~HostCollectives() {
  // Collective frees, in the same order on every PE.
  for (auto& slot : stage_)
    for (void*& p : slot)
      if (p) rt_.free(p, "mori.ccl", true);
  rt_.free(offsets_, "mori.ccl", true);
  rt_.free(control_, "mori.ccl", true);
}

void* HostCollectives::staging(int slot, int which, size_t bytes) {
  // Sizes are the same on every PE (checked collective arguments), so growth stays collective.
  if (stage_bytes_[slot][which] < bytes) {
    if (stage_[slot][which]) rt_.free(stage_[slot][which], "mori.ccl staging", true);
    size_t cap = stage_capacity(bytes);
    stage_[slot][which] =
        rt_.malloc(cap, kAlign, "mori.ccl staging (raise MORI_SHMEM_HEAP_SIZE or lower MORI_CCL_CHUNK_SIZE)");
    stage_bytes_[slot][which] = cap;
  }
  return stage_[slot][which];
}

// Publishes this PE's descriptor and gets every PE's (the engine's meet: afterwards every PE's
// data for the round is published), and checks them.
HostCollectives::Round HostCollectives::begin(int op, int dtype, uint64_t count, uint64_t aux, const void* data,
                                              bool in_place, uint64_t stride) {
  Round r{static_cast<int>(seq_ % 2), false};
  Descriptor& mine = control_[r.slot];
  const char* base = static_cast<const char*>(rt_.heap_base());
  mine.seq = seq_;
  mine.op = op;
  mine.dtype = dtype;
  mine.count = count;
  mine.aux = aux;
  mine.data_off = data ? static_cast<uint64_t>(static_cast<const char*>(data) - base) : ~0ull;
  mine.in_place = in_place;
  mine.stride = stride;
  ++seq_;
  ++stats_.rounds;
  shmem::coll::meet(group_, &mine, peer_desc_.data(), sizeof(Descriptor), "mori.ccl");
  // Every PE checks every descriptor, so a mismatch fails on all PEs alike.
  const Descriptor& ref = peer_desc_[0];
  for (int pe = 1; pe < n_; ++pe) {
    const Descriptor& d = peer_desc_[pe];
    if (d.seq != ref.seq || d.op != ref.op || d.dtype != ref.dtype || d.count != ref.count || d.aux != ref.aux)
      raise(Status::kInvalidArgument,
            "mori.ccl %s: collective arguments differ between PEs: PE 0 is in %s (round %llu, dtype %s, count %llu, "
            "aux %llu) but PE %d is in %s (round %llu, dtype %s, count %llu, aux %llu); every PE must make the same "
            "collective calls with the same sizes",
            op_name(op), op_name(ref.op), static_cast<unsigned long long>(ref.seq),
            ref.dtype >= 0 ? dtype_name(static_cast<DataType>(ref.dtype)) : "bytes",
            static_cast<unsigned long long>(ref.count), static_cast<unsigned long long>(ref.aux), pe, op_name(d.op),
            static_cast<unsigned long long>(d.seq), d.dtype >= 0 ? dtype_name(static_cast<DataType>(d.dtype)) : "bytes",
            static_cast<unsigned long long>(d.count), static_cast<unsigned long long>(d.aux));
    r.any_in_place |= d.in_place != 0;
  }
  r.any_in_place |= ref.in_place != 0;
  return r;
}

// Local symmetric address of what `pe` published (its counterpart lives on `pe`).
const char* HostCollectives::source_on(const Round& r, int pe, int which) const {
  if (which == 0) return static_cast<const char*>(rt_.heap_base()) + peer_desc_[pe].data_off;
  return static_cast<const char*>(stage_[r.slot][1]);
}

void HostCollectives::pull(void* dst, const Round& r, int pe, size_t offset, size_t n, int which) {
  shmem::coll::pull(group_, dst, source_on(r, pe, which) + offset, pe, n, &traffic_);
}

void HostCollectives::end(const Round& r) {
  // Someone's data was read where the caller keeps it: nobody returns before all reads are done.
  if (r.any_in_place) shmem::coll::barrier(group_, "mori.ccl");
}

// True when [p, p + n) lies in the main symmetric heap, so peers can read it where it is.
static bool on_heap(shmem::Runtime& rt, const void* p, size_t n) {
  const char* b = static_cast<const char*>(rt.heap_base());
  const char* c = static_cast<const char*>(p);
  return c >= b && c + n <= b + rt.heap_size() && c >= b + shmem::kHeapReserved;
}

// ---------------------------------------------------------------- operations

void HostCollectives::allgather(void* out, const void* in, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++stats_.calls;
  if (bytes == 0) return;
  bool in_place = on_heap(rt_, in, bytes);
  if (in_place) ++stats_.zero_copy;
  char* o = static_cast<char*>(out);
  const char* i = static_cast<const char*>(in);
  size_t rounds = (bytes + chunk_ - 1) / chunk_;
  for (size_t k = 0; k < rounds; ++k) {
    size_t lo = k * chunk_, m = std::min(chunk_, bytes - lo);
    int slot = static_cast<int>(seq_ % 2);
    const void* pub = i + lo;
    void* st = staging(slot, 0, std::min(chunk_, bytes));
    if (!in_place) {
      std::memcpy(st, i + lo, m);
      pub = st;
    }
    Round r = begin(kAllgather, -1, bytes, k, pub, in_place);
    for (int step = 0; step < n_; ++step) {
      int pe = (me_ + step) % n_;  // start with self, then spread the load over peers
      if (pe == me_) {
        if (o + me_ * bytes + lo != i + lo) std::memcpy(o + me_ * bytes + lo, i + lo, m);
      } else {
        pull(o + pe * bytes + lo, r, pe, 0, m);
      }
    }
    end(r);
  }
}

void HostCollectives::broadcast(void* buf, size_t bytes, int root) {
  std::lock_guard<std::mutex> lock(g_mu);
  rt_.check_pe(root, "mori.ccl broadcast (root)");
  ++stats_.calls;
  if (bytes == 0) return;
  bool in_place = me_ == root && on_heap(rt_, buf, bytes);
  char* b = static_cast<char*>(buf);
  size_t rounds = (bytes + chunk_ - 1) / chunk_;
  for (size_t k = 0; k < rounds; ++k) {
    size_t lo = k * chunk_, m = std::min(chunk_, bytes - lo);
    int slot = static_cast<int>(seq_ % 2);
    void* st = staging(slot, 0, std::min(chunk_, bytes));
    const void* pub = st;
    if (me_ == root) {
      if (in_place)
        pub = b + lo;
      else
        std::memcpy(st, b + lo, m);
    }
    Round r = begin(kBroadcast, -1, bytes, static_cast<uint64_t>(root), pub, in_place);
    if (me_ != root) pull(b + lo, r, root, 0, m);
    end(r);
  }
}

void HostCollectives::allreduce(void* out, const void* in, size_t count, DataType t, ReduceOp op) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++stats_.calls;
  if (count == 0) return;
  const size_t e = dtype_size(t);
  bool in_place = on_heap(rt_, in, count * e);
  if (in_place) ++stats_.zero_copy;
  const size_t chunk_elems = std::max<size_t>(chunk_ / e, 1);
  const char* i = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  for (size_t lo = 0; lo < count; lo += chunk_elems) {
    size_t m = std::min(chunk_elems, count - lo);
    int slot = static_cast<int>(seq_ % 2);
    void* st = staging(slot, 0, std::min(chunk_elems, count) * e);
    char* res = static_cast<char*>(staging(slot, 1, std::min(chunk_elems, count) * e));
    const void* pub = i + lo * e;
    if (!in_place) {
      std::memcpy(st, i + lo * e, m * e);
      pub = st;
    }
    Round r = begin(kAllreduce, static_cast<int>(t), count, static_cast<uint64_t>(op) | (lo << 8), pub, false);
    std::vector<const char*> parts(n_);
    for (int pe = 0; pe < n_; ++pe) parts[pe] = source_on(r, pe);
    // Inputs are read only between the meet and the barrier inside, so an in-place input needs
    // no final barrier; the result slots are double buffered like the staging.
    shmem::coll::allreduce_parts(group_, shmem::coll::combiner(t, op), o + lo * e, parts.data(), res, m, bounce_,
                                 &traffic_, "mori.ccl all_reduce");
    end(r);
  }
}

void HostCollectives::reduce_scatter(void* out, const void* in, size_t count, DataType t, ReduceOp op) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++stats_.calls;
  if (count == 0) return;
  const size_t e = dtype_size(t);
  bool in_place = on_heap(rt_, in, n_ * count * e);
  if (in_place) ++stats_.zero_copy;
  const size_t chunk_elems = std::max<size_t>(chunk_ / (e * n_), 1);
  const char* i = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  for (size_t lo = 0; lo < count; lo += chunk_elems) {
    size_t m = std::min(chunk_elems, count - lo);
    int slot = static_cast<int>(seq_ % 2);
    char* st = static_cast<char*>(staging(slot, 0, n_ * std::min(chunk_elems, count) * e));
    const void* pub;
    uint64_t stride;
    if (in_place) {
      pub = i + lo * e;
      stride = count;
    } else {
      for (int pe = 0; pe < n_; ++pe) std::memcpy(st + pe * m * e, i + (pe * count + lo) * e, m * e);
      pub = st;
      stride = m;
    }
    Round r =
        begin(kReduceScatter, static_cast<int>(t), count, static_cast<uint64_t>(op) | (lo << 8), pub, in_place, stride);
    // Block me of every PE's part, reduced in PE order.
    std::vector<const char*> parts(n_);
    for (int pe = 0; pe < n_; ++pe) parts[pe] = source_on(r, pe) + me_ * peer_desc_[pe].stride * e;
    shmem::coll::reduce_parts(group_, shmem::coll::combiner(t, op), o + lo * e, parts.data(), n_, m, bounce_,
                              &traffic_);
    end(r);
  }
}

void HostCollectives::alltoallv(void* out, const void* in, const std::vector<size_t>& send_bytes,
                                const std::vector<size_t>& send_offsets, const std::vector<size_t>& recv_bytes,
                                const std::vector<size_t>& recv_offsets) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++stats_.calls;
  size_t in_bytes = 0;
  for (int pe = 0; pe < n_; ++pe) in_bytes = std::max(in_bytes, send_offsets[pe] + send_bytes[pe]);
  bool in_place = in_bytes > 0 && on_heap(rt_, in, in_bytes);
  if (in_place) ++stats_.zero_copy;
  int slot = static_cast<int>(seq_ % 2);
  uint64_t* mine = offsets_ + slot * (2 * n_ + 1);
  for (int pe = 0; pe < n_; ++pe) {
    mine[1 + 2 * pe] = send_offsets[pe];
    mine[2 + 2 * pe] = send_bytes[pe];
  }
  // The meet publishes the layouts and input sizes (the size travels in the descriptor's stride).
  Round r = begin(kAlltoallv, -1, static_cast<uint64_t>(n_), 0, in_place ? in : nullptr, in_place, in_bytes);
  // Staging is sized for the largest input of any PE, so it grows alike everywhere.
  size_t stage_need = 0;
  for (int pe = 0; pe < n_; ++pe)
    if (!peer_desc_[pe].in_place) stage_need = std::max<size_t>(stage_need, peer_desc_[pe].stride);
  char* st = stage_need ? static_cast<char*>(staging(slot, 0, stage_need)) : nullptr;
  if (!in_place && in_bytes) std::memcpy(st, in, in_bytes);
  shmem::coll::barrier(group_, "mori.ccl all_to_all");  // staged inputs are in place
  const char* base = static_cast<const char*>(rt_.heap_base());
  for (int step = 0; step < n_; ++step) {
    int pe = (me_ + step) % n_;
    uint64_t layout[2];  // offset and size of the block `pe` sends to me
    shmem::coll::pull(group_, layout, mine + 1 + 2 * me_, pe, sizeof(layout));
    if (layout[1] != recv_bytes[pe])
      raise(Status::kInvalidArgument,
            "mori.ccl alltoall: PE %d sends %llu bytes to PE %d, but PE %d expects %zu bytes from it "
            "(split sizes disagree)",
            pe, static_cast<unsigned long long>(layout[1]), me_, me_, recv_bytes[pe]);
    if (layout[1] == 0) continue;
    char* dst = static_cast<char*>(out) + recv_offsets[pe];
    if (pe == me_) {
      std::memcpy(dst, static_cast<const char*>(in) + layout[0], layout[1]);
      continue;
    }
    const char* sym = (peer_desc_[pe].in_place ? base + peer_desc_[pe].data_off : st) + layout[0];
    shmem::coll::pull(group_, dst, sym, pe, layout[1], &traffic_);
  }
  end(r);
}

}  // namespace mori::collectives
