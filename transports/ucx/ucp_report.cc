// SPDX-License-Identifier: MIT
#include "transports/ucx/ucp_report.h"

#if MORI_HAVE_UCX_HEADERS

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

namespace mori::ucx {

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

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
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

std::string parse_endpoint_lanes(const std::string& report) {
  // "#   lane[0]:  1:tcp/lo.0 md[0]  -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup"
  std::vector<std::string> order;
  std::map<std::string, std::string> roles;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    auto at = line.find("lane[");
    if (at == std::string::npos) continue;
    auto w = words(line.substr(at));
    if (w.size() < 2) continue;
    std::string res = w[1];
    if (auto colon = res.find(':'); colon != std::string::npos && colon + 1 < res.size()) res = res.substr(colon + 1);
    if (auto dot = res.rfind('.'); dot != std::string::npos && res.find('/') < dot) res = res.substr(0, dot);
    std::string r;
    bool after_arrow = false;
    for (size_t i = 2; i < w.size(); ++i) {
      if (w[i] == "->") {
        after_arrow = true;
        ++i;  // the remote md/transport/sysdev word
        continue;
      }
      if (!after_arrow) continue;
      std::string role = w[i].substr(0, w[i].find('#'));
      r += (r.empty() ? "" : " ") + role;
    }
    if (!roles.count(res)) order.push_back(res);
    std::string& have = roles[res];
    for (auto& role : words(r))
      if ((" " + have + " ").find(" " + role + " ") == std::string::npos) have += (have.empty() ? "" : " ") + role;
  }
  std::string out;
  for (auto& res : order) out += (out.empty() ? "" : "; ") + res + ": " + roles[res];
  return out;
}

std::vector<std::string> context_resources(const Ucp& api, ucp_context_h context) {
  return parse_context_resources(capture([&](FILE* f) { api.context_print_info(context, f); }));
}

bool is_rdma_resource(const std::string& resource) {
  std::string tl = resource.substr(0, resource.find('/'));
  for (const char* p : {"rc", "dc", "ud", "srd"})
    if (tl == p || tl.rfind(std::string(p) + "_", 0) == 0) return true;
  return false;
}

std::string endpoint_lanes(const Ucp& api, ucp_ep_h ep) {
  return parse_endpoint_lanes(capture([&](FILE* f) { api.ep_print_info(ep, f); }));
}

}  // namespace mori::ucx

#endif  // MORI_HAVE_UCX_HEADERS
