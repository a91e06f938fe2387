// SPDX-License-Identifier: MIT
// Names the calling thread (as top, perf and /proc/PID/task/*/comm show it), so that a
// profile of a PE tells MORI's helper threads from the application's.
#pragma once

#include <pthread.h>

namespace mori {

// `name` is cut to the kernel's 15 characters.
inline void name_this_thread(const char* name) {
  char cut[16] = {};
  for (int i = 0; i < 15 && name[i]; ++i) cut[i] = name[i];
  pthread_setname_np(pthread_self(), cut);
}

}  // namespace mori
