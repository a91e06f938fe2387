// SPDX-License-Identifier: MIT
// Small collectives without barriers. A barrier-based collective costs two barriers plus the
// data, and when PEs outnumber cores each barrier costs every waiting PE a sleep and a
// wake-up. Instead, each PE keeps per channel (a team's slot, or one for all active sets) and
// per sender two message slots in the symmetric heap: a sender puts its part straight into the
// receiver's slot with a sequence number as the signal, and the receiver copies it out and
// acknowledges. A sender reuses a slot only once its previous message there was acknowledged,
// so a fast PE can run at most two collectives ahead of a slow one, and nobody waits for
// anybody else's arrival: a small fcollect, broadcast, alltoall or reduction is one message
// per pair. The users' dest buffers are only written by their owner, so a program may fill
// dest right before the call (as many do) without a barrier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "capi/collectives.h"
#include "capi/state.h"

namespace mori::capi {

class Inbox {
 public:
  static constexpr size_t kMessageBytes = 1024;  // largest part that travels through a slot
  static constexpr int kChannels = kMaxTeams + 1;  // one per team slot, the last for active sets
  static constexpr int kActiveSetChannel = kMaxTeams;
  static constexpr int kMaxPes = 64;  // the slots take kChannels * 2 * ~1 KiB per PE of the job
  static constexpr size_t kWideStageBytes = 64 * 1024;  // a wide channel's parts, all members together

  // Collective over the world (at shmem_init): allocates and clears this PE's slots.
  void setup(mori::shmem::Runtime& r);
  void teardown();

  // Whether a collective over `g` moving parts of `bytes` goes through the slots. Every
  // member gives the same answer (same arguments, same topology, same job size).
  bool usable(const Group& g, size_t bytes, mori::shmem::Runtime& r) const;

  // Whether a collective over `g` with parts of `bytes` may stage them (same host is the
  // caller's check). Parts up to kMessageBytes on every channel; on the world team's and the
  // active sets' channels up to kWideStageBytes / job size (an alltoall of 1 KiB blocks at 8 PEs
  // stages 8 KiB a member), which keeps those two stagings at 256 KiB a PE for any job size,
  // but only where this host's PEs outnumber its cores (see wide_staging_).
  bool stageable(const Group& g, size_t bytes, mori::shmem::Runtime& r) const;
  // Same host: where member `member`'s part of the next staged collective on `g`'s channel goes,
  // in member 0's memory (mapped here). Members write their parts there, meet at the central
  // barrier, and read every part from there: one wake-up per PE per collective, as a barrier.
  // Two parities alternate, so a part is never overwritten while a slow member still reads it
  // (writing parity p again needs everyone's arrival at the meeting in between).
  char* staged_part(const Group& g, int member, uint64_t parity, mori::shmem::Runtime& r) const;
  // The parity of the next staged collective on `g`'s channel (every member counts alike: the
  // active sets' channel stages only for sets of the whole job, and a team's channel counts
  // from 0 when the team is made).
  uint64_t next_stage(const Group& g) { return staged_[g.channel]++ & 1; }
  void restart_stages(int channel) {
    if (channel >= 0 && static_cast<size_t>(channel) < staged_.size()) staged_[channel] = 0;
  }

  // Sends `bytes` (<= kMessageBytes) to member `to` of `g`.
  void send(const Group& g, int to, const void* data, size_t bytes, const char* fn);
  // Waits for the next message from member `from` of `g` and copies `bytes` of it to `out`.
  void receive(const Group& g, int from, void* out, size_t bytes, const char* fn);

 private:
  struct alignas(64) Slot {
    uint64_t seq;  // the message's number on its channel (1, 2, ...); written last
    unsigned char data[kMessageBytes];
  };
  struct alignas(64) Ack {
    uint64_t seq;  // the last message number the receiver took out of its slot
  };
  Slot* slot(int channel, int sender, uint64_t seq) const;
  Ack* ack(int channel, int receiver) const;
  size_t index(int channel, int pe) const { return static_cast<size_t>(channel) * n_pes_ + pe; }

  Slot* slots_ = nullptr;  // [channel][sender][2], on every PE at the same offset
  unsigned char* stages_ = nullptr;  // [channel][member][2][kMessageBytes]: staged parts (member 0's used)
  unsigned char* wide_stages_ = nullptr;  // [world, active sets][member][2][wide_part_]: the same, wider
  size_t wide_part_ = 0;
  // Wide parts stage only when the host's PEs outnumber its cores. Staging writes every part
  // into lines the other cores read in the previous collective, one ownership transfer per 64 B
  // line that the writer waits for, while the direct path's gets only read lines that stay
  // shared: 2 PEs with a core each, broadcast+barrier of 16-32 KiB took 14-33 us staged, 2.0-8.4
  // direct (fcollect 13-48 against 2.5-9.6; 2-core AMD VM, alternated runs), the cliff below the
  // 64 KiB rows. With PEs sharing cores the barriers the staging saves cost more (4 PEs on 2
  // cores: 2-16 KiB broadcast+barrier 26-38 us staged, 30-81 direct). Decided from the host's
  // PE and core counts, the same on every PE of it (not the affinity mask, which may differ).
  bool wide_staging_ = false;
  // Index into wide_stages_ of a channel (-1: it stages in stages_).
  static int wide_index(int channel) { return channel == 0 ? 0 : channel == kActiveSetChannel ? 1 : -1; }
  Ack* acks_ = nullptr;    // [channel][receiver]: what each receiver took from this PE
  int n_pes_ = 0;
  int my_pe_ = -1;
  std::vector<uint64_t> sent_;      // [channel][receiver]: messages sent
  std::vector<uint64_t> received_;  // [channel][sender]: messages taken
  std::vector<uint64_t> staged_;    // [channel]: staged collectives run
};

Inbox& inbox();

}  // namespace mori::capi
