// SPDX-License-Identifier: MIT
// Point-to-point synchronization: wait_until/test and their all/any/some/vector forms, signals.
#include <cstdio>
#include <string>

#include "capi/typed_helpers.h"
#include "capi/wait.h"
#include "mori/core/status.h"

using mori::shmem::Cmp;
using mori::shmem::Word;

namespace mori::capi {
namespace {

void check_cmp(int cmp) {
  if (cmp < SHMEM_CMP_EQ || cmp > SHMEM_CMP_GE)
    raise(Status::kInvalidArgument, "cmp must be one of SHMEM_CMP_EQ..SHMEM_CMP_GE, got %d", cmp);
}

// Where the next _any scan of an ivars array starts: one past the index it handed out
// last. OpenSHMEM 1.5 asks that repeated _any calls eventually return every satisfied
// index; always starting at 0 would starve the higher ones while a lower one stays
// satisfied. A few arrays per thread are remembered (a program rarely polls more).
class AnyCursors {
 public:
  size_t start(const void* base, size_t n) {
    for (auto& c : slots_)
      if (c.base == base) return c.n == n && c.next < n ? c.next : 0;
    return 0;
  }
  void handed_out(const void* base, size_t n, size_t index) {
    Slot* s = nullptr;
    for (auto& c : slots_)
      if (c.base == base) s = &c;
    if (!s) s = &slots_[victim_++ % kSlots];
    *s = {base, n, index + 1};
  }

 private:
  static constexpr size_t kSlots = 8;
  struct Slot {
    const void* base = nullptr;
    size_t n = 0;
    size_t next = 0;
  };
  Slot slots_[kSlots];
  size_t victim_ = 0;
};
thread_local AnyCursors t_any_cursors;

// Which elements currently satisfy the comparison. Returns as for the *_many helpers,
// with `done` telling whether a wait may stop. _any scans round-robin (see AnyCursors);
// _some reports every satisfied index, in index order.
size_t scan(mori::shmem::Runtime& r, Many kind, const char* base, size_t elem, size_t n, size_t* indices,
            const int* status, int cmp, const char* values, uint64_t scalar, Word w, bool* done) {
  size_t hits = 0, active = 0, found = SIZE_MAX;
  const size_t start = kind == Many::kAny ? t_any_cursors.start(base, n) : 0;
  for (size_t k = 0; k < n; ++k) {
    size_t i = start + k < n ? start + k : start + k - n;
    if (status && status[i]) continue;
    ++active;
    uint64_t v = scalar;
    if (values) std::memcpy(&v, values + i * elem, elem);
    if (!r.test(base + i * elem, static_cast<Cmp>(cmp), v, w)) continue;
    if (found == SIZE_MAX) found = i;
    if (kind == Many::kAny) break;  // the first satisfied one after the cursor is the answer
    if (kind == Many::kSome && indices) indices[hits] = i;
    ++hits;
  }
  switch (kind) {
    case Many::kAll: *done = hits == active; return *done ? 1 : 0;
    case Many::kAny:
      *done = active == 0 || found != SIZE_MAX;
      if (found != SIZE_MAX) t_any_cursors.handed_out(base, n, found);
      return found;
    case Many::kSome: *done = active == 0 || hits > 0; return hits;
  }
  return 0;
}

const char* cmp_text(int cmp) {
  static const char* ops[] = {"==", "!=", ">", "<=", "<", ">="};
  return ops[cmp];
}

}  // namespace

void wait_until(const void* ivar, int cmp, uint64_t value, Word w, const char* fn) noexcept {
  return capi_call(fn, [&] {
    check_cmp(cmp);
    auto& r = rt(fn);
    wait([&] { return r.test(ivar, static_cast<Cmp>(cmp), value, w); }, fn, ivar, mori::shmem::WaitFrom{},
         [&] {
           char text[160];
           std::snprintf(text, sizeof(text), "the %d-byte word at %p to become %s 0x%llx (a write by any PE)", w.width,
                         ivar, cmp_text(cmp), static_cast<unsigned long long>(value));
           return std::string(text);
         });
  });
}

int test(const void* ivar, int cmp, uint64_t value, Word w, const char* fn) noexcept {
  return capi_call(fn, [&] {
    check_cmp(cmp);
    return rt(fn).test(ivar, static_cast<Cmp>(cmp), value, w) ? 1 : 0;
  });
}

size_t wait_until_many(Many kind, const void* ivars, size_t elem, size_t n, size_t* indices, const int* status, int cmp,
                       const void* values, uint64_t scalar, Word w, const char* fn) noexcept {
  return capi_call(fn, [&] {
    check_cmp(cmp);
    auto& r = rt(fn);
    size_t result = 0;
    bool done = false;
    auto base = static_cast<const char*>(ivars);
    auto vals = static_cast<const char*>(values);
    wait(
        [&] {
          result = scan(r, kind, base, elem, n, indices, status, cmp, vals, scalar, w, &done);
          return done;
        },
        fn, nullptr, mori::shmem::WaitFrom{},
        [&] {
          char text[160];
          std::snprintf(text, sizeof(text), "%s of the %zu %d-byte words at %p to compare %s (writes by any PE)",
                        kind == Many::kAll   ? "all"
                        : kind == Many::kAny ? "any"
                                             : "some",
                        n, w.width, ivars, cmp_text(cmp));
          return std::string(text);
        });
    return result;
  });
}

size_t test_many(Many kind, const void* ivars, size_t elem, size_t n, size_t* indices, const int* status, int cmp,
                 const void* values, uint64_t scalar, Word w, const char* fn) noexcept {
  return capi_call(fn, [&]() -> size_t {
    check_cmp(cmp);
    bool done = false;
    size_t result = scan(rt(fn), kind, static_cast<const char*>(ivars), elem, n, indices, status, cmp,
                         static_cast<const char*>(values), scalar, w, &done);
    if (kind == Many::kAll) return done ? 1 : 0;
    return result;
  });
}

}  // namespace mori::capi

