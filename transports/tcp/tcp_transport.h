// SPDX-License-Identifier: MIT
// Between hosts: one-sided operations over TCP. This PE serves its exposed
// regions to authenticated peers (TcpTarget) and reaches each tcp peer through
// one ordered connection (TcpChannel). Connections are set up through the
// bootstrap and demand the job secret.
//
// Ordering: one connection per (initiator, target) pair, applied in arrival
// order, so fence is free and put_signal's signal lands after its data. quiet
// sends one flush per connection with unacknowledged requests and waits for all
// of them (in parallel across peers).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mori/core/bootstrap.h"
#include "mori/core/topology.h"
#include "mori/transports/transport.h"
#include "tcp/tcp_channel.h"
#include "tcp/tcp_target.h"

namespace mori {

class TcpTransport : public Transport {
 public:
  // Collective over `bootstrap`. Every PE passes the peers it will reach over tcp;
  // returns nullptr on every PE when no PE needs tcp. Otherwise every PE starts a
  // listener on its topology address, the listener ports are exchanged, and this
  // PE connects to its tcp peers. `on_write` runs after remote data lands here.
  static std::unique_ptr<TcpTransport> create(Bootstrap& bootstrap, const Topology& topology,
                                              const std::vector<int>& tcp_peers, double timeout_s,
                                              std::function<void(uint32_t, uint64_t, uint64_t)> on_write);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  bool rings_on_delivery() const override { return true; }
  bool has_progress_thread() const override { return true; }

  void connect_region(MemRegion& region, int pe) override;
  void disconnect_region(MemRegion& region, int pe) override;
  void expose_region(const MemRegion& region) override;
  void* direct_ptr(int pe, RemoteRef r) override { return nullptr; }

  void put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) override;
  void get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) override;
  uint64_t atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) override;
  void put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value, SignalOp op,
                  bool nbi) override;
  void fence(int pe) override {}  // each connection is applied in order
  void quiet() override;

  int dead_peer() const override;
  std::string endpoint(int pe) const override;

  int port() const { return target_->port(); }

 private:
  TcpTransport(int my_pe, int n_pes, double timeout_s);
  tcp::TcpChannel& channel(int pe, RemoteRef r, const char* what);

  int my_pe_, n_pes_;
  double timeout_s_;
  std::unique_ptr<tcp::TcpTarget> target_;
  std::vector<std::unique_ptr<tcp::TcpChannel>> channels_;  // by PE; null for non-tcp peers
  std::vector<std::string> endpoints_;                      // every PE's listener, "ip:port"
};

}  // namespace mori
