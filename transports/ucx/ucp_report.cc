// SPDX-License-Identifier: MIT
#include "mori/transports/ucx/ucp_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace mori::ucx {

namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

// "1:tcp/lo.0" -> "tcp/lo": the resource index before the transport and the path index
// after the device go (a device may itself contain ':' or '.', as in "mlx5_0:1").
std::string lane_resource(std::string token) {
  size_t slash = token.find('/');
  if (size_t colon = token.find(':'); colon != std::string::npos && colon < slash) {
    token = token.substr(colon + 1);
    slash = token.find('/');
  }
  size_t dot = token.rfind('.');
  if (dot != std::string::npos && slash != std::string::npos && dot > slash && dot + 1 < token.size() &&
      token.find_first_not_of("0123456789", dot + 1) == std::string::npos)
    token.resize(dot);
  return token;
}

}  // namespace

std::vector<std::string> parse_context_resources(const std::string& report) {
  // "#      resource 0  :  md 0  dev 0  flags -- tcp/eth0"
  std::vector<std::string> out;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    if (line.find("resource") == std::string::npos || line.find("flags") == std::string::npos) continue;
    auto w = words(line);
    if (!w.empty() && w.back().find('/') != std::string::npos) out.push_back(w.back());
  }
  return out;
}

std::vector<Lane> parse_endpoint_lanes(const std::string& report) {
  // "#   lane[0]:  1:tcp/lo.0 md[0]  -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup"
  std::vector<Lane> out;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find("lane[");
    if (at == std::string::npos) continue;
    size_t colon = line.find("]:", at);
    if (colon == std::string::npos) continue;
    auto w = words(line.substr(colon + 2));
    if (w.empty()) continue;
    std::string resource = lane_resource(w[0]);
    if (resource.empty()) continue;
    auto lane = std::find_if(out.begin(), out.end(), [&](const Lane& l) { return l.resource == resource; });
    if (lane == out.end()) lane = out.insert(out.end(), Lane{resource, {}});
    // Roles follow the remote side ("-> md[0]/tcp/sysdev[255]"); "am_bw#0" is role am_bw.
    auto arrow = std::find(w.begin(), w.end(), "->");
    for (auto it = arrow == w.end() ? w.end() : arrow + 2; it < w.end(); ++it) {
      std::string role = it->substr(0, it->find('#'));
      if (!role.empty() && std::find(lane->roles.begin(), lane->roles.end(), role) == lane->roles.end())
        lane->roles.push_back(role);
    }
  }
  return out;
}

std::string describe_lanes(const std::vector<Lane>& lanes) {
  std::string out;
  for (const auto& lane : lanes) {
    out += (out.empty() ? "" : "; ") + lane.resource + ":";
    for (const auto& role : lane.roles) out += " " + role;
  }
  return out;
}

bool is_rdma_resource(const std::string& resource) {
  std::string tl = resource.substr(0, resource.find('/'));
  for (const char* p : {"rc", "dc", "ud", "srd"})
    if (tl == p || tl.rfind(std::string(p) + "_", 0) == 0) return true;
  return false;
}

#if MORI_HAVE_UCX_HEADERS

namespace {

// Runs a print_info-style function into a string.
std::string capture(const std::function<void(FILE*)>& print) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return {};
  print(f);
  std::fclose(f);
  std::string out(buf ? buf : "", len);
  std::free(buf);
  return out;
}

}  // namespace

std::vector<std::string> context_resources(const Ucp& api, ucp_context_h context) {
  return parse_context_resources(capture([&](FILE* f) { api.context_print_info(context, f); }));
}

std::vector<Lane> endpoint_lanes(const Ucp& api, ucp_ep_h ep) {
  return parse_endpoint_lanes(capture([&](FILE* f) { api.ep_print_info(ep, f); }));
}

std::vector<std::string> probe_resources(const Ucp& api, uint64_t features) {
  ucp_config_t* config = nullptr;
  check(api, api.config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = features;
  ucp_context_h context = nullptr;
  ucs_status_t s = api.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context);
  api.config_release(config);
  check(api, s, "ucp_init");
  std::vector<std::string> resources;
  try {
    resources = context_resources(api, context);
  } catch (...) {
    api.cleanup(context);
    throw;
  }
  api.cleanup(context);
  return resources;
}

#endif  // MORI_HAVE_UCX_HEADERS

}  // namespace mori::ucx