using namespace mori::capi;

extern "C" {

uint64_t shmem_signal_fetch(const uint64_t* sig_addr) {
  return capi_call("shmem_signal_fetch", [&] { return rt("shmem_signal_fetch").signal_fetch(sig_addr); });
}

uint64_t shmem_signal_wait_until(uint64_t* sig_addr, int cmp, uint64_t cmp_value) {
  const char* fn = "shmem_signal_wait_until";
  return capi_call(fn, [&] {
    check_cmp(cmp);
    auto& r = rt(fn);
    uint64_t seen = 0;
    wait(
        [&] {
          seen = __atomic_load_n(sig_addr, __ATOMIC_ACQUIRE);
          return r.test(&seen, static_cast<Cmp>(cmp), cmp_value, word_of<uint64_t>());
        },
        fn, sig_addr, mori::shmem::WaitFrom{},
        [&] {
          char text[160];
          std::snprintf(text, sizeof(text), "the signal at %p to become %s %llu (it holds %llu)",
                        static_cast<void*>(sig_addr), cmp_text(cmp), static_cast<unsigned long long>(cmp_value),
                        static_cast<unsigned long long>(seen));
          return std::string(text);
        });
    return seen;
  });
}

// OpenSHMEM 1.6: update a remote signal without data (an atomic on the signal word).
void shmem_ctx_signal_add(shmem_ctx_t ctx, uint64_t* sig_addr, uint64_t signal, int pe) {
  amo(ctx, sig_addr, mori::AmoOp::kAdd, 8, signal, 0, pe, "shmem_ctx_signal_add");
}
void shmem_ctx_signal_set(shmem_ctx_t ctx, uint64_t* sig_addr, uint64_t signal, int pe) {
  amo(ctx, sig_addr, mori::AmoOp::kSet, 8, signal, 0, pe, "shmem_ctx_signal_set");
}
void shmem_signal_add(uint64_t* sig_addr, uint64_t signal, int pe) {
  amo(SHMEM_CTX_DEFAULT, sig_addr, mori::AmoOp::kAdd, 8, signal, 0, pe, "shmem_signal_add");
}
void shmem_signal_set(uint64_t* sig_addr, uint64_t signal, int pe) {
  amo(SHMEM_CTX_DEFAULT, sig_addr, mori::AmoOp::kSet, 8, signal, 0, pe, "shmem_signal_set");
}

void shmem_wait(long* ivar, long cmp_value) {
  wait_until(ivar, SHMEM_CMP_NE, bits<long>(cmp_value), word_of<long>(), "shmem_wait");
}

void shmem_wait_until(long* ivar, int cmp, long cmp_value) {
  wait_until(ivar, cmp, bits<long>(cmp_value), word_of<long>(), "shmem_wait_until");
}

}  // extern "C"
