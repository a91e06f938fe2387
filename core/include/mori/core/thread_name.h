// SPDX-License-Identifier: MIT
// Names a thread (as top, perf and /proc/PID/task/*/comm show it), so that a profile of a PE
// tells MORI's helper threads from the application's.
#pragma once

#include <pthread.h>

#include <thread>

namespace mori {

// Named by its creator right after the start, so the name is there before anyone can look
// (a name set by the thread itself is missing until it has been scheduled). `name` is cut to
// the kernel's 15 characters.
inline void name_thread(std::thread& t, const char* name) {
  char cut[16] = {};
  for (int i = 0; i < 15 && name[i]; ++i) cut[i] = name[i];
  pthread_setname_np(t.native_handle(), cut);
}

}  // namespace mori
