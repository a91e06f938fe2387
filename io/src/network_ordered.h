// SPDX-License-Identifier: MIT
// Registered memory sent from or received into for a transfer. Its accesses are ordered through
// the network: a target serves a request on bytes only after the peer had our answer to the
// last one on them, and an initiator's caller reuses a source only after the target answered,
// i.e. after its kernel had copied the bytes out. ThreadSanitizer cannot see that order (to it,
// two connection threads, or a lane's sending thread and the caller, then touch the bytes with
// no lock or atomic between them). Inside a NetworkOrderedAccess the calling thread's reads and
// writes are not checked, so scripts/tsan.sh reports races on the engine's own state only.
// Nothing in other builds.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace mori::io {

class NetworkOrderedAccess {
 public:
#if defined(__SANITIZE_THREAD__)
  NetworkOrderedAccess() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~NetworkOrderedAccess() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  NetworkOrderedAccess() = default;
#endif
  NetworkOrderedAccess(const NetworkOrderedAccess&) = delete;
  NetworkOrderedAccess& operator=(const NetworkOrderedAccess&) = delete;
};

}  // namespace mori::io
