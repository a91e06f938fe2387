// SPDX-License-Identifier: MIT
// The C API's waits: the runtime's tuned wait (mori/shmem/tuned_wait.h) on this PE's runtime.
#pragma once

#include <cstddef>

#include "capi/state.h"
#include "mori/shmem/tuned_wait.h"

namespace mori::capi {

template <typename Pred, typename Describe = std::nullptr_t>
void wait(Pred ready, const char* fn, const void* watched = nullptr, mori::shmem::WaitFrom from = {},
          Describe describe = nullptr) {
  if (ready()) return;
  mori::shmem::tuned_wait(rt(fn), ready, fn, watched, from, describe);
}

}  // namespace mori::capi
