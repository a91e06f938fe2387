// SPDX-License-Identifier: MIT
#include "ucx/ucx_selection.h"

#include <cstdint>

#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/transports/registry.h"
#include "mori/transports/ucx/ucp_library.h"
#include "mori/transports/ucx/ucp_report.h"
#include "ucx/ucx_transport.h"

namespace mori::ucx {

namespace {

enum Mode : uint8_t { kAuto = 0, kTcp = 1, kUcx = 2, kUcxAll = 3 };
const char* const kModeNames[] = {"auto", "tcp", "ucx", "ucx-all"};
enum Found : uint8_t { kNotLooked = 0, kLoaded = 1, kRdma = 2, kMissing = 3 };

Mode parse_mode(const std::string& s) {
  for (uint8_t m = 0; m < 4; ++m)
    if (s == kModeNames[m]) return static_cast<Mode>(m);
  raise(Status::kInvalidArgument, "MORI_NET_TRANSPORT=%s: expected auto, tcp, ucx or ucx-all", s.c_str());
}

// Loads UCX and, for auto, asks a throwaway context for its resources.
Found look(bool probe_rdma, std::string& why) {
  const Ucp* u = load(&why);
  if (!u) return kMissing;
  if (!probe_rdma) return kLoaded;
#if MORI_HAVE_UCX_HEADERS
  std::vector<std::string> resources;
  try {
    resources = probe_resources(*u, UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64);
  } catch (const Error& e) {
    why = e.what();
    return kMissing;
  }
  std::string list;
  bool rdma = false;
  for (auto& r : resources) {
    list += (list.empty() ? "" : " ") + r;
    rdma = rdma || is_rdma_resource(r);
  }
  why = "UCX " + u->version + " (" + u->path + ") offers " + (list.empty() ? "no transports" : list);
  return rdma ? kRdma : kLoaded;
#else
  return kMissing;
#endif
}

}  // namespace

NetChoice choose_net_transport(Bootstrap& bootstrap, const std::string& setting, bool has_net_peers,
                               bool has_local_peers) {
  Mode mode = parse_mode(setting);
  bool wants = has_net_peers || (mode == kUcxAll && has_local_peers);
  std::string why;
  struct Vote {
    uint8_t mode, wants, found;
  } mine{mode, wants, kNotLooked};
  if ((mode == kUcx || mode == kUcxAll) && wants) mine.found = look(false, why);
  auto all = bootstrap.allgather_values(mine);
  bool any = false;
  for (int pe = 0; pe < static_cast<int>(all.size()); ++pe) {
    if (all[pe].mode != mode)
      raise(Status::kInvalidUsage, "MORI_NET_TRANSPORT is %s on PE %d but %s on PE %d: set it alike on every PE",
            kModeNames[all[pe].mode < 4 ? all[pe].mode : 0], pe, kModeNames[mode], bootstrap.rank());
    any = any || all[pe].wants;
  }
  NetChoice c;
  if (!any || mode == kTcp) {
    c.reason = mode == kTcp ? "MORI_NET_TRANSPORT=tcp" : "no network pairs";
    return c;
  }
  if (mode == kAuto) {
    // Every PE looks (those without network peers still serve theirs), all must find RDMA.
    Found f = look(true, why);
    auto found = bootstrap.allgather_values(static_cast<uint8_t>(f));
    int without = -1;
    for (int pe = 0; pe < static_cast<int>(found.size()) && without < 0; ++pe)
      if (found[pe] != kRdma) without = pe;
    if (without >= 0) {
      c.reason = "MORI_NET_TRANSPORT=auto: tcp, " +
                 (without == bootstrap.rank() ? "here " + why + (f == kMissing ? " (UCX unavailable)" : ", none RDMA")
                                              : "PE " + std::to_string(without) + " has no RDMA transport in UCX");
      MORI_LOG(kInfo, "UCX", "%s", c.reason.c_str());
      return c;
    }
    c.use_ucx = true;
    c.api = load();
    c.reason = "MORI_NET_TRANSPORT=auto: ucx, " + why;
    MORI_LOG(kInfo, "UCX", "%s", c.reason.c_str());
    return c;
  }
  // ucx / ucx-all insist. A PE without ucx peers still serves those reaching it.
  if (mine.found == kNotLooked) mine.found = look(false, why);
  auto found = bootstrap.allgather_values(mine.found);
  for (int pe = 0; pe < static_cast<int>(found.size()); ++pe) {
    if (found[pe] != kMissing) continue;
    if (pe == bootstrap.rank())
      raise(Status::kUnavailable, "MORI_NET_TRANSPORT=%s but UCX cannot be used on PE %d: %s", kModeNames[mode], pe,
            why.c_str());
    raise(Status::kUnavailable, "MORI_NET_TRANSPORT=%s but UCX cannot be used on PE %d (its error says why)",
          kModeNames[mode], pe);
  }
  c.use_ucx = true;
  c.all_pairs = mode == kUcxAll;
  c.api = load();
  c.reason = std::string("MORI_NET_TRANSPORT=") + kModeNames[mode];
  return c;
}

}  // namespace mori::ucx

namespace mori {
namespace {

// The peers no earlier transport took, when the job chose UCX for them (MORI_NET_TRANSPORT:
// the choice is collective, so every PE makes it, peers or not).
class UcxCandidate : public TransportCandidate {
 public:
  UcxCandidate(const TransportContext& ctx, const std::vector<int>& untaken) : ctx_(ctx) {
    bool others = false;
    for (int pe : untaken) others = others || pe != ctx.my_pe();
    // Those left are the network pairs, and under ucx-all the same-host ones too (shm declined them).
    choice_ = ucx::choose_net_transport(ctx.bootstrap, ctx.settings.net_transport, others, others);
  }
  const char* name() const override { return "ucx"; }
  bool can_connect(int pe) const override { return choice_.use_ucx && pe != ctx_.my_pe(); }
  std::unique_ptr<Transport> create(const std::vector<int>& peers) override {
#if MORI_HAVE_UCX_HEADERS
    if (choice_.use_ucx)
      return UcxTransport::create(ctx_.bootstrap, *choice_.api, peers, ctx_.settings.bootstrap_timeout,
                                  ctx_.on_progress);
#endif
    return nullptr;
  }

 private:
  const TransportContext& ctx_;
  ucx::NetChoice choice_;
};

}  // namespace

std::unique_ptr<TransportCandidate> ucx_candidate(const TransportContext& ctx, const std::vector<int>& untaken) {
  return std::make_unique<UcxCandidate>(ctx, untaken);
}

}  // namespace mori
