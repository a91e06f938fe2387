// SPDX-License-Identifier: MIT
// mori._C.umbp.MasterIndex: the UMBP master's in-memory block index (umbp/src/master_index.h).
// Batches cross as Python lists of str/int; the index work itself runs without the GIL.
// mori._C.umbp.PlaceFeed: the master's log of owners' DRAM places (master_place_feed.h).
// mori._C.umbp.PendingPuts and PutRoutes: the master's pending puts and put routing, shared with
// the grpc++ server's native routes.
// mori._C.umbp.CallVerifier: the check of signed control-plane calls (master_grpc_auth.h). The
// master's grpc++ server is another module, mori.umbp._master_server (bind_umbp_master_server.cc),
// so that only a master process loads grpc++.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>
#include <unordered_set>

#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "mori/core/status.h"
#include "src/master_grpc_auth.h"
#include "src/master_index.h"
#include "src/master_pending.h"
#include "src/master_place_feed.h"
#include "src/master_put_routes.h"

namespace py = pybind11;
// Converted once per batch and handed back to route() by reference, not as a list.
PYBIND11_MAKE_OPAQUE(std::vector<mori::umbp::NodeRoom>);
using namespace mori::umbp;

namespace {

// A sequence of str (a list, a tuple, a protobuf repeated field) as strings; names the argument
// when an item is not a str.
std::vector<std::string> strings_arg(py::handle seq, const char* arg) {
  py::object fast = py::reinterpret_steal<py::object>(PySequence_Fast(seq.ptr(), arg));
  if (!fast) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_Check(items[i]) ? PyUnicode_AsUTF8AndSize(items[i], &len) : nullptr;
    if (s == nullptr) {
      PyErr_Clear();
      MORI_CHECK_ARG(false, "%s[%zd] must be a str", arg, i);
    }
    out.emplace_back(s, static_cast<size_t>(len));
  }
  return out;
}

template <typename T>
py::list int_list(const std::vector<T>& v) {
  py::list out(v.size());
  for (size_t i = 0; i < v.size(); ++i) PyList_SET_ITEM(out.ptr(), i, py::int_(v[i]).release().ptr());
  return out;
}

py::object refusal_tuple(const std::optional<Refusal>& r) {
  return r ? py::object(py::make_tuple(r->reason, r->details)) : py::object(py::none());
}

}  // namespace

