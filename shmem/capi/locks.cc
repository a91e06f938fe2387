// SPDX-License-Identifier: MIT
// Distributed locks: an MCS queue. The user's symmetric `long` on PE 0 holds the
// queue tail; each waiter spins on its own node in its own memory, and the holder
// hands over by writing into the successor's node, which wakes exactly that PE.
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "capi/state.h"
#include "capi/wait.h"
#include "mori/core/status.h"

namespace mori::capi {
namespace {

constexpr int kTailPe = 0;
std::mutex g_mu;
std::map<const long*, int> g_held;  // lock -> node this PE holds it with

uint64_t code_of(int pe, int node) { return (static_cast<uint64_t>(pe) + 1) << 8 | static_cast<uint64_t>(node); }
int pe_of(uint64_t code) { return static_cast<int>(code >> 8) - 1; }
int node_of(uint64_t code) { return static_cast<int>(code & 0xff); }

int take_node(const char* fn) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& st = state();
  for (int i = 0; i < kMaxLockNodes; ++i)
    if (!(st.used_nodes >> i & 1)) {
      st.used_nodes |= 1ull << i;
      return i;
    }
  raise(Status::kInvalidUsage, "this PE already waits for or holds %d locks", kMaxLockNodes);
}

void give_node(int i) {
  std::lock_guard<std::mutex> lock(g_mu);
  state().used_nodes &= ~(1ull << i);
}

LockNode& node(int i) { return state().sym->locks[i]; }

std::string ptr_text(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

}  // namespace
}  // namespace mori::capi

using namespace mori::capi;
using mori::AmoOp;

extern "C" {

void shmem_set_lock(long* lock) {
  const char* fn = "shmem_set_lock";
  return capi_call(fn, [&] {
    auto& r = rt(fn);
    {
      std::lock_guard<std::mutex> g(g_mu);
      if (g_held.count(lock)) mori::raise(mori::Status::kInvalidUsage, "PE %d already holds lock %p", r.my_pe(), lock);
    }
    int i = take_node(fn);
    LockNode& mine = node(i);
    __atomic_store_n(&mine.next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&mine.locked, 1, __ATOMIC_RELEASE);
    uint64_t me = code_of(r.my_pe(), i);
    uint64_t prev = r.atomic(lock, AmoOp::kSwap, 8, me, 0, kTailPe, fn);
    if (prev != 0) {
      r.atomic(&node(node_of(prev)).next, AmoOp::kSet, 8, me, 0, pe_of(prev), fn);
      int holder = pe_of(prev);
      wait([&] { return __atomic_load_n(&mine.locked, __ATOMIC_ACQUIRE) == 0; }, fn, &mine.locked,
           mori::shmem::WaitFrom{holder},
           [&] {
             return "PE " + std::to_string(holder) + " (ahead in the queue of lock " + ptr_text(lock) +
                    ") to pass it on";
           });
    }
    std::lock_guard<std::mutex> g(g_mu);
    g_held[lock] = i;
  });
}

int shmem_test_lock(long* lock) {
  const char* fn = "shmem_test_lock";
  return capi_call(fn, [&] {
    auto& r = rt(fn);
    {
      std::lock_guard<std::mutex> g(g_mu);
      if (g_held.count(lock)) return 1;  // held by this PE: not acquirable again
    }
    int i = take_node(fn);
    LockNode& mine = node(i);
    __atomic_store_n(&mine.next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&mine.locked, 0, __ATOMIC_RELEASE);
    uint64_t prev = r.atomic(lock, AmoOp::kCompareSwap, 8, code_of(r.my_pe(), i), 0, kTailPe, fn);
    if (prev != 0) {
      give_node(i);
      return 1;
    }
    std::lock_guard<std::mutex> g(g_mu);
    g_held[lock] = i;
    return 0;
  });
}

void shmem_clear_lock(long* lock) {
  const char* fn = "shmem_clear_lock";
  return capi_call(fn, [&] {
    auto& r = rt(fn);
    int i;
    {
      std::lock_guard<std::mutex> g(g_mu);
      auto it = g_held.find(lock);
      if (it == g_held.end()) mori::raise(mori::Status::kInvalidUsage, "PE %d does not hold lock %p", r.my_pe(), lock);
      i = it->second;
      g_held.erase(it);
    }
    r.quiet();  // writes made under the lock are complete before the next holder enters
    LockNode& mine = node(i);
    uint64_t me = code_of(r.my_pe(), i);
    if (__atomic_load_n(&mine.next, __ATOMIC_ACQUIRE) == 0) {
      if (r.atomic(lock, AmoOp::kCompareSwap, 8, 0, me, kTailPe, fn) == me) {
        give_node(i);
        return;
      }
      // A successor swapped itself in and is about to link to us.
      wait([&] { return __atomic_load_n(&mine.next, __ATOMIC_ACQUIRE) != 0; }, fn, &mine.next, mori::shmem::WaitFrom{},
           [&] { return "the PE queued next for lock " + ptr_text(lock) + " to link itself in"; });
    }
    uint64_t succ = __atomic_load_n(&mine.next, __ATOMIC_ACQUIRE);
    r.atomic(&node(node_of(succ)).locked, AmoOp::kSet, 8, 0, 0, pe_of(succ), fn);
    give_node(i);
  });
}

}  // extern "C"
