// SPDX-License-Identifier: MIT
// The CUDA pieces of the IO engine: host staging for GPU memory on the tcp path, and CUDA
// IPC + copy engine for GPU memory of engines on one node. Without CUDA every call fails
// with a message saying so (registration of GPU descriptors still works).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mori/io/transfer_status.h"
#include "mori/io/types.h"

namespace mori::io::gpu {

bool available();  // built with CUDA and a device is visible
// PCI bus id ("0000:3b:00.0", lower case) of a device, "" when unknown.
std::string bus_id(int device);
// IPC handle of the allocation holding ptr, and ptr's offset in it. False when not possible.
bool export_ipc(const void* ptr, IpcHandle* handle, uint64_t* offset);

// Pinned host memory (plain memory without CUDA).
class HostBuffer {
 public:
  explicit HostBuffer(size_t n);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  bool pinned_ = false;
};

// Synchronous copies between device memory and host memory on the calling thread's
// private stream. Return "" or an error message.
std::string copy_to_host(void* host, const void* device_ptr, size_t n, int device);
std::string copy_to_device(void* device_ptr, const void* host, size_t n, int device);

// Copies between GPUs of one node (same or other process), completed in the background.
class IpcCopier {
 public:
  IpcCopier(int num_streams);
  ~IpcCopier();
  // Device pointer of a remote region (opened once, cached); nullptr + *why on failure.
  char* open(const MemoryDesc& remote, int local_device, bool same_process, std::string* why);
  // dst[i] <- src[i] for each segment on one stream; `done` runs once all have completed,
  // with "" or an error: on the thread that waits for the transfer when one does (it
  // synchronizes the copy's event itself, no hand-off), else on the copier's completion thread.
  // Returns what such a waiter drives (null when the copy failed at once).
  std::shared_ptr<StatusDriver> copy(int device, const std::vector<std::pair<char*, const char*>>& dst_src,
                                     const std::vector<size_t>& sizes, std::function<void(const std::string&)> done);
  void forget(const std::string& engine_key, uint32_t region);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mori::io::gpu
