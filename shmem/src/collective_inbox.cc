// SPDX-License-Identifier: MIT
// The engine's inbox (mori/shmem/collective_engine.h): message slots and staging.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "mori/core/status.h"
#include "mori/shmem/collective_engine.h"

namespace mori::shmem::coll {

Inbox& inbox() {
  static Inbox the_inbox;
  return the_inbox;
}

void Inbox::setup(Runtime& r) {
  teardown();
  generation_ = Runtime::generation();
  n_pes_ = r.n_pes();
  my_pe_ = r.my_pe();
  if (n_pes_ > kMaxPes) return;  // larger jobs keep the barrier-based collectives
  size_t cells = static_cast<size_t>(kChannels) * n_pes_;
  // Collective: every PE allocates the same sizes in the same order (no barrier here: the
  // caller's closing barrier_all orders the clearing before any peer's first message).
  slots_ = static_cast<Slot*>(r.malloc(cells * 2 * sizeof(Slot), 64, "shmem_init", false));
  acks_ = static_cast<Ack*>(r.malloc(cells * sizeof(Ack), 64, "shmem_init", false));
  stages_ = static_cast<unsigned char*>(r.malloc(cells * 2 * kMessageBytes, 64, "shmem_init", false));
  wide_part_ = std::max(kMessageBytes, kWideStageBytes / static_cast<size_t>(n_pes_) / 64 * 64);
  wide_staging_ = r.topology().local_size() > sysconf(_SC_NPROCESSORS_ONLN);
  wide_stages_ = static_cast<unsigned char*>(
      r.malloc(kWideChannels * static_cast<size_t>(n_pes_) * 2 * wide_part_, 64, "shmem_init", false));
  for (size_t i = 0; i < cells * 2; ++i) slots_[i].seq = 0;
  std::memset(acks_, 0, cells * sizeof(Ack));
  sent_.assign(cells, 0);
  received_.assign(cells, 0);
  staged_.assign(kChannels, 0);
}

void Inbox::teardown() {
  // The heap goes with the runtime at finalize; only forget the addresses.
  slots_ = nullptr;
  acks_ = nullptr;
  stages_ = nullptr;
  wide_stages_ = nullptr;
  wide_part_ = 0;
  wide_staging_ = false;
  generation_ = 0;
  sent_.clear();
  staged_.clear();
  received_.clear();
}

bool Inbox::usable(const Group& g, size_t bytes, Runtime& r) const {
  return slots_ && g.n > 1 && bytes <= kMessageBytes && n_pes_ == r.n_pes() && g.channel >= 0 && g.channel < kChannels;
}

Inbox::Slot* Inbox::slot(int channel, int sender, uint64_t seq) const {
  return &slots_[index(channel, sender) * 2 + (seq & 1)];
}

Inbox::Ack* Inbox::ack(int channel, int receiver) const { return &acks_[index(channel, receiver)]; }

bool Inbox::stageable(const Group& g, size_t bytes, Runtime& r) const {
  // Active sets share one channel: a subset's staged collectives would advance only its
  // members' count of that channel (and two subsets with the same first member would share
  // its staging), so only sets of every PE stage; subsets go by message or by barrier.
  if (g.channel == kActiveSetChannel && g.n != n_pes_) return false;
  const size_t limit = wide_index(g.channel) >= 0 && wide_staging_ ? wide_part_ : kMessageBytes;
  return bytes <= limit && usable(g, 0, r);
}

char* Inbox::staged_part(const Group& g, int member, uint64_t parity, Runtime& r) const {
  const int wide = wide_index(g.channel);
  unsigned char* local = wide >= 0
                             ? wide_stages_ + ((static_cast<size_t>(wide) * n_pes_ + member) * 2 + parity) * wide_part_
                             : stages_ + ((index(g.channel, member) * 2) + parity) * kMessageBytes;
  return static_cast<char*>(r.ptr(local, g.pes[0]));
}

void Inbox::send(const Group& g, int to, const void* data, size_t bytes, const char* fn) {
  auto& r = Runtime::get(fn);
  const int pe = g.pes[to];
  uint64_t& seq = sent_[index(g.channel, pe)];
  const uint64_t next = seq + 1;
  // The slot holds message next-2 until the receiver acknowledged it.
  if (next > 2) {
    uint64_t* taken = &ack(g.channel, pe)->seq;
    tuned_wait(
        r, [&] { return __atomic_load_n(taken, __ATOMIC_ACQUIRE) >= next - 2; }, fn, taken,
        WaitFrom{pe, 0, r.rings_on_delivery(pe)},
        [&] {
          return "PE " + std::to_string(pe) + " to take collective message " + std::to_string(next - 2) +
                 " from its inbox";
        });
  }
  Slot* s = slot(g.channel, my_pe_, next);
  r.notify(s->data, data, bytes, &s->seq, next, SignalOp::kSet, pe, fn);
  seq = next;
}

void Inbox::receive(const Group& g, int from, void* out, size_t bytes, const char* fn) {
  auto& r = Runtime::get(fn);
  const int pe = g.pes[from];
  uint64_t& seq = received_[index(g.channel, pe)];
  const uint64_t next = seq + 1;
  Slot* s = slot(g.channel, pe, next);
  tuned_wait(
      r, [&] { return __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) == next; }, fn, &s->seq,
      WaitFrom{pe, 0, r.rings_on_delivery(pe)},
      [&] {
        return "PE " + std::to_string(pe) + " to send its part of the collective (message " + std::to_string(next) +
               ")";
      });
  if (bytes) std::memcpy(out, s->data, bytes);
  seq = next;
  r.notify(nullptr, nullptr, 0, &ack(g.channel, my_pe_)->seq, next, SignalOp::kSet, pe, fn);
}

}  // namespace mori::shmem::coll
