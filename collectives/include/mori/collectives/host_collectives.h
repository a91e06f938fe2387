// SPDX-License-Identifier: MIT
// MORI-CCL's collectives over the shmem runtime's host heap, for CPU memory: a thin layer over
// the host collective engine (mori/shmem/collective_engine.h) on its library world group.
//
// Every PE of the world calls the same operation with the same arguments (checked: a
// mismatch raises InvalidArgument on every PE). Each PE publishes its input in symmetric
// memory (its own buffer when that is already on the heap, else a staging copy), the PEs
// exchange descriptors of what they published (the engine's meet), and the engine pulls what
// each PE needs from the peers: with plain loads/memcpy where the runtime maps the peer's
// heap (same host), with Runtime::get otherwise, so any transport works.
//
// Staging is double buffered: call k uses slot k % 2, and the meet that every call holds
// after publishing guarantees that nobody still reads slot k % 2 of call k - 2.
// Calls whose input was read in place end with a barrier, so the caller may reuse
// its buffer as soon as the call returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mori/collectives/dtype.h"

#include "mori/shmem/collective_engine.h"

namespace mori::shmem {
class Runtime;
}

namespace mori::collectives {

struct HostStats {
  uint64_t calls = 0;            // collective calls made
  uint64_t rounds = 0;           // rounds (a large staged call is split into chunks)
  uint64_t zero_copy = 0;        // calls whose input was read in place from the heap
  uint64_t bytes_direct = 0;     // bytes pulled with direct loads from mapped peers
  uint64_t bytes_transport = 0;  // bytes pulled through Runtime::get
};

class HostCollectives {
 public:
  // The instance for the live runtime (rebuilt after a finalize + init).
  static HostCollectives& get(const char* caller);
  // Drops the workspace (collective: frees symmetric memory). Safe to call when none exists.
  static void release();

  // out (n * bytes) = concatenation over PEs of each PE's `in` (bytes).
  void allgather(void* out, const void* in, size_t bytes);
  // buf (bytes) on every PE = buf on `root`.
  void broadcast(void* buf, size_t bytes, int root);
  // out (count) = op over PEs of `in` (count). out may equal in.
  void allreduce(void* out, const void* in, size_t count, DataType t, ReduceOp op);
  // out (count) = op over PEs of block my_pe of `in` (n * count).
  void reduce_scatter(void* out, const void* in, size_t count, DataType t, ReduceOp op);
  // Block j of `in` (send_bytes[j] bytes at send_offsets[j]) goes to PE j, which stores it at
  // its recv_offsets[my_pe] (recv_bytes[my_pe] bytes, which must equal what was sent).
  void alltoallv(void* out, const void* in, const std::vector<size_t>& send_bytes,
                 const std::vector<size_t>& send_offsets, const std::vector<size_t>& recv_bytes,
                 const std::vector<size_t>& recv_offsets);

  HostStats stats() const {
    HostStats s = stats_;
    s.bytes_direct = traffic_.direct;
    s.bytes_transport = traffic_.transport;
    return s;
  }
  // Largest staging buffer per slot; bigger staged calls run in chunks of this size.
  size_t chunk_bytes() const { return chunk_; }

  ~HostCollectives();

 private:
  struct Descriptor;
  struct Round;
  explicit HostCollectives(shmem::Runtime& rt);

  Round begin(int op, int dtype, uint64_t count, uint64_t aux, const void* data, bool in_place, uint64_t stride = 0);
  void* staging(int slot, int which, size_t bytes);
  const char* source_on(const Round& r, int pe, int which = 0) const;
  void pull(void* dst, const Round& r, int pe, size_t offset, size_t n, int which = 0);
  void end(const Round& r);

  shmem::Runtime& rt_;
  shmem::coll::Group& group_;  // the engine's library world group
  uint64_t generation_;
  int me_, n_;
  size_t chunk_;
  uint64_t seq_ = 0;
  Descriptor* control_ = nullptr;  // symmetric: 2 slots of descriptors
  uint64_t* offsets_ = nullptr;    // symmetric: 2 slots of n send offsets/sizes (alltoallv)
  void* stage_[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  size_t stage_bytes_[2][2] = {{0, 0}, {0, 0}};
  std::vector<Descriptor> peer_desc_;  // copies of peers' descriptors for the current round
  std::vector<char> bounce_;           // reduce: peer data fetched through a transport
  HostStats stats_;                    // calls, rounds, zero_copy (bytes are in traffic_)
  shmem::coll::Traffic traffic_;
};

}  // namespace mori::collectives
