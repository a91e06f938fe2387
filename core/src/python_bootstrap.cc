// SPDX-License-Identifier: MIT
#include "mori/core/python_bootstrap.h"

#include <cstring>
#include <string>

#include "mori/core/status.h"

namespace py = pybind11;

namespace mori {
namespace {

class PythonBootstrap : public Bootstrap {
 public:
  explicit PythonBootstrap(py::object impl) : impl_(std::move(impl)) {
    rank_ = impl_.attr("rank").cast<int>();
    size_ = impl_.attr("size").cast<int>();
  }
  ~PythonBootstrap() override {
    py::gil_scoped_acquire gil;  // the runtime may drop it from a thread without the GIL
    impl_ = py::object();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* send, void* recv, size_t bytes) override {
    py::gil_scoped_acquire gil;
    py::bytes out = impl_.attr("allgather")(py::bytes(static_cast<const char*>(send), bytes));
    std::string s = out;
    if (s.size() != bytes * static_cast<size_t>(size_))
      raise(Status::kInternal, "python bootstrap allgather returned %zu bytes, expected %zu", s.size(),
            bytes * static_cast<size_t>(size_));
    std::memcpy(recv, s.data(), s.size());
  }
  void barrier() override {
    py::gil_scoped_acquire gil;
    impl_.attr("barrier")();
  }
  std::string describe() const override {
    py::gil_scoped_acquire gil;
    return "python:" + impl_.attr("name").cast<std::string>();
  }
  void shutdown() override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(impl_, "shutdown")) impl_.attr("shutdown")();
  }

 private:
  py::object impl_;
  int rank_, size_;
};

}  // namespace

std::unique_ptr<Bootstrap> make_python_bootstrap(py::object impl) {
  return std::make_unique<PythonBootstrap>(std::move(impl));
}

}  // namespace mori
