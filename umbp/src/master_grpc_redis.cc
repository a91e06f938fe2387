// SPDX-License-Identifier: MIT
// The Redis store's get path in C++ for the master's grpc++ server (master_grpc_redis.h).
#include "src/master_grpc_redis.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <iterator>
#include <string_view>

#include "mori/core/status.h"

#if MORI_UMBP_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <zlib.h>
#endif

namespace mori::umbp {

#if MORI_UMBP_HAVE_HIREDIS

bool native_redis_available() { return true; }

namespace {

// Python's repr() of a float (the shortest text that reads back the same), as the Python store
// sends times to the script.
std::string float_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

timeval timeval_of(double s) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

double steady_clock_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Reply {
  redisReply* r = nullptr;
  ~Reply() {
    if (r) freeReplyObject(r);
  }
};

struct Parsed {
  std::string_view node;
  int32_t tier = 0;
  uint64_t size = 0, offset = 0, checksum = 0;
  int rank = 0;
};

template <typename T>
bool parse_int(std::string_view s, T& v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size();
}

// The URI as an error may show it: a password in its user info replaced by "***" (the errors
// reach the master's log).
std::string shown_uri(std::string_view uri) {
  const size_t scheme = uri.find("://");
  if (scheme == std::string_view::npos) return std::string(uri);
  const size_t start = scheme + 3;
  // A unix socket's credentials end at the "@/" that starts its path; a TCP URI's at its last '@'.
  size_t at = uri.find("@/", start);
  if (at == std::string_view::npos) at = uri.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(uri);
  const size_t colon = uri.substr(start, at - start).find(':');
  if (colon == std::string_view::npos) return std::string(uri);
  return std::string(uri.substr(0, start + colon + 1)) + "***" + std::string(uri.substr(at));
}

}  // namespace

RedisRoutes::RedisRoutes(Options options) : opt_(std::move(options)) {
  MORI_CHECK_ARG(!opt_.uris.empty(), "uris must not be empty");
  MORI_CHECK_ARG(!opt_.shard_prefixes.empty(), "shard_prefixes must not be empty");
  MORI_CHECK_ARG(opt_.sha.size() == 40, "sha must be 40 hex digits, got %zu characters", opt_.sha.size());
  MORI_CHECK_ARG(opt_.shard_endpoint.empty() || opt_.shard_endpoint.size() == opt_.shard_prefixes.size(),
                 "shard_endpoint must be empty or name one endpoint per shard (%zu), got %zu",
                 opt_.shard_prefixes.size(), opt_.shard_endpoint.size());
  for (size_t e : opt_.shard_endpoint)
    MORI_CHECK_ARG(e < opt_.uris.size(), "shard_endpoint %zu is not an index into uris (%zu)", e, opt_.uris.size());
  for (const std::string& uri : opt_.uris) {
    // What redis-py's from_url reads for plain connections: redis://[[user]:password@]host[:port][/db]
    // (TCP) and unix://[[user]:password@]/path[?db=N] (a Redis on this host, reached without a
    // TCP port; measured no cheaper per call than loopback TCP, docs/umbp-master.md).
    std::string_view u(uri);
    const std::string shown = shown_uri(uri);
    const bool unix_socket = u.substr(0, 7) == "unix://";
    MORI_CHECK_ARG(unix_socket || u.substr(0, 8) == "redis://", "uri %s: only redis:// and unix:// are served natively",
                   shown.c_str());
    u.remove_prefix(unix_socket ? 7 : 8);
    auto ep = std::make_unique<Endpoint>();
    ep->password = opt_.password;
    // Credentials end at the last '@' of a TCP URI; a unix socket's at the "@/" that starts its
    // path (which may hold '@' itself).
    size_t at = u.rfind('@');
    if (unix_socket) at = !u.empty() && u.front() == '/' ? std::string_view::npos : u.find("@/");
    if (at != std::string_view::npos) {
      std::string_view cred = u.substr(0, at);
      const size_t colon = cred.find(':');
      MORI_CHECK_ARG(cred.find('%') == std::string_view::npos, "uri %s: escaped credentials are left to Python",
                     shown.c_str());
      if (colon == std::string_view::npos) {
        ep->user = std::string(cred);
      } else {
        ep->user = std::string(cred.substr(0, colon));
        if (colon + 1 < cred.size()) ep->password = std::string(cred.substr(colon + 1));
      }
      u.remove_prefix(at + 1);
    }
    if (unix_socket) {
      const size_t q = u.find('?');
      std::string_view path = u.substr(0, q);
      MORI_CHECK_ARG(!path.empty() && path.front() == '/', "uri %s: a unix socket's path must be absolute",
                     shown.c_str());
      MORI_CHECK_ARG(path.find('%') == std::string_view::npos, "uri %s: escaped paths are left to Python",
                     shown.c_str());
      if (q != std::string_view::npos) {
        std::string_view query = u.substr(q + 1);
        MORI_CHECK_ARG(query.substr(0, 3) == "db=" && parse_int(query.substr(3), ep->db),
                       "uri %s: options other than db=N are left to Python", shown.c_str());
      }
      ep->unix_path = std::string(path);
      endpoints_.push_back(std::move(ep));
      continue;
    }
    std::string_view hostport = u.substr(0, u.find_first_of("/?"));
    std::string_view rest = u.substr(hostport.size());
    MORI_CHECK_ARG(rest.find('?') == std::string_view::npos, "uri %s: options are left to Python", shown.c_str());
    if (!rest.empty() && rest != "/") {
      MORI_CHECK_ARG(parse_int(rest.substr(1), ep->db), "uri %s: bad database number", shown.c_str());
    }
    const size_t colon = hostport.rfind(':');
    if (colon != std::string_view::npos && hostport.find(']') == std::string_view::npos) {
      MORI_CHECK_ARG(parse_int(hostport.substr(colon + 1), ep->port), "uri %s: bad port", shown.c_str());
      hostport = hostport.substr(0, colon);
    }
    MORI_CHECK_ARG(!hostport.empty() && hostport.front() != '[', "uri %s: host not served natively", shown.c_str());
    ep->host = std::string(hostport);
    endpoints_.push_back(std::move(ep));
  }
}

RedisRoutes::~RedisRoutes() {
  for (auto& ep : endpoints_)
    for (redisContext* c : ep->idle) redisFree(c);
}

uint64_t RedisRoutes::failures() const { return failures_.load(std::memory_order_relaxed); }

int RedisRoutes::rank(int32_t tier) const {
  for (size_t i = 0; i < opt_.tier_priority.size(); ++i)
    if (opt_.tier_priority[i] == tier) return static_cast<int>(i);
  return 9;  // as the Python store ranks a tier it does not list
}

redisContext* RedisRoutes::take(Endpoint& ep) {
  {
    std::lock_guard<std::mutex> lk(ep.mu);
    if (!ep.idle.empty()) {
      redisContext* c = ep.idle.back();
      ep.idle.pop_back();
      return c;
    }
  }
  const timeval connect_timeout = timeval_of(opt_.connect_timeout_s);
  redisContext* c = ep.unix_path.empty() ? redisConnectWithTimeout(ep.host.c_str(), ep.port, connect_timeout)
                                         : redisConnectUnixWithTimeout(ep.unix_path.c_str(), connect_timeout);
  if (c == nullptr || c->err) {
    if (c) redisFree(c);
    return nullptr;
  }
  redisSetTimeout(c, timeval_of(opt_.socket_timeout_s));
  auto ok = [&](redisReply* r) {
    const bool good = r != nullptr && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    return good;
  };
  if (!ep.password.empty()) {
    redisReply* r = ep.user.empty()
                        ? static_cast<redisReply*>(redisCommand(c, "AUTH %b", ep.password.data(), ep.password.size()))
                        : static_cast<redisReply*>(redisCommand(c, "AUTH %b %b", ep.user.data(), ep.user.size(),
                                                                ep.password.data(), ep.password.size()));
    if (!ok(r)) {
      redisFree(c);
      return nullptr;
    }
  }
  if (ep.db != 0 && !ok(static_cast<redisReply*>(redisCommand(c, "SELECT %d", ep.db)))) {
    redisFree(c);
    return nullptr;
  }
  return c;
}

void RedisRoutes::give(Endpoint& ep, redisContext* c) {
  std::lock_guard<std::mutex> lk(ep.mu);
  if (ep.idle.size() < opt_.pool_size) {
    ep.idle.push_back(c);
    return;
  }
  redisFree(c);
}

size_t RedisRoutes::shard_of(const std::string& key) const {
  return crc32(0, reinterpret_cast<const Bytef*>(key.data()), static_cast<uInt>(key.size())) %
         opt_.shard_prefixes.size();
}

size_t RedisRoutes::group_count() const {
  return opt_.shard_endpoint.empty() ? endpoints_.size() : opt_.shard_prefixes.size();
}

size_t RedisRoutes::group_of(size_t shard) const {
  return opt_.shard_endpoint.empty() ? shard % endpoints_.size() : shard;
}

size_t RedisRoutes::endpoint_of_group(size_t group) const {
  return opt_.shard_endpoint.empty() ? group : opt_.shard_endpoint[group];
}

void RedisRoutes::release(size_t endpoint, redisContext*& conn, bool failed) {
  // A connection with a reply still unread, or broken, is not reused.
  if (failed || conn->err) {
    redisFree(conn);
  } else {
    give(*endpoints_[endpoint], conn);
  }
  conn = nullptr;
}

bool RedisRoutes::failed_call() {
  failures_.fetch_add(1, std::memory_order_relaxed);
  python_until_.store(steady_clock_s() + kBackoffS, std::memory_order_relaxed);
  return false;
}

bool RedisRoutes::place_feed(uint64_t feed_id, uint64_t seq, uint32_t max_entries, FeedSlice& out) {
  if (opt_.feed_keys.size() != 3 || opt_.feed_endpoint >= endpoints_.size()) return false;
  if (steady_clock_s() < python_until_.load(std::memory_order_relaxed)) return false;
  const uint32_t limit =
      max_entries == 0 ? PlaceFeed::kMaxEntriesPerReply : std::min(max_entries, PlaceFeed::kMaxEntriesPerReply);
  uint64_t fresh_id;
  {
    std::lock_guard<std::mutex> lk(rng_mu_);
    fresh_id = (rng_() >> 1) | 1;
  }
  const std::string args[] = {std::to_string(feed_id), std::to_string(seq), std::to_string(limit),
                              std::to_string(fresh_id)};
  redisContext* conn = take(*endpoints_[opt_.feed_endpoint]);
  if (conn == nullptr) return failed_call();
  auto call = [&](bool by_sha) {
    const std::string_view parts[] = {by_sha ? "EVALSHA" : "EVAL",
                                      by_sha ? opt_.feed_sha : opt_.feed_script,
                                      "3",
                                      opt_.feed_keys[0],
                                      opt_.feed_keys[1],
                                      opt_.feed_keys[2],
                                      args[0],
                                      args[1],
                                      args[2],
                                      args[3]};
    constexpr int n = static_cast<int>(std::size(parts));
    const char* argv[n];
    size_t lens[n];
    for (int i = 0; i < n; ++i) {
      argv[i] = parts[i].data();
      lens[i] = parts[i].size();
    }
    return static_cast<redisReply*>(redisCommandArgv(conn, n, argv, lens));
  };
  Reply reply;
  reply.r = call(true);
  if (reply.r != nullptr && reply.r->type == REDIS_REPLY_ERROR && std::strncmp(reply.r->str, "NOSCRIPT", 8) == 0) {
    freeReplyObject(reply.r);
    reply.r = call(false);
  }
  const redisReply* r = reply.r;
  bool good = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements >= 4 && (r->elements - 4) % 6 == 0 &&
              r->element[0]->type == REDIS_REPLY_STRING;
  for (size_t i = 1; good && i < 4; ++i) good = r->element[i]->type == REDIS_REPLY_INTEGER;
  for (size_t i = 4; good && i < r->elements; ++i) good = r->element[i]->type == REDIS_REPLY_STRING;
  release(opt_.feed_endpoint, conn, !good);
  if (!good) return failed_call();
  auto text = [r](size_t i) { return std::string(r->element[i]->str, r->element[i]->len); };
  auto number = [r](size_t i) { return std::strtoull(r->element[i]->str, nullptr, 10); };
  out = FeedSlice{};
  out.feed_id = number(0);
  out.next_seq = static_cast<uint64_t>(r->element[1]->integer);
  out.gap = r->element[2]->integer != 0;
  out.more = r->element[3]->integer != 0;
  out.entries.reserve((r->elements - 4) / 6);
  for (size_t i = 4; i < r->elements; i += 6) {
    const bool added = r->element[i + 2]->len == 1 && r->element[i + 2]->str[0] == '1';
    out.entries.push_back(FedPlace{text(i), text(i + 1), added, number(i + 3), number(i + 4), number(i + 5)});
  }
  return true;
}

bool RedisRoutes::exists(const std::vector<std::string>& keys, std::vector<bool>& out) {
  if (steady_clock_s() < python_until_.load(std::memory_order_relaxed)) return false;
  // Grouped as RedisMetadataStore._group groups them; one pipeline of EXISTS per group, every
  // group's sent before any reply is read (lookup_batch's pipelines).
  struct Group {
    std::vector<size_t> idx;
    std::vector<std::string> names;
    size_t endpoint = 0;
    redisContext* conn = nullptr;
  };
  std::vector<Group> groups(group_count());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].endpoint = endpoint_of_group(g);
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t shard = shard_of(keys[i]);
    Group& g = groups[group_of(shard)];
    g.names.push_back(opt_.shard_prefixes[shard] + ":k:" + keys[i]);
    g.idx.push_back(i);
  }
  bool failed = false;
  for (Group& g : groups) {
    if (g.idx.empty()) continue;
    g.conn = take(*endpoints_[g.endpoint]);
    if (g.conn == nullptr) {
      failed = true;
      break;
    }
    for (const std::string& name : g.names) {
      const char* argv[] = {"EXISTS", name.c_str()};
      const size_t lens[] = {6, name.size()};
      if (redisAppendCommandArgv(g.conn, 2, argv, lens) != REDIS_OK) {
        failed = true;
        break;
      }
    }
    if (failed) break;
  }
  out.assign(keys.size(), false);
  for (Group& g : groups) {
    if (g.conn == nullptr) continue;
    for (size_t k = 0; k < g.idx.size() && !failed; ++k) {
      void* r = nullptr;
      if (redisGetReply(g.conn, &r) != REDIS_OK) {
        failed = true;
        break;
      }
      Reply reply;
      reply.r = static_cast<redisReply*>(r);
      if (reply.r->type != REDIS_REPLY_INTEGER) {
        failed = true;
        break;
      }
      out[g.idx[k]] = reply.r->integer != 0;
    }
    release(g.endpoint, g.conn, failed);
  }
  return failed ? failed_call() : true;
}

