// SPDX-License-Identifier: MIT
#include "mori/core/heap_allocator.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "mori/core/status.h"

namespace mori {
namespace {
// Rounds up to a multiple of `a` (a power of two); nullopt where that would pass SIZE_MAX.
std::optional<size_t> align_up(size_t v, size_t a) {
  if (v > SIZE_MAX - (a - 1)) return std::nullopt;
  return (v + a - 1) & ~(a - 1);
}
}  // namespace

std::string human_bytes(size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? format("%zu B", b) : format("%.1f %s", v, units[u]);
}

HeapAllocator::HeapAllocator(size_t begin, size_t end) : begin_(begin), end_(end) {
  if (end > begin) free_[begin] = end - begin;
}

std::optional<size_t> HeapAllocator::allocate(size_t bytes, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    raise(Status::kInvalidArgument, "alignment must be a power of two, got %zu", alignment);
  alignment = std::max(alignment, kMinAlign);
  // A request larger than the heap never fits; refusing it here also keeps the rounding
  // below from wrapping near SIZE_MAX into a small block.
  if (bytes > capacity()) return std::nullopt;
  bytes = *align_up(std::max<size_t>(bytes, 1), kMinAlign);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    size_t off = it->first, len = it->second;
    auto start = align_up(off, alignment);
    if (!start || *start - off >= len || bytes > len - (*start - off)) continue;
    size_t begin = *start;
    free_.erase(it);
    if (begin > off) free_[off] = begin - off;
    if (begin + bytes < off + len) free_[begin + bytes] = off + len - (begin + bytes);
    used_[begin] = bytes;
    return begin;
  }
  return std::nullopt;
}

size_t HeapAllocator::block_size(size_t offset) const {
  auto it = used_.find(offset);
  return it == used_.end() ? 0 : it->second;
}

void HeapAllocator::insert_free(size_t offset, size_t size) {
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    free_.erase(next);
  }
  free_[offset] = size;
}

bool HeapAllocator::release(size_t offset) {
  auto it = used_.find(offset);
  if (it == used_.end()) return false;
  size_t size = it->second;
  used_.erase(it);
  insert_free(offset, size);
  return true;
}

bool HeapAllocator::resize_in_place(size_t offset, size_t new_bytes) {
  auto it = used_.find(offset);
  if (it == used_.end() || new_bytes > capacity()) return false;
  new_bytes = *align_up(std::max<size_t>(new_bytes, 1), kMinAlign);
  size_t old = it->second;
  if (new_bytes <= old) {
    if (new_bytes < old) insert_free(offset + new_bytes, old - new_bytes);
    it->second = new_bytes;
    return true;
  }
  auto next = free_.find(offset + old);
  if (next == free_.end() || old + next->second < new_bytes) return false;
  size_t rest = old + next->second - new_bytes;
  free_.erase(next);
  if (rest) free_[offset + new_bytes] = rest;
  it->second = new_bytes;
  return true;
}

size_t HeapAllocator::bytes_free() const {
  size_t total = 0;
  for (auto& [off, len] : free_) total += len;
  return total;
}

size_t HeapAllocator::largest_free_block() const {
  size_t best = 0;
  for (auto& [off, len] : free_) best = std::max(best, len);
  return best;
}

std::string HeapAllocator::describe_exhaustion(size_t bytes, size_t alignment) const {
  return format("requested %s (alignment %zu) but only %s is free (largest free block %s) of a %s heap",
                human_bytes(bytes).c_str(), alignment, human_bytes(bytes_free()).c_str(),
                human_bytes(largest_free_block()).c_str(), human_bytes(capacity()).c_str());
}

}  // namespace mori
