// SPDX-License-Identifier: MIT
// The argument checks every Client runs before it touches anything (client.h): each failure is
// mori::Error(kInvalidArgument) naming the Python argument ("batch_put_from_ptr: sizes[2] must be
// > 0"), raised before any value is written. Shared by the local and the per-host-server clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mori::umbp {

// A key: 1 .. kMaxKeyBytes bytes.
void check_key(const char* call, const std::string& key, const char* arg = "key");
// One value pointer (`arg` names it: src, dst) and its size (> 0). A pointer into GPU memory is
// refused: the store's tiers are host memory.
void check_buffer(const char* call, uintptr_t ptr, size_t size, const char* ptr_arg, const char* size_arg = "size");
// The CUDA device whose memory holds `ptr`; -1 for host memory (and always in a process that has not
// loaded the CUDA driver, which is not asked then: no context is made for the question).
int pointer_device(uintptr_t ptr);
// A batch: keys, pointers and sizes of one length, each element as above; `depths` (may be null)
// empty or of that length too.
void check_batch(const char* call, const std::vector<std::string>& keys, const std::vector<uintptr_t>& ptrs,
                 const std::vector<size_t>& sizes, const std::vector<int>* depths = nullptr);
void check_keys(const char* call, const std::vector<std::string>& keys);
// The same over views of the keys (the Python strings' own bytes: no copy of them).
void check_keys(const char* call, const std::string_view* keys, size_t n);

}  // namespace mori::umbp