bool RedisRoutes::route_choose(const std::vector<std::string>& keys, const std::vector<std::string>& exclude,
                               const std::unordered_map<std::string, std::string>& alive, double now,
                               double lease_until, bool any_copy, RoutedGets& out) {
  if (steady_clock_s() < python_until_.load(std::memory_order_relaxed)) return false;
  // The keys' full hash names, grouped as RedisMetadataStore._group does: by endpoint, or by
  // shard in a cluster (a script's keys must share a slot).
  struct Group {
    std::vector<size_t> idx;
    std::string names;
    std::string first;
    size_t endpoint = 0;
    redisContext* conn = nullptr;
    Reply reply;
  };
  std::vector<Group> groups(group_count());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].endpoint = endpoint_of_group(g);
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    const size_t shard = shard_of(key);
    Group& g = groups[group_of(shard)];
    if (!g.idx.empty()) g.names.push_back('\n');
    const size_t start = g.names.size();
    g.names.append(opt_.shard_prefixes[shard]).append(":k:").append(key);
    if (g.idx.empty()) g.first = g.names.substr(start);
    g.idx.push_back(i);
  }
  std::string excl;
  {
    std::vector<std::string> sorted(exclude);
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (i) excl.push_back('\n');
      excl.append(sorted[i]);
    }
  }
  const std::string now_s = float_text(now), lease_s = float_text(lease_until);
  auto append = [&](Group& g, bool by_sha) {
    const char* argv[] = {by_sha ? "EVALSHA" : "EVAL",
                          nullptr,
                          "1",
                          g.first.c_str(),
                          now_s.c_str(),
                          lease_s.c_str(),
                          excl.c_str(),
                          g.names.c_str()};
    size_t lens[] = {std::strlen(argv[0]), 0, 1, g.first.size(), now_s.size(), lease_s.size(), excl.size(),
                     g.names.size()};
    argv[1] = by_sha ? opt_.sha.c_str() : opt_.script.c_str();
    lens[1] = by_sha ? opt_.sha.size() : opt_.script.size();
    return redisAppendCommandArgv(g.conn, 8, argv, lens) == REDIS_OK;
  };
  bool failed = false;
  // Every group's call is sent before any reply is read: they run in the Redis instances at once.
  for (Group& g : groups) {
    if (g.idx.empty()) continue;
    g.conn = take(*endpoints_[g.endpoint]);
    if (g.conn == nullptr || !append(g, true)) {
      failed = true;
      break;
    }
  }
  for (Group& g : groups) {
    if (g.conn == nullptr) continue;
    if (!failed) {
      void* r = nullptr;
      if (redisGetReply(g.conn, &r) != REDIS_OK) {
        failed = true;
      } else {
        g.reply.r = static_cast<redisReply*>(r);
        // A Redis that has not seen the script yet (a fresh or restarted one): run it by text
        // once, which also loads it, as redis-py's Script does.
        if (g.reply.r->type == REDIS_REPLY_ERROR && std::strncmp(g.reply.r->str, "NOSCRIPT", 8) == 0) {
          freeReplyObject(g.reply.r);
          g.reply.r = nullptr;
          if (!append(g, false) || redisGetReply(g.conn, &r) != REDIS_OK) {
            failed = true;
          } else {
            g.reply.r = static_cast<redisReply*>(r);
          }
        }
      }
      if (!failed && g.reply.r->type != REDIS_REPLY_STRING) failed = true;
    }
    release(g.endpoint, g.conn, failed);
  }
  if (failed) return failed_call();

  out = RoutedGets{};
  out.node_ref.assign(keys.size(), 0);
  out.tier.assign(keys.size(), 0);
  out.size.assign(keys.size(), 0);
  out.offset.assign(keys.size(), 0);
  out.checksum.assign(keys.size(), 0);
  std::unordered_map<std::string_view, uint32_t> ref_of;
  std::vector<Parsed> copies, live;
  // The copy chosen per key (node: a view into its group's reply, alive until we return); the
  // node table is built afterwards in key order, as the Python store builds it, not shard by shard.
  std::vector<Parsed> chosen_of(keys.size());
  std::vector<char> hit(keys.size(), 0);
  for (Group& g : groups) {
    if (g.idx.empty()) continue;
    std::string_view text(g.reply.r->str, g.reply.r->len);
    size_t line_start = 0;
    for (size_t k = 0; k < g.idx.size(); ++k) {
      if (line_start > text.size()) return false;  // fewer lines than keys: not this script's answer
      size_t line_end = text.find('\n', line_start);
      if (line_end == std::string_view::npos) line_end = text.size();
      std::string_view line = text.substr(line_start, line_end - line_start);
      line_start = line_end + 1;
      copies.clear();
      // Copies "node US tier US size[ US offset US checksum]" joined by RS.
      size_t c0 = 0;
      while (c0 < line.size()) {
        size_t c1 = line.find('\x1e', c0);
        if (c1 == std::string_view::npos) c1 = line.size();
        std::string_view copy = line.substr(c0, c1 - c0);
        c0 = c1 + 1;
        std::string_view f[5];
        size_t nf = 0, f0 = 0;
        while (nf < 5) {
          size_t f1 = copy.find('\x1f', f0);
          f[nf++] = copy.substr(f0, f1 == std::string_view::npos ? std::string_view::npos : f1 - f0);
          if (f1 == std::string_view::npos) break;
          f0 = f1 + 1;
        }
        Parsed p;
        p.node = f[0];
        if ((nf != 3 && nf != 5) || !parse_int(f[1], p.tier) || !parse_int(f[2], p.size)) return false;
        if (nf == 5 && (!parse_int(f[3], p.offset) || !parse_int(f[4], p.checksum))) return false;
        p.rank = rank(p.tier);
        copies.push_back(p);
      }
      if (copies.size() > 1)
        std::stable_sort(copies.begin(), copies.end(),
                         [](const Parsed& a, const Parsed& b) { return a.rank < b.rank; });
      // GetRouter.choose: among the copies on live nodes, the fastest tier's (a random one when
      // it has several), or any of them under UMBP_ROUTE_GET_STRATEGY=random.
      live.clear();
      for (const Parsed& p : copies)
        if (alive.count(std::string(p.node))) live.push_back(p);
      const size_t i = g.idx[k];
      if (live.empty()) {
        ++out.misses;
        continue;
      }
      size_t pick_of = live.size();
      if (!any_copy) {
        pick_of = 1;
        while (pick_of < live.size() && live[pick_of].tier == live[0].tier) ++pick_of;
      }
      size_t chosen = 0;
      if (pick_of > 1) {
        std::lock_guard<std::mutex> lk(rng_mu_);
        chosen = std::uniform_int_distribution<size_t>(0, pick_of - 1)(rng_);
      }
      chosen_of[i] = live[chosen];
      hit[i] = 1;
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!hit[i]) continue;
    const Parsed& c = chosen_of[i];
    auto [it, fresh] = ref_of.emplace(c.node, 0);
    if (fresh) {
      out.nodes.emplace_back(c.node);
      out.hits.push_back(0);
      it->second = static_cast<uint32_t>(out.nodes.size());
    }
    ++out.hits[it->second - 1];
    out.node_ref[i] = it->second;
    out.tier[i] = c.tier;
    out.size[i] = c.size;
    out.offset[i] = c.offset;
    out.checksum[i] = c.checksum;
  }
  return true;
}

#else  // no hiredis in this build

bool native_redis_available() { return false; }

RedisRoutes::RedisRoutes(Options options) : opt_(std::move(options)) {
  raise(Status::kUnavailable, "this build has no hiredis (apt install libhiredis-dev and rebuild)");
}
RedisRoutes::~RedisRoutes() = default;
uint64_t RedisRoutes::failures() const { return 0; }
bool RedisRoutes::route_choose(const std::vector<std::string>&, const std::vector<std::string>&,
                               const std::unordered_map<std::string, std::string>&, double, double, bool, RoutedGets&) {
  return false;
}
bool RedisRoutes::exists(const std::vector<std::string>&, std::vector<bool>&) { return false; }
bool RedisRoutes::place_feed(uint64_t, uint64_t, uint32_t, FeedSlice&) { return false; }

#endif

}  // namespace mori::umbp