void bind_umbp_master(py::module_& m) {
  py::class_<CallVerifier>(
      m, "CallVerifier",
      "The check of a signed UMBP control-plane call (umbp/src/master_grpc_auth.h): the one implementation of "
      "master_auth's rules, used by grpcio's VerifyingInterceptor and the master's grpc++ server. Refusals are "
      "(reason, details) tuples: reason for the refusal counter, details for UNAUTHENTICATED.")
      .def(py::init([](py::bytes secret, double window_s, std::string name) {
             return std::make_unique<CallVerifier>(std::string(secret), window_s, std::move(name));
           }),
           py::arg("secret"), py::arg("window_s"), py::arg("name"))
      .def(
          "header_refusal",
          [](const CallVerifier& v, std::string_view ts, std::string_view nonce, std::string_view sig, double now) {
            return refusal_tuple(v.header_refusal(ts, nonce, sig, now));
          },
          py::arg("ts"), py::arg("nonce"), py::arg("sig"), py::arg("now"),
          "What is wrong with the signing metadata alone ('' for absent), or None.")
      .def(
          "signature_ok",
          [](const CallVerifier& v, std::string_view method, std::string_view ts, std::string_view nonce,
             std::string_view sig, py::bytes body) {
            std::string_view b = body;
            return v.signature_ok(method, ts, nonce, sig, b);
          },
          py::arg("method"), py::arg("ts"), py::arg("nonce"), py::arg("sig"), py::arg("body"))
      .def("fresh_nonce", &CallVerifier::fresh_nonce, py::arg("nonce"), py::arg("now"),
           "Record the nonce; False when it was seen before (a replay).")
      .def(
          "check",
          [](CallVerifier& v, std::string_view method, std::string_view ts, std::string_view nonce,
             std::string_view sig, py::bytes body, double now) {
            std::string_view b = body;
            return refusal_tuple(v.check(method, ts, nonce, sig, b, now));
          },
          py::arg("method"), py::arg("ts"), py::arg("nonce"), py::arg("sig"), py::arg("body"), py::arg("now"),
          "The whole check: None to serve the call, else (reason, details).")
      .def_property_readonly("name", &CallVerifier::name);

  py::class_<PlaceFeed>(m, "PlaceFeed",
                        "The master's place feed: a bounded log of where owners' DRAM values lie and which left "
                        "(master_place_feed.h). The one log: the Python handler and the grpc++ server's native "
                        "path read the same one.")
      .def(py::init<int32_t, size_t>(), py::arg("dram_tier"), py::arg("capacity") = PlaceFeed::kDefaultCapacity)
      .def_property_readonly("feed_id", &PlaceFeed::feed_id)
      .def_property_readonly("capacity", &PlaceFeed::capacity)
      .def_readonly_static("DEFAULT_CAPACITY", &PlaceFeed::kDefaultCapacity)
      .def_readonly_static("MAX_ENTRIES_PER_REPLY", &PlaceFeed::kMaxEntriesPerReply)
      .def(
          "record",
          [](PlaceFeed& f, const std::string& node_id, py::handle keys, const std::vector<bool>& added,
             const std::vector<int32_t>& tiers, const std::vector<uint64_t>& offsets,
             const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& checksums) {
            std::vector<std::string> k = strings_arg(keys, "keys");
            py::gil_scoped_release nogil;
            return f.record(node_id, k, added, tiers, offsets, sizes, checksums);
          },
          py::arg("node_id"), py::arg("keys"), py::arg("added"), py::arg("tiers"), py::arg("offsets"), py::arg("sizes"),
          py::arg("checksums"),
          "Append an owner's events (columns): DRAM ADDs with a checksum and every DRAM REMOVE. Returns how many.")
      .def(
          "since",
          [](const PlaceFeed& f, uint64_t feed_id, uint64_t seq, uint32_t max_entries) {
            FeedSlice got;
            {
              py::gil_scoped_release nogil;
              got = f.since(feed_id, seq, max_entries);
            }
            py::list entries(got.entries.size());
            for (size_t i = 0; i < got.entries.size(); ++i) {
              const FedPlace& e = got.entries[i];
              PyList_SET_ITEM(entries.ptr(), i,
                              py::make_tuple(e.node_id, e.key, e.added, e.offset, e.size, e.checksum).release().ptr());
            }
            return py::make_tuple(got.feed_id, got.next_seq, got.gap, got.more, entries);
          },
          py::arg("feed_id"), py::arg("seq"), py::arg("max_entries") = 0,
          "(feed_id, next_seq, gap, more, [(node_id, key, added, offset, size, checksum)]) from number `seq` on "
          "(0, or another feed's id: from the oldest held), at most `max_entries` (0: the reply cap).");

  py::class_<PendingPuts>(m, "PendingPuts",
                          "The UMBP master's pending puts: keys routed to an owner that has not reported them "
                          "yet, with their target, until they expire (master_pending.h). The one registry: the "
                          "Python servicers and the grpc++ server's native get path read the same one.")
      .def(py::init<>())
      .def(
          "add",
          [](PendingPuts& p, const std::string& key, std::string node_id, int32_t tier, std::string peer_address,
             uint64_t size, double expires, double now) {
            p.add(key, PendingPut{std::move(node_id), tier, std::move(peer_address), size, expires}, now);
          },
          py::arg("key"), py::arg("node_id"), py::arg("tier"), py::arg("peer_address"), py::arg("size"),
          py::arg("expires"), py::arg("now"), py::call_guard<py::gil_scoped_release>(),
          "Record (or replace) the key's pending put, until `expires` (time.time() seconds).")
      .def(
          "find_batch",
          [](const PendingPuts& p, const std::vector<std::string>& keys, double now) {
            std::vector<std::optional<PendingPut>> found;
            {
              py::gil_scoped_release nogil;
              found.reserve(keys.size());
              for (const auto& k : keys) found.push_back(p.find(k, now));
            }
            py::list out(keys.size());
            for (size_t i = 0; i < found.size(); ++i) {
              py::object v = py::none();
              if (found[i])
                v = py::make_tuple(found[i]->node_id, found[i]->tier, found[i]->peer_address, found[i]->size);
              PyList_SET_ITEM(out.ptr(), i, v.release().ptr());
            }
            return out;
          },
          py::arg("keys"), py::arg("now"),
          "Per key (node_id, tier, peer_address, size) of its pending put at `now`, or None.")
      .def("dones", &PendingPuts::dones,
           "How many done() calls removed records: a route that sees it change between its look in "
           "the index and its look here looks again (a key reported meanwhile was in neither).")
      .def("done", &PendingPuts::done, py::arg("keys"), py::call_guard<py::gil_scoped_release>(),
           "The owners reported these keys: their records are done.")
      .def("__len__", &PendingPuts::size);

  py::class_<MasterIndex>(m, "MasterIndex",
                          "The UMBP master's in-memory block index: key -> copies (node, tier, size), "
                          "with last access and lease per key; lock-sharded by key hash.")
      .def(py::init<size_t, std::vector<int32_t>>(), py::arg("shards"), py::arg("tier_priority"),
           "shards: lock shards (>= 1); tier_priority: the get path's tier order, fastest first.")
      .def(
          "add",
          [](MasterIndex& ix, const std::string& node_id, const std::string& key, int32_t tier, uint64_t size,
             double now, uint64_t offset, uint64_t checksum) {
            py::gil_scoped_release nogil;
            return ix.add(node_id, key, tier, size, now, offset, checksum);
          },
          py::arg("node_id"), py::arg("key"), py::arg("tier"), py::arg("size"), py::arg("now"), py::arg("offset") = 0,
          py::arg("checksum") = 0,
          "Record a copy (or update its size and place: arena offset and XXH3, 0 if not known); True if the "
          "key had no copy before.")
      .def("remove", &MasterIndex::remove, py::arg("node_id"), py::arg("key"), py::arg("tier"),
           py::call_guard<py::gil_scoped_release>(),
           "Drop a copy: (its size, whether it was the key's last copy), or None if unknown.")
      .def("remove_node", &MasterIndex::remove_node, py::arg("node_id"), py::call_guard<py::gil_scoped_release>(),
           "Drop every copy the node holds; [(key, size)] of the keys left with no copy.")
      .def(
          "route",
          [](MasterIndex& ix, py::handle keys, py::handle exclude, double now, double lease_until) {
            auto k = strings_arg(keys, "keys");
            auto x = strings_arg(exclude, "exclude");
            std::vector<std::vector<IndexCopy>> copies;
            {
              py::gil_scoped_release nogil;
              copies = ix.route(k, x, now, lease_until);
            }
            py::list out(copies.size());
            for (size_t i = 0; i < copies.size(); ++i) {
              py::tuple t(copies[i].size());
              for (size_t j = 0; j < copies[i].size(); ++j)
                t[j] = py::make_tuple(copies[i][j].node_id, copies[i][j].tier, copies[i][j].size);
              out[i] = t;
            }
            return out;
          },
          py::arg("keys"), py::arg("exclude"), py::arg("now"), py::arg("lease_until"),
          "Per key its copies off the excluded nodes as (node_id, tier, size) tuples, fastest tier first, "
          "() on a miss; keys with such a copy are touched and leased.")
      .def(
          "route_choose",
          [](MasterIndex& ix, py::handle keys, py::handle exclude, py::handle alive, double now, double lease_until,
             bool any_copy) {
            auto k = strings_arg(keys, "keys");
            auto x = strings_arg(exclude, "exclude");
            auto a = strings_arg(alive, "alive");
            RoutedGets r;
            {
              py::gil_scoped_release nogil;
              r = ix.route_choose(k, x, a, now, lease_until, any_copy);
            }
            return py::make_tuple(py::cast(r.nodes), int_list(r.hits), int_list(r.node_ref), int_list(r.tier),
                                  int_list(r.size), r.misses, int_list(r.offset), int_list(r.checksum));
          },
          py::arg("keys"), py::arg("exclude"), py::arg("alive"), py::arg("now"), py::arg("lease_until"),
          py::arg("any_copy") = false,
          "route() plus the copy to read among those on alive nodes (fastest tier, random within it; "
          "any live copy when any_copy): (nodes, hits per node, node_ref, tier, size, misses, offset, checksum), "
          "node_ref 1-based into nodes, 0 for a miss; offset and checksum the chosen copy's place in its "
          "owner's arena and XXH3 (checksum 0: not known).")
      .def(
          "contains",
          [](const MasterIndex& ix, py::handle keys) {
            auto k = strings_arg(keys, "keys");
            py::gil_scoped_release nogil;
            return ix.contains(k);
          },
          py::arg("keys"), "Per key whether it has a copy.")
      .def(
          "candidates",
          [](const MasterIndex& ix, const std::string& node_id, int32_t tier, double now) {
            std::vector<IndexCandidate> c;
            {
              py::gil_scoped_release nogil;
              c = ix.candidates(node_id, tier, now);
            }
            py::list out(c.size());
            for (size_t i = 0; i < c.size(); ++i) out[i] = py::make_tuple(c[i].key, c[i].size, c[i].last_access);
            return out;
          },
          py::arg("node_id"), py::arg("tier"), py::arg("now"),
          "The node's unleased copies in the tier as (key, size, last_access).")
      .def("node_copies", &MasterIndex::node_copies, py::arg("node_id"), py::call_guard<py::gil_scoped_release>(),
           "[(key, tier)] of every copy the node holds.")
      .def("node_keys", &MasterIndex::node_keys, py::arg("node_id"), py::call_guard<py::gil_scoped_release>(),
           "Keys the node holds a copy of.")
      .def("__len__", &MasterIndex::size);

  using TierTuple = std::tuple<int32_t, uint64_t, uint64_t, uint64_t>;
  py::class_<std::vector<NodeRoom>>(m, "NodeRooms",
                                    "The live nodes and their room, converted once for a batch of put routes "
                                    "(PutRoutes.rooms).")
      .def("__len__", [](const std::vector<NodeRoom>& v) { return v.size(); });
  py::class_<PutRoutes>(m, "PutRoutes",
                        "The UMBP master's put routing (master_put_routes.h): the room each live node reported, "
                        "less what was routed to it since. The one registry: the Python servicers and the grpc++ "
                        "server's native BatchRoutePut route against the same counts.")
      .def(py::init<const std::string&, const std::string&>(), py::arg("algo"), py::arg("affinity"),
           "algo: most_available | random; affinity: none | same | local.")
      .def(
          "reported",
          [](PutRoutes& r, const std::string& node_id, const std::vector<TierTuple>& tiers, double at) {
            std::vector<TierRoom> room;
            for (const auto& [tier, total, available, max_allocatable] : tiers)
              room.push_back(TierRoom{tier, total, available, max_allocatable});
            py::gil_scoped_release nogil;
            r.reported(node_id, room, at);
          },
          py::arg("node_id"), py::arg("tiers"), py::arg("at"),
          "A heartbeat or registration at wall time `at` brought [(tier, total, available, max_allocatable)]: "
          "what was routed to the node before is forgotten. Empty `tiers`: only that.")
      .def("forget", &PutRoutes::forget, py::arg("node_id"), py::call_guard<py::gil_scoped_release>(),
           "The node left: nothing of it is kept.")
      .def_static(
          "rooms",
          [](const std::vector<std::tuple<std::string, std::string, double, std::vector<TierTuple>>>& nodes) {
            std::vector<NodeRoom> out;
            out.reserve(nodes.size());
            for (const auto& [node_id, peer, last_heartbeat, tiers] : nodes) {
              NodeRoom n{node_id, peer, last_heartbeat, {}};
              for (const auto& [tier, total, available, max_allocatable] : tiers)
                n.tiers.push_back(TierRoom{tier, total, available, max_allocatable});
              out.push_back(std::move(n));
            }
            return out;
          },
          py::arg("nodes"),
          "[(node_id, peer_address, last_heartbeat, [(tier, total, available, max_allocatable)])] as NodeRooms.")
      .def(
          "route",
          [](PutRoutes& r, const std::string& writer, uint64_t size, const std::vector<NodeRoom>& rooms,
             const std::vector<std::string>& exclude) -> py::object {
            std::optional<PutRoute> target;
            {
              py::gil_scoped_release nogil;
              target = r.route(writer, size, rooms, std::unordered_set<std::string>(exclude.begin(), exclude.end()));
            }
            if (!target) return py::none();
            return py::make_tuple(target->node_id, target->tier, target->peer_address);
          },
          py::arg("writer"), py::arg("size"), py::arg("rooms"), py::arg("exclude"),
          "(node_id, tier, peer_address) of where the put goes (its bytes now count as routed there), or None.");
}
