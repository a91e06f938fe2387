// SPDX-License-Identifier: MIT
// The bootstrap: the out-of-band network PEs use to find each other before any
// transport exists. A small verb set over byte blobs; every wait has a timeout
// (MORI_BOOTSTRAP_TIMEOUT) and its error names the rank that did not arrive.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace mori {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank contributes `bytes` bytes; `recv` receives size() * bytes, ordered by rank.
  virtual void allgather(const void* send, void* recv, size_t bytes) = 0;
  // `bytes` of `buf` on `root` are copied into `buf` on every rank.
  virtual void broadcast(void* buf, size_t bytes, int root);
  virtual void barrier();
  // Short human description ("tcp-store 10.0.0.1:4711", "mpi", "python:torch").
  virtual std::string describe() const = 0;
  // Called once the job is finished with the bootstrap (finalize): lets servers exit cleanly.
  virtual void shutdown() {}
  // The job's secret (32 raw bytes) that transports demand from connecting peers.
  // Store-based bootstraps return the store's secret; the default draws one on rank 0
  // and broadcasts it over this bootstrap, so its first call is collective.
  virtual std::string job_secret();

  // Convenience: allgather of a vector of trivially-copyable values.
  template <typename T>
  std::vector<T> allgather_values(const T& mine) {
    std::vector<T> all(size());
    allgather(&mine, all.data(), sizeof(T));
    return all;
  }

 private:
  std::string job_secret_;  // cached by the default job_secret()
};

// A bootstrap of one rank (no peers); used by single-process programs.
std::unique_ptr<Bootstrap> make_single_bootstrap();

}  // namespace mori
