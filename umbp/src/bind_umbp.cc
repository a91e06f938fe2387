// SPDX-License-Identifier: MIT
// mori._C.umbp: MORI-UMBP's native classes under MORI's names (re-exported by mori.umbp, mori.cpp).
// Every I/O method of UMBPClient releases the GIL: none calls back into Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <tuple>
#include <memory>
#include <set>
#include <shared_mutex>
#include <sstream>

#include "mori/core/status.h"
#include "mori/umbp/client.h"
#include "mori/umbp/config.h"
#include "src/argument_checks.h"
#include "src/arrival_checksums.h"
#include "src/checksum.h"
#include "src/clients.h"
#include "src/host_mem_allocator.h"
#include "src/local_client.h"
#include "src/location_cache.h"
#include "src/peer_puts.h"
#include "src/wakeup.h"

namespace py = pybind11;
using namespace mori::umbp;

py::dict umbp_stats_dict(const ClientStats& s);  // below; bind_umbp_server.cc uses it too

namespace {

// UMBPClient as Python holds it: close() drops the store (draining its SSD copies) once the
// calls in flight on other threads have returned; any later call raises.
class PyClient {
 public:
  explicit PyClient(const Config& config) : impl_(create_client(config)) {}
  // Distributed mode: the store of the pages this worker owns (mori.umbp's distributed client
  // is built over it).
  PyClient(const Config& config, bool owned_pages)
      : impl_(owned_pages ? make_owned_pages_store(config) : create_client(config)) {}

  // The owned-pages store's peer hooks (raises for other clients).
  template <typename F>
  auto peer(F&& f) {
    return with([&](Client& x) {
      auto* local = dynamic_cast<LocalClient*>(&x);
      if (!local || !local->owns_pool_pages())
        mori::raise(mori::Status::kInvalidUsage,
                    "UMBPClient: the peer_* calls are for the distributed client's own store");
      return f(local->peer_pages());
    });
  }

  template <typename F>
  auto with(F&& f) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (!impl_) mori::raise(mori::Status::kInvalidUsage, "UMBPClient is closed");
    return f(*impl_);
  }

  void close() {
    std::unique_ptr<Client> gone;
    {
      std::unique_lock<std::shared_mutex> lock(mu_);
      gone = std::move(impl_);
    }
  }

 private:
  std::shared_mutex mu_;
  std::unique_ptr<Client> impl_;
};

using TierHashes = std::map<TierType, std::vector<std::string>>;

TierHashes hashes_as_map(const ExternalKvMatch& m) {
  TierHashes out;
  for (const auto& [tier, hashes] : m.hashes_by_tier) {
    auto& v = out[tier];
    v.insert(v.end(), hashes.begin(), hashes.end());
  }
  return out;
}

size_t matched_hash_count(const ExternalKvMatch& m) {
  std::set<std::string> distinct;
  for (const auto& [tier, hashes] : m.hashes_by_tier) distinct.insert(hashes.begin(), hashes.end());
  return distinct.size();
}

void bind_enums(py::module_& m) {
  py::enum_<HostBufferBacking>(m, "UMBPHostBufferBacking")
      .value("Anonymous", HostBufferBacking::Anonymous)
      .value("AnonymousHugetlb", HostBufferBacking::AnonymousHugetlb)
      .value("AnonymousShm", HostBufferBacking::AnonymousShm)
      .value("AnonymousShmHugetlb", HostBufferBacking::AnonymousShmHugetlb)
      .export_values();
  py::enum_<TierType>(m, "UMBPTierType")
      .value("Unknown", TierType::Unknown)
      .value("HBM", TierType::HBM)
      .value("DRAM", TierType::DRAM)
      .value("SSD", TierType::SSD)
      .export_values();
  py::enum_<Role>(m, "UMBPRole")
      .value("Standalone", Role::Standalone)
      .value("SharedSSDLeader", Role::SharedSSDLeader)
      .value("SharedSSDFollower", Role::SharedSSDFollower)
      .export_values();
  py::enum_<DeploymentMode>(m, "UMBPDeploymentMode")
      .value("Local", DeploymentMode::Local)
      .value("StandaloneProcess", DeploymentMode::StandaloneProcess)
      .value("Distributed", DeploymentMode::Distributed)
      .export_values();
  py::enum_<SsdLayoutMode>(m, "UMBPSsdLayoutMode").value("SegmentedLog", SsdLayoutMode::SegmentedLog).export_values();
  py::enum_<IoBackend>(m, "UMBPIoBackend")
      .value("Posix", IoBackend::Posix)
      .value("IoUring", IoBackend::IoUring)
      .export_values();
  py::enum_<DurabilityMode>(m, "UMBPDurabilityMode")
      .value("Strict", DurabilityMode::Strict)
      .value("Relaxed", DurabilityMode::Relaxed)
      .export_values();
  py::enum_<CacheRemoteAdmission>(m, "CacheRemoteAdmission")
      .value("SIZE", CacheRemoteAdmission::SIZE)
      .value("NEVER", CacheRemoteAdmission::NEVER)
      .value("ALWAYS", CacheRemoteAdmission::ALWAYS);
}

void bind_configs(py::module_& m) {
  py::class_<DramConfig>(m, "UMBPDramConfig", "DRAM tier: capacity, watermarks, huge pages, NUMA node, prefault")
      .def(py::init<>())
      .def_readwrite("capacity_bytes", &DramConfig::capacity_bytes)
      .def_readwrite("use_shared_memory", &DramConfig::use_shared_memory)
      .def_readwrite("shm_name", &DramConfig::shm_name)
      .def_readwrite("high_watermark", &DramConfig::high_watermark)
      .def_readwrite("low_watermark", &DramConfig::low_watermark)
      .def_readwrite("use_hugepages", &DramConfig::use_hugepages)
      .def_readwrite("hugepage_size", &DramConfig::hugepage_size)
      .def_readwrite("numa_node", &DramConfig::numa_node)
      .def_readwrite("prefault", &DramConfig::prefault);
  py::class_<IoConfig>(m, "UMBPIoConfig", "SSD I/O: backend (io_uring or POSIX) and queue depth")
      .def(py::init<>())
      .def_readwrite("backend", &IoConfig::backend)
      .def_readwrite("queue_depth", &IoConfig::queue_depth);
  py::class_<DurabilityConfig>(m, "UMBPDurabilityConfig", "SSD durability: Strict or Relaxed, background GC")
      .def(py::init<>())
      .def_readwrite("mode", &DurabilityConfig::mode)
      .def_readwrite("enable_background_gc", &DurabilityConfig::enable_background_gc);
  py::class_<SsdConfig>(m, "UMBPSsdConfig", "SSD tier: a segmented log in storage_dir")
      .def(py::init<>())
      .def_readwrite("enabled", &SsdConfig::enabled)
      .def_readwrite("storage_dir", &SsdConfig::storage_dir)
      .def_readwrite("capacity_bytes", &SsdConfig::capacity_bytes)
      .def_readwrite("layout_mode", &SsdConfig::layout_mode)
      .def_readwrite("segment_size_bytes", &SsdConfig::segment_size_bytes)
      .def_readwrite("high_watermark", &SsdConfig::high_watermark)
      .def_readwrite("low_watermark", &SsdConfig::low_watermark)
      .def_readwrite("io", &SsdConfig::io)
      .def_readwrite("durability", &SsdConfig::durability)
      .def_readwrite("ssd_backend", &SsdConfig::ssd_backend)
      .def_readwrite("spdk_bdev_name", &SsdConfig::spdk_bdev_name)
      .def_readwrite("spdk_reactor_mask", &SsdConfig::spdk_reactor_mask)
      .def_readwrite("spdk_mem_size_mb", &SsdConfig::spdk_mem_size_mb)
      .def_readwrite("spdk_nvme_pci_addr", &SsdConfig::spdk_nvme_pci_addr)
      .def_readwrite("spdk_nvme_ctrl_name", &SsdConfig::spdk_nvme_ctrl_name)
      .def_readwrite("spdk_io_workers", &SsdConfig::spdk_io_workers)
      .def_readwrite("spdk_proxy_shm_name", &SsdConfig::spdk_proxy_shm_name)
      .def_readwrite("spdk_proxy_bin", &SsdConfig::spdk_proxy_bin)
      .def_readwrite("spdk_proxy_tenant_id", &SsdConfig::spdk_proxy_tenant_id)
      .def_readwrite("spdk_proxy_tenant_quota_bytes", &SsdConfig::spdk_proxy_tenant_quota_bytes)
      .def_readwrite("spdk_proxy_max_channels", &SsdConfig::spdk_proxy_max_channels)
      .def_readwrite("spdk_proxy_data_per_channel_mb", &SsdConfig::spdk_proxy_data_per_channel_mb)
      .def_readwrite("spdk_proxy_startup_timeout_ms", &SsdConfig::spdk_proxy_startup_timeout_ms)
      .def_readwrite("spdk_proxy_auto_start", &SsdConfig::spdk_proxy_auto_start)
      .def_readwrite("spdk_proxy_idle_exit_timeout_ms", &SsdConfig::spdk_proxy_idle_exit_timeout_ms)
      .def_readwrite("spdk_proxy_allow_borrow", &SsdConfig::spdk_proxy_allow_borrow)
      .def_readwrite("spdk_proxy_reserved_shared_bytes", &SsdConfig::spdk_proxy_reserved_shared_bytes);
  py::class_<EvictionConfig>(m, "UMBPEvictionConfig", "DRAM eviction: policy, candidate window, promote on read")
      .def(py::init<>())
      .def_readwrite("policy", &EvictionConfig::policy)
      .def_readwrite("candidate_window", &EvictionConfig::candidate_window)
      .def_readwrite("auto_promote_on_read", &EvictionConfig::auto_promote_on_read);
  py::class_<CopyPipelineConfig>(m, "UMBPCopyPipelineConfig", "the asynchronous DRAM -> SSD copy")
      .def(py::init<>())
      .def_readwrite("async_enabled", &CopyPipelineConfig::async_enabled)
      .def_readwrite("queue_depth", &CopyPipelineConfig::queue_depth)
      .def_readwrite("worker_threads", &CopyPipelineConfig::worker_threads)
      .def_readwrite("batch_max_ops", &CopyPipelineConfig::batch_max_ops);
  py::class_<MasterClientConfig>(m, "UMBPMasterClientConfig")
      .def(py::init<>())
      .def_readwrite("master_address", &MasterClientConfig::master_address)
      .def_readwrite("node_id", &MasterClientConfig::node_id)
      .def_readwrite("node_address", &MasterClientConfig::node_address)
      .def_readwrite("auto_heartbeat", &MasterClientConfig::auto_heartbeat)
      .def_readwrite("tags", &MasterClientConfig::tags);
  py::class_<IoEngineConfig>(m, "UMBPIoEngineConfig")
      .def(py::init<>())
      .def_readwrite("host", &IoEngineConfig::host)
      .def_readwrite("port", &IoEngineConfig::port);
  py::class_<HbmConfig>(m, "UMBPHbmConfig", "a distributed worker's GPU pages (off while its size is 0)")
      .def(py::init<>())
      .def_readwrite("device", &HbmConfig::device)
      .def_readwrite("capacity_bytes", &HbmConfig::capacity_bytes)
      .def_readwrite("buffer_sizes", &HbmConfig::buffer_sizes)
      .def("total_bytes", &HbmConfig::total_bytes, "the arena's bytes: sum of buffer_sizes, else capacity_bytes");
  py::class_<DistributedConfig>(m, "UMBPDistributedConfig",
                                "the distributed pool: master, peers, MORI-IO data plane (mori.umbp.UMBPClient)")
      .def(py::init<>())
      .def_readwrite("master_config", &DistributedConfig::master_config)
      .def_readwrite("io_engine", &DistributedConfig::io_engine)
      .def_readwrite("hbm", &DistributedConfig::hbm)
      .def_readwrite("staging_buffer_size", &DistributedConfig::staging_buffer_size)
      .def_readwrite("ssd_staging_buffer_size", &DistributedConfig::ssd_staging_buffer_size)
      .def_readwrite("ssd_staging_buffer_slots", &DistributedConfig::ssd_staging_buffer_slots)
      .def_readwrite("peer_service_port", &DistributedConfig::peer_service_port)
      .def_readwrite("cache_remote_fetches", &DistributedConfig::cache_remote_fetches)
      .def_readwrite("cache_remote_admission", &DistributedConfig::cache_remote_admission)
      .def_readwrite("admission_max_block_bytes", &DistributedConfig::admission_max_block_bytes)
      .def_readwrite("dram_page_size", &DistributedConfig::dram_page_size)
      .def_readwrite("ranged_scratch_size", &DistributedConfig::ranged_scratch_size)
      .def_readwrite("ranged_locality_prefetch", &DistributedConfig::ranged_locality_prefetch)
      .def_readwrite("local_first", &DistributedConfig::local_first)
      .def_readwrite("backend_policy_path", &DistributedConfig::backend_policy_path);
  py::class_<StandaloneProcessConfig>(m, "UMBPStandaloneProcessConfig", "a client of the per-host server")
      .def(py::init<>())
      .def_readwrite("address", &StandaloneProcessConfig::address)
      .def_readwrite("auto_start", &StandaloneProcessConfig::auto_start)
      .def_readwrite("startup_timeout_ms", &StandaloneProcessConfig::startup_timeout_ms)
      .def_readwrite("worker_node_id", &StandaloneProcessConfig::worker_node_id)
      .def_readwrite("worker_node_address", &StandaloneProcessConfig::worker_node_address)
      .def_readwrite("tags", &StandaloneProcessConfig::tags);
  py::class_<Config>(m, "UMBPConfig", "MORI-UMBP's configuration (MORI's fields and defaults)")
      .def(py::init<>())
      .def_static("from_environment", &Config::from_environment,
                  "MORI's defaults overlaid with the UMBP_* environment settings (`mori info --env`)")
      .def_readwrite("dram", &Config::dram)
      .def_readwrite("ssd", &Config::ssd)
      .def_readwrite("eviction", &Config::eviction)
      .def_readwrite("copy_pipeline", &Config::copy_pipeline)
      .def_readwrite("role", &Config::role)
      .def_readwrite("follower_mode", &Config::follower_mode)
      .def_readwrite("force_ssd_copy_on_write", &Config::force_ssd_copy_on_write)
      .def_readwrite("distributed", &Config::distributed)
      .def_readwrite("standalone_process", &Config::standalone_process)
      .def("validate", &Config::validate, "raises ValueError naming the first bad field");
}

void bind_host_memory(py::module_& m) {
  py::class_<HostBufferHandle>(m, "UMBPHostBufferHandle", "a mapping made by UMBPHostMemAllocator (falsy once freed)")
      .def(py::init<>())
      .def_property_readonly("ptr", [](const HostBufferHandle& h) { return reinterpret_cast<uintptr_t>(h.ptr); })
      .def_readonly("requested_size", &HostBufferHandle::requested_size)
      .def_readonly("mapped_size", &HostBufferHandle::mapped_size)
      .def_readonly("actual_backing", &HostBufferHandle::actual_backing)
      .def_readonly("actual_alignment", &HostBufferHandle::actual_alignment)
      .def_readonly("fd", &HostBufferHandle::fd, "memory file of Shm backings (-1 otherwise); owned by the allocator")
      .def("__bool__", &HostBufferHandle::valid)
      .def("__repr__", [](const HostBufferHandle& h) {
        std::ostringstream o;
        o << "<UMBPHostBufferHandle ptr=0x" << std::hex << reinterpret_cast<uintptr_t>(h.ptr) << std::dec
          << " requested_size=" << h.requested_size << " mapped_size=" << h.mapped_size
          << " actual_backing=" << std::string(py::str(py::cast(h.actual_backing)))
          << " actual_alignment=" << h.actual_alignment << ">";
        return o.str();
      });
  py::class_<HostMemAllocator>(m, "UMBPHostMemAllocator", "host buffers: anonymous, huge pages, memfd-shared")
      .def(py::init<>())
      .def(
          "alloc",
          [](HostMemAllocator& self, size_t size, HostBufferBacking backing, size_t hugepage_size, int numa_node,
             bool prefault) {
            HostBufferOptions o;
            o.backing = backing;
            o.hugepage_size = hugepage_size;
            o.numa_node = numa_node;
            o.prefault = prefault;
            return self.alloc(size, o);
          },
          py::arg("size"), py::arg("backing") = HostBufferBacking::Anonymous,
          py::arg("hugepage_size") = size_t{2} << 20, py::arg("numa_node") = -1, py::arg("prefault") = true,
          py::call_guard<py::gil_scoped_release>(),
          "maps `size` bytes; the handle reports the backing actually used (huge pages fall back to normal ones)")
      .def(
          "free", [](HostMemAllocator& self, HostBufferHandle& h) { self.free(h); }, py::arg("handle"),
          py::call_guard<py::gil_scoped_release>(), "unmaps the buffer and resets the handle (idempotent)");
}

void bind_client(py::module_& m) {
  py::class_<ExternalKvMatch>(m, "UMBPExternalKvMatch")
      .def(py::init<>())
      .def_readwrite("node_id", &ExternalKvMatch::node_id)
      .def_readwrite("peer_address", &ExternalKvMatch::peer_address)
      .def_property("hashes_by_tier", &hashes_as_map,
                    [](ExternalKvMatch& self, const TierHashes& v) { self.hashes_by_tier.assign(v.begin(), v.end()); })
      .def("matched_hash_count", &matched_hash_count)
      .def("__repr__", [](const ExternalKvMatch& x) {
        return "<UMBPExternalKvMatch node_id='" + x.node_id + "' matched=" + std::to_string(matched_hash_count(x)) +
               ">";
      });
  py::class_<ExternalKvHitCount>(m, "UMBPExternalKvHitCountEntry")
      .def(py::init<>())
      .def_readwrite("hash", &ExternalKvHitCount::hash)
      .def_readwrite("hit_count_total", &ExternalKvHitCount::hit_count_total)
      .def("__repr__", [](const ExternalKvHitCount& e) {
        return "<UMBPExternalKvHitCountEntry hash='" + e.hash +
               "' hit_count_total=" + std::to_string(e.hit_count_total) + ">";
      });

  using Keys = std::vector<std::string>;
  using Ptrs = std::vector<uintptr_t>;
  using Sizes = std::vector<size_t>;
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<PyClient>(m, "UMBPClient",
                       "MORI-UMBP's data-plane client: the local store, or a client of the per-host server "
                       "(config.standalone_process). Pointers are int addresses of host memory.")
      .def(py::init<const Config&>(), py::arg("config") = Config{}, Release())
      .def(py::init<const Config&, bool>(), py::arg("config"), py::arg("owned_pages"), Release(),
           "owned_pages=True: the store of the pages a distributed worker owns (mori.umbp builds the "
           "distributed client over it)")
      .def(
          "put_from_ptr",
          [](PyClient& c, const std::string& key, uintptr_t src, size_t size) {
            return c.with([&](Client& x) { return x.put(key, reinterpret_cast<const void*>(src), size); });
          },
          py::arg("key"), py::arg("src"), py::arg("size"), Release(),
          "stores `size` bytes at `src` under `key`; a key already stored keeps its value (True)")
      .def(
          "get_into_ptr",
          [](PyClient& c, const std::string& key, uintptr_t dst, size_t size) {
            return c.with([&](Client& x) { return x.get(key, reinterpret_cast<void*>(dst), size); });
          },
          py::arg("key"), py::arg("dst"), py::arg("size"), Release(),
          "copies the value of `key` (exactly `size` bytes) to `dst`; False on a miss")
      .def(
          "exists",
          [](PyClient& c, const std::string& key) { return c.with([&](Client& x) { return x.exists(key); }); },
          py::arg("key"), Release())
      .def(
          "batch_put_from_ptr",
          [](PyClient& c, const Keys& keys, const Ptrs& ptrs, const Sizes& sizes) {
            return c.with([&](Client& x) { return x.batch_put(keys, ptrs, sizes, {}); });
          },
          py::arg("keys"), py::arg("ptrs"), py::arg("sizes"), Release())
      .def(
          "batch_put_from_ptr_with_depth",
          [](PyClient& c, const Keys& keys, const Ptrs& ptrs, const Sizes& sizes, const std::vector<int>& depths) {
            return c.with([&](Client& x) { return x.batch_put(keys, ptrs, sizes, depths); });
          },
          py::arg("keys"), py::arg("ptrs"), py::arg("sizes"), py::arg("depths"), Release(),
          "batch put with each key's radix-tree depth: deeper pages are evicted first (-1: plain LRU)")
      .def(
          "batch_get_into_ptr",
          [](PyClient& c, const Keys& keys, const Ptrs& ptrs, const Sizes& sizes) {
            return c.with([&](Client& x) { return x.batch_get(keys, ptrs, sizes); });
          },
          py::arg("keys"), py::arg("ptrs"), py::arg("sizes"), Release())
      .def(
          "batch_exists",
          [](PyClient& c, const Keys& keys) { return c.with([&](Client& x) { return x.batch_exists(keys); }); },
          py::arg("keys"), Release())
      .def(
          "batch_exists_consecutive",
          [](PyClient& c, const py::sequence& keys) -> size_t {
            // SGLang asks this before every prefill: a list of str is read in place, as views of
            // each str's UTF-8 bytes (no copy, no allocation per key), kept alive by a tuple of
            // them while the GIL is released. Anything else converts as the other calls do.
            if (py::isinstance<py::str>(keys) || py::isinstance<py::bytes>(keys))
              throw py::type_error("batch_exists_consecutive: keys must be a list of str, not one str");
            auto held = py::reinterpret_steal<py::tuple>(PySequence_Tuple(keys.ptr()));
            if (!held) throw py::error_already_set();
            const size_t n = held.size();
            std::vector<std::string_view> views(n);
            for (size_t i = 0; i < n; ++i) {
              PyObject* key = PyTuple_GET_ITEM(held.ptr(), static_cast<Py_ssize_t>(i));
              Py_ssize_t len = 0;
              const char* data = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &len) : nullptr;
              if (!data) {
                PyErr_Clear();
                const Keys owned = held.cast<Keys>();
                py::gil_scoped_release nogil;
                return c.with([&](Client& x) { return x.batch_exists_consecutive(owned); });
              }
              views[i] = std::string_view(data, static_cast<size_t>(len));
            }
            py::gil_scoped_release nogil;
            return c.with([&](Client& x) -> size_t {
              if (auto* local = dynamic_cast<LocalClient*>(&x)) return local->batch_exists_consecutive(views.data(), n);
              return x.batch_exists_consecutive(Keys(views.begin(), views.end()));
            });
          },
          py::arg("keys"), "length of the prefix of `keys` that is stored (stops at the first miss)")
      .def(
          "clear", [](PyClient& c) { return c.with([](Client& x) { return x.clear(); }); }, Release())
      .def(
          "flush", [](PyClient& c) { return c.with([](Client& x) { return x.flush(); }); }, Release())
      .def("is_distributed", [](PyClient& c) { return c.with([](Client& x) { return x.is_distributed(); }); })
      .def("get_deployment_mode", [](PyClient& c) { return c.with([](Client& x) { return x.deployment_mode(); }); })
      .def(
          "register_memory",
          [](PyClient& c, uintptr_t ptr, size_t size, const py::object& loc, int device) {
            py::gil_scoped_release nogil;  // by hand: `loc` is a Python object
            return c.with([&](Client& x) { return x.register_memory(reinterpret_cast<void*>(ptr), size); });
          },
          py::arg("ptr"), py::arg("size"), py::arg("loc") = py::none(), py::arg("device") = -1,
          "lets the store reach [ptr, ptr + size) without a staging copy (`loc`, `device`: MORI's, host memory only)")
      .def(
          "deregister_memory",
          [](PyClient& c, uintptr_t ptr) {
            c.with([&](Client& x) {
              x.deregister_memory(reinterpret_cast<void*>(ptr));
              return 0;
            });
          },
          py::arg("ptr"), Release())
      .def(
          "report_external_kv_blocks",
          [](PyClient& c, const Keys& hashes, TierType tier) {
            return c.with([&](Client& x) { return x.report_external_kv_blocks(hashes, tier); });
          },
          py::arg("hashes"), py::arg("tier"), Release())
      .def(
          "revoke_external_kv_blocks",
          [](PyClient& c, const Keys& hashes, TierType tier) {
            return c.with([&](Client& x) { return x.revoke_external_kv_blocks(hashes, tier); });
          },
          py::arg("hashes"), py::arg("tier"), Release())
      .def(
          "revoke_all_external_kv_blocks_at_tier",
          [](PyClient& c, TierType tier) {
            return c.with([&](Client& x) { return x.revoke_all_external_kv_blocks_at_tier(tier); });
          },
          py::arg("tier"), Release())
      .def(
          "match_external_kv",
          [](PyClient& c, const Keys& hashes, bool count_as_hit) {
            return c.with([&](Client& x) { return x.match_external_kv(hashes, count_as_hit); });
          },
          py::arg("hashes"), py::arg("count_as_hit") = false, Release())
      .def(
          "get_external_kv_hit_counts",
          [](PyClient& c, const Keys& hashes) {
            return c.with([&](Client& x) { return x.get_external_kv_hit_counts(hashes); });
          },
          py::arg("hashes"), Release())
      // ---- distributed mode: the owned pages' peer hooks (mori.umbp.distributed uses them) ----
      .def(
          "peer_arena",
          [](PyClient& c) {
            return c.peer([](PeerPages& p) {
              return py::make_tuple(p.arena_ptr(), p.arena_size(), p.staging_ptr(), p.staging_size(),
                                    p.staging_slot_size());
            });
          },
          "(arena ptr, arena size, staging ptr, staging size, staging slot size) for MORI-IO registration")
      .def(
          "peer_hbm_arena",
          [](PyClient& c) {
            return c.peer([](PeerPages& p) { return py::make_tuple(p.hbm_ptr(), p.hbm_size(), p.hbm_device()); });
          },
          "(HBM arena device ptr, size, CUDA device) for MORI-IO registration as GPU memory; (0, 0, -1): none")
      .def(
          "peer_hbm_stats",
          [](PyClient& c) {
            return c.peer([](PeerPages& p) {
              const DramStats s = p.hbm_stats();
              return py::make_tuple(s.capacity_bytes, s.used_bytes, s.pinned_bytes, s.keys, s.evictions);
            });
          },
          "(capacity, used, pinned, keys, evictions) bytes/counts of the HBM pages (zeros: none)")
      .def(
          "peer_hbm_get",
          [](PyClient& c, const Keys& keys, const std::vector<uintptr_t>& dsts, const std::vector<uint64_t>& sizes) {
            return c.peer([&](PeerPages& p) { return p.hbm_get(keys, dsts, sizes); });
          },
          py::arg("keys"), py::arg("ptrs"), py::arg("sizes"), Release(),
          "copies this worker's HBM values of exactly these sizes into host or device memory: hits")
      .def(
          "peer_hbm_put",
          [](PyClient& c, const Keys& keys, const std::vector<uintptr_t>& srcs, const std::vector<uint64_t>& sizes) {
            return c.peer([&](PeerPages& p) { return p.hbm_put(keys, srcs, sizes); });
          },
          py::arg("keys"), py::arg("ptrs"), py::arg("sizes"), Release(),
          "stores values from host or device memory in this worker's HBM pages: AllocateSlotOutcome values "
          "(1 stored, 2 there already, 3 failed, 4 no space)")
      .def(
          "peer_allocate",
          [](PyClient& c, const Keys& keys, const std::vector<uint64_t>& sizes, const std::vector<int>& tiers) {
            auto g = c.peer([&](PeerPages& p) { return p.allocate(keys, sizes, tiers); });
            py::gil_scoped_acquire gil;
            py::list out;
            for (const auto& x : g) out.append(py::make_tuple(static_cast<int>(x.outcome), x.slot_id, x.offset));
            return out;
          },
          py::arg("keys"), py::arg("sizes"), py::arg("tiers") = std::vector<int>{}, Release(),
          "reserves invisible slots (tiers: UMBPTierType values, HBM in the HBM arena; empty: DRAM): "
          "[(AllocateSlotOutcome value, slot_id, arena offset)]")
      .def(
          "peer_commit",
          [](PyClient& c, const std::vector<uint64_t>& ids, const Keys& keys) {
            return c.peer([&](PeerPages& p) { return p.commit(ids, keys); });
          },
          py::arg("slot_ids"), py::arg("keys"), Release(), "publishes written slots (False: unknown or reaped)")
      .def(
          "peer_abort",
          [](PyClient& c, const std::vector<uint64_t>& ids) {
            return c.peer([&](PeerPages& p) { return p.abort(ids); });
          },
          py::arg("slot_ids"), Release(), "drops pending slots (idempotent)")
      .def(
          "peer_resolve",
          [](PyClient& c, const Keys& keys) {
            auto r = c.peer([&](PeerPages& p) { return p.resolve(keys); });
            py::gil_scoped_acquire gil;
            py::list out;
            for (const auto& x : r)
              out.append(py::make_tuple(x.found, x.tier, x.offset, x.size, x.checksum, x.lease_id));
            return out;
          },
          py::arg("keys"), Release(),
          "[(found, tier, arena offset, size, checksum, lease_id)]: DRAM values pinned under a read lease")
      .def(
          "peer_prepare_ssd_read",
          [](PyClient& c, const std::string& key, uint64_t max_size) {
            auto x = c.peer([&](PeerPages& p) { return p.prepare_ssd_read(key, max_size); });
            py::gil_scoped_acquire gil;
            return py::make_tuple(static_cast<int>(x.outcome), x.offset, x.size, x.checksum, x.lease_id);
          },
          py::arg("key"), py::arg("max_size") = 0, Release(),
          "stages an SSD value: (outcome 0 ok/1 not found/2 no slot/3 too large/4 error, staging offset, size, "
          "checksum, lease_id)")
      .def(
          "peer_release",
          [](PyClient& c, uint64_t lease) { return c.peer([&](PeerPages& p) { return p.release(lease); }); },
          py::arg("lease_id"), Release())
      .def(
          "peer_evict",
          [](PyClient& c, const Keys& keys) { return c.peer([&](PeerPages& p) { return p.evict(keys); }); },
          py::arg("keys"), Release(), "bytes freed per key (0: leased, pinned or absent)")
      .def(
          "peer_remove",
          [](PyClient& c, const Keys& keys) { return c.peer([&](PeerPages& p) { return p.remove(keys); }); },
          py::arg("keys"), Release(),
          "a cluster-wide clear's EvictKey: each key gone from every tier, leased or not; bytes freed per key "
          "(0: absent)")
      .def(
          "peer_verify",
          [](PyClient& c, const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes,
             const std::vector<uint64_t>& checksums) {
            return c.peer([&](PeerPages& p) { return p.verify(ptrs, sizes, checksums); });
          },
          py::arg("ptrs"), py::arg("sizes"), py::arg("checksums"), Release(),
          "per value: whether [ptr, ptr + size) has that XXH3 checksum (values read from peers; a batch of "
          "1 MiB or more is hashed on a team of threads)")
      .def(
          "peer_drain_events",
          [](PyClient& c, size_t max) {
            auto ev = c.peer([&](PeerPages& p) { return p.events().drain(max); });
            py::gil_scoped_acquire gil;
            py::list out;
            for (const auto& e : ev)
              out.append(py::make_tuple(static_cast<int>(e.kind), e.key, e.tier, e.size, e.seq, e.offset, e.checksum));
            return out;
          },
          py::arg("max") = 0, Release(),
          "[(kind 0 ADD/1 REMOVE, key, tier, size, seq, arena offset, checksum)], oldest first (offset and "
          "checksum: DRAM ADDs only, else 0)")
      .def(
          "peer_event_state",
          [](PyClient& c) {
            return c.peer([](PeerPages& p) {
              return py::make_tuple(p.events().pending(), p.events().last_seq(), p.events().overflowed(), p.leases(),
                                    p.pending_slots());
            });
          },
          "(queued events, last seq, events dropped by overflow, live read leases, pending slots)")
      .def(
          "peer_snapshot",
          [](PyClient& c) {
            auto snap = c.peer([](PeerPages& p) { return p.snapshot(); });
            py::gil_scoped_acquire gil;
            py::list keys;
            for (const auto& k : snap.second) keys.append(py::make_tuple(k.key, k.tier, k.size, k.offset, k.checksum));
            return py::make_tuple(snap.first, keys);
          },
          Release(),
          "(baseline seq, [(key, tier, size, arena offset, checksum)]): every owned key (offset and checksum: "
          "DRAM only, else 0); queued events up to baseline dropped")
      .def(
          "stats",
          [](PyClient& c) {
            ClientStats s;
            {
              py::gil_scoped_release nogil;
              s = c.with([](Client& x) { return x.stats(); });
            }
            return umbp_stats_dict(s);
          },
          "the store's counters and gauges (dict)")
      .def("close", &PyClient::close, Release(),
           "releases the store (queued SSD copies finish first); later calls raise")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& c, py::args) {
        py::gil_scoped_release nogil;
        c.close();
      });

  using PlaceTuple = std::tuple<std::string, std::string, uint64_t, uint64_t, uint64_t, double>;
  auto as_tuple = [](const LocationCache::Place& p) {
    return PlaceTuple{p.node_id, p.address, p.offset, p.size, p.checksum, p.expires};
  };
  auto lc =
      py::class_<LocationCache>(m, "UMBPLocationCache",
                                "a distributed reader's remembered places of values on their owners (LRU-capped), "
                                "and the located read over them")
          .def(py::init<size_t>(), py::arg("capacity"))
          .def("remember", &LocationCache::remember, py::arg("node_id"), py::arg("address"), py::arg("arena"),
               py::arg("keys"), py::arg("offsets"), py::arg("sizes"), py::arg("checksums"), py::arg("expires"),
               Release(),
               "places (arena offsets, sizes, XXH3 checksums) of values just read from an owner, valid until "
               "`expires` (time.monotonic() seconds)")
          .def("forget_owner", &LocationCache::forget_owner, py::arg("node_id"), Release())
          .def("forget", &LocationCache::forget, py::arg("keys"), Release())
          .def("__len__", &LocationCache::size)
          .def("holds", &LocationCache::holds, py::arg("keys"), Release(),
               "per key, whether a place is held that a read would use now (unexpired, its owner known)")
          .def("add_region", &LocationCache::add_region, py::arg("ptr"), py::arg("size"), py::arg("desc"),
               "host memory registered with the engine (a destination of located reads)")
          .def("remove_region", &LocationCache::remove_region, py::arg("ptr"))
          .def(
              "peek",
              [as_tuple](const LocationCache& c, const std::string& key) -> std::optional<PlaceTuple> {
                LocationCache::Place p;
                if (!c.peek(key, &p)) return std::nullopt;
                return as_tuple(p);
              },
              py::arg("key"), "(node_id, address, offset, size, checksum, expires) or None")
          .def("adjust", &LocationCache::adjust, py::arg("key"), py::arg("offset") = -1, py::arg("expires") = -1.0,
               "test hook: moves a held place (offset) or its expiry (< 0: kept); False when not held")
          .def(
              "read",
              [as_tuple](LocationCache& cache, PyClient& c, mori::io::Engine& engine, const Keys& keys,
                         const Ptrs& ptrs, const std::vector<uint64_t>& sizes, const std::vector<uint32_t>& idx,
                         int64_t timeout_ms) {
                if (keys.size() != ptrs.size() || keys.size() != sizes.size())
                  mori::raise(mori::Status::kInvalidArgument,
                              "UMBPLocationCache.read: keys, ptrs and sizes differ in length");
                for (uint32_t i : idx)
                  if (i >= keys.size())
                    mori::raise(mori::Status::kInvalidArgument, "UMBPLocationCache.read: index out of range");
                auto verify = [&c](const std::vector<uintptr_t>& p, const std::vector<uint64_t>& z,
                                   const std::vector<uint64_t>& k) {
                  return c.peer([&](PeerPages& pages) { return pages.verify(p, z, k); });
                };
                LocationCache::Result r = cache.read(engine, keys, ptrs, sizes, idx, timeout_ms, verify);
                std::vector<PlaceTuple> places;
                places.reserve(r.other_places.size());
                for (const auto& p : r.other_places) places.push_back(as_tuple(p));
                return std::make_tuple(std::move(r.got), std::move(r.rest), std::move(r.other), std::move(places),
                                       r.stale, r.got_bytes, std::move(r.failed), r.on_arrival);
              },
              py::arg("client"), py::arg("engine"), py::arg("keys"), py::arg("ptrs"), py::arg("sizes"),
              py::arg("idx") = std::vector<uint32_t>{}, py::arg("timeout_ms") = 5000, Release(),
              "reads keys[i] (i in idx; empty: all) at their held places into registered host memory, one MORI-IO "
              "batch per owner, each value checked against its XXH3 checksum: (got, rest, other, other_places, "
              "stale, got_bytes, failed [(node_id, address, why)], on_arrival); rest: for the routed path; other: held "
              "places whose destination is not registered host memory; on_arrival: values checked by checksums hashed "
              "as they landed");
  lc.def(
      "get",
      [as_tuple](LocationCache& cache, PyClient& c, mori::io::Engine& engine, const Keys& keys, const Ptrs& ptrs,
                 const Sizes& sizes, int64_t timeout_ms, bool tally) -> py::object {
        std::vector<bool> ok;
        LocationCache::Result r;
        bool tallied = tally;  // every key this client's own: nothing to count
        {
          py::gil_scoped_release nogil;
          for (uintptr_t p : ptrs)
            if (pointer_device(p) >= 0) {
              py::gil_scoped_acquire gil;
              return py::none();  // GPU destinations: the caller's own path
            }
          // The local store first (it checks every argument before anything is written).
          ok = c.with([&](Client& x) { return x.batch_get(keys, ptrs, sizes); });
          std::vector<uint32_t> miss;
          for (size_t i = 0; i < ok.size(); ++i)
            if (!ok[i]) miss.push_back(static_cast<uint32_t>(i));
          if (!miss.empty()) {
            if (miss.size() == keys.size()) miss.clear();  // every key: read()'s "all"
            auto verify = [&c](const std::vector<uintptr_t>& p, const std::vector<uint64_t>& z,
                               const std::vector<uint64_t>& k) {
              return c.peer([&](PeerPages& pages) { return pages.verify(p, z, k); });
            };
            r = cache.read(engine, keys, ptrs, sizes, miss, timeout_ms, verify);
            for (uint32_t i : r.got) ok[i] = true;
            // Nothing left for the caller but the routed keys (ok's False ones): the counts stay
            // here, and the caller runs no Python over the Result.
            tallied = tally && r.failed.empty() && r.other.empty();
            if (tallied) cache.tally(r);
          }
        }
        if (tallied) return py::make_tuple(std::move(ok), py::none());
        std::vector<PlaceTuple> places;
        places.reserve(r.other_places.size());
        for (const auto& p : r.other_places) places.push_back(as_tuple(p));
        return py::make_tuple(std::move(ok),
                              py::make_tuple(std::move(r.got), std::move(r.rest), std::move(r.other), std::move(places),
                                             r.stale, r.got_bytes, std::move(r.failed), r.on_arrival));
      },
      py::arg("client"), py::arg("engine"), py::arg("keys"), py::arg("ptrs"), py::arg("sizes"),
      py::arg("timeout_ms") = 5000, py::arg("tally") = false,
      "a get's whole hot path in one call without the interpreter lock: the client's own store, then the keys it "
      "misses at their held places as read() reads them. (ok, read()'s tuple), or None when a destination is GPU "
      "memory (the caller's own path). With tally, a read that failed no owner and left no key to the caller's "
      "own path is counted in tallied() and answers (ok, None): ok's False keys are for the routed path.");
  lc.def(
      "tallied",
      [](const LocationCache& cache) {
        const LocationCache::Tally t = cache.tallied();
        return py::make_tuple(t.got, t.stale, t.on_arrival, t.got_bytes);
      },
      "(got, stale, on_arrival, got_bytes) summed over the gets that answered (ok, None)");

  lc.def(
      "exists",
      [](LocationCache& cache, PyClient& c, const Keys& keys) {
        py::gil_scoped_release nogil;
        return c.with([&](Client& x) {
          std::vector<bool> found = x.batch_exists(keys);
          std::vector<std::string> rest;
          std::vector<size_t> at;
          for (size_t i = 0; i < keys.size(); ++i)
            if (!found[i]) {
              rest.push_back(keys[i]);
              at.push_back(i);
            }
          if (!rest.empty()) {
            const std::vector<bool> held = cache.holds(rest);
            for (size_t j = 0; j < at.size(); ++j) found[at[j]] = held[j];
          }
          return found;
        });
      },
      py::arg("client"), py::arg("keys"),
      "per key, whether the client's own store holds it or a place of it is held here (the caller asks the "
      "master for the others)");
  lc.def(
      "exists_consecutive",
      [](LocationCache& cache, PyClient& c, const Keys& keys) {
        py::gil_scoped_release nogil;
        return c.with([&](Client& x) -> size_t {
          size_t n = x.batch_exists_consecutive(keys);
          if (n == keys.size()) return n;
          const Keys rest(keys.begin() + static_cast<std::ptrdiff_t>(n), keys.end());
          const std::vector<bool> local = x.batch_exists(rest);
          const std::vector<bool> held = cache.holds(rest);
          for (size_t i = 0; i < rest.size() && (local[i] || held[i]); ++i) ++n;
          return n;
        });
      },
      py::arg("client"), py::arg("keys"),
      "length of the prefix of `keys` that the client's own store holds or whose place is held here (stops at the "
      "first key that is neither: the caller asks the master from there)");

  py::class_<Wakeup>(m, "Wakeup",
                     "a flag a thread waits on (as threading.Event) that C++ code sets without the interpreter "
                     "lock: the distributed client's heartbeat thread waits on one")
      .def(py::init<>())
      .def("set", &Wakeup::set, Release())
      .def("clear", &Wakeup::clear)
      .def("is_set", &Wakeup::is_set)
      .def("wait", &Wakeup::wait, py::arg("timeout"), Release(), "True once set, False when the timeout passed first");

  py::class_<PeerPuts>(m, "PeerPuts",
                       "the owner's side of a pulled put in C++ (peer_puts.h): slots reserved, values read from the "
                       "writer through MORI-IO, committed; the grpc++ peer server runs it")
      .def(py::init([](PyClient& c, mori::io::Engine& engine, const mori::io::MemoryDesc& arena, Wakeup& wake,
                       int64_t transfer_timeout_ms) {
             PeerPuts::Store store;
             store.allocate = [&c](const std::vector<std::string>& keys, const std::vector<uint64_t>& sizes,
                                   const std::vector<int>& tiers) {
               return c.peer([&](PeerPages& p) { return p.allocate(keys, sizes, tiers); });
             };
             store.commit = [&c](const std::vector<uint64_t>& ids, const std::vector<std::string>& keys) {
               return c.peer([&](PeerPages& p) { return p.commit(ids, keys); });
             };
             store.abort = [&c](const std::vector<uint64_t>& ids) {
               return c.peer([&](PeerPages& p) { return p.abort(ids); });
             };
             return std::make_unique<PeerPuts>(std::move(store), engine, arena, &wake, transfer_timeout_ms);
           }),
           py::arg("client"), py::arg("engine"), py::arg("arena"), py::arg("wake"), py::arg("transfer_timeout_ms"),
           py::keep_alive<1, 3>(), py::keep_alive<1, 5>(),
           "client: the distributed client's own store, which owns this (and stops the server running it before "
           "it closes); arena: its DRAM arena's MemoryDesc; wake: set after a commit; transfer_timeout_ms: the "
           "bound of a read")
      .def("remember_source", &PeerPuts::remember_source, py::arg("packed"), py::arg("desc"),
           "a writer's packed MemoryDesc and the desc it unpacks to: its puts are pulled natively from now on")
      .def_property_readonly("sources", &PeerPuts::sources, "writers' buffers remembered")
      .def("hold_next", &PeerPuts::hold_next, py::arg("count"), py::arg("past_s"),
           "test hook: the next `count` reads start `past_s` after their writer's deadline, then read for real")
      .def("take_hold", &PeerPuts::take_hold,
           "test hook: past_s for the read about to start (one fewer held), or < 0 when none is held");
}

}  // namespace

// A store's counters as a dict (UMBPClient.stats(), the per-host server's stats()).
py::dict umbp_stats_dict(const ClientStats& s) {
  py::dict d;
#define MORI_UMBP_STAT(f) d[#f] = s.f
  MORI_UMBP_STAT(puts);
  MORI_UMBP_STAT(put_bytes);
  MORI_UMBP_STAT(gets);
  MORI_UMBP_STAT(get_bytes);
  MORI_UMBP_STAT(dram_hits);
  MORI_UMBP_STAT(ssd_hits);
  MORI_UMBP_STAT(misses);
  MORI_UMBP_STAT(corrupt_reads);
  MORI_UMBP_STAT(dram_evictions);
  MORI_UMBP_STAT(ssd_evictions);
  MORI_UMBP_STAT(put_refusals);
  MORI_UMBP_STAT(ssd_copies);
  MORI_UMBP_STAT(ssd_copy_failures);
  MORI_UMBP_STAT(dram_used_bytes);
  MORI_UMBP_STAT(dram_capacity_bytes);
  MORI_UMBP_STAT(dram_keys);
  MORI_UMBP_STAT(dram_pinned_bytes);
  MORI_UMBP_STAT(ssd_used_bytes);
  MORI_UMBP_STAT(ssd_capacity_bytes);
  MORI_UMBP_STAT(ssd_keys);
#undef MORI_UMBP_STAT
  return d;
}

void bind_umbp(py::module_& m) {
  m.def(
      "value_checksum",
      [](uintptr_t ptr, size_t size) { return value_checksum(reinterpret_cast<const void*>(ptr), size); },
      py::arg("ptr"), py::arg("size"), py::call_guard<py::gil_scoped_release>(),
      "the checksum every stored value carries, of [ptr, ptr + size): XXH3-64 up to 256 KiB, above it "
      "XXH3-64 of the 256 KiB chunks' XXH3-64 digests and the size (umbp/src/checksum.h)");
  m.def(
      "streamed_value_checksum",
      [](uintptr_t ptr, size_t size, size_t piece) {
        MORI_CHECK_ARG(piece > 0, "streamed_value_checksum: piece must be > 0");
        ValueHasher h;
        const char* p = reinterpret_cast<const char*>(ptr);
        for (size_t off = 0; off < size; off += piece) h.update(p + off, std::min(piece, size - off));
        return h.digest();
      },
      py::arg("ptr"), py::arg("size"), py::arg("piece"), py::call_guard<py::gil_scoped_release>(),
      "value_checksum of [ptr, ptr + size) fed to the streaming hasher `piece` bytes at a time (as SSD reads "
      "in pieces and copies hashed as they go take it)");
  py::class_<ArrivalChecksums>(m, "UMBPArrivalChecksums",
                               "the checksums a located read hashes as its bytes land (umbp/src/arrival_checksums.h): "
                               "values [ptrs[i], ptrs[i] + sizes[i]), told of spans as the tcp lanes receive them")
      .def(py::init([](const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes) {
             MORI_CHECK_ARG(ptrs.size() == sizes.size(), "UMBPArrivalChecksums: ptrs and sizes differ in length");
             return std::make_unique<ArrivalChecksums>(ptrs, sizes);
           }),
           py::arg("ptrs"), py::arg("sizes"))
      .def(
          "landed", [](ArrivalChecksums& a, uintptr_t p, size_t n) { a.landed(reinterpret_cast<const char*>(p), n); },
          py::arg("ptr"), py::arg("n"), py::call_guard<py::gil_scoped_release>(),
          "[ptr, ptr + n) landed (from any thread: the lanes call this as recv fills memory)")
      .def(
          "landed_spans",
          [](ArrivalChecksums& a, const std::vector<std::pair<uintptr_t, size_t>>& spans) {
            for (const auto& [p, n] : spans) a.landed(reinterpret_cast<const char*>(p), n);
          },
          py::arg("spans"), py::call_guard<py::gil_scoped_release>(),
          "landed(ptr, n) for each (ptr, n) in turn, in one call: a lane's spans as fast as recv brings them")
      .def("checksum", &ArrivalChecksums::checksum, py::arg("i"), py::call_guard<py::gil_scoped_release>(),
           "value i's checksum when every byte of it was told of exactly once, else None (hashed from memory "
           "after the read)");
  m.def(
      "pointer_device", [](uintptr_t ptr) { return pointer_device(ptr); }, py::arg("ptr"),
      py::call_guard<py::gil_scoped_release>(),
      "the CUDA device whose memory holds ptr; -1: host memory (or CUDA not loaded in this process)");
  m.def(
      "pointer_devices",
      [](const std::vector<uintptr_t>& ptrs) {
        std::vector<int> out(ptrs.size());
        for (size_t i = 0; i < ptrs.size(); ++i) out[i] = pointer_device(ptrs[i]);
        return out;
      },
      py::arg("ptrs"), py::call_guard<py::gil_scoped_release>(), "pointer_device of each (one call for a batch)");
  m.def(
      "device_value_checksum",
      [](uintptr_t ptr, size_t size, int device) {
        return device_checksum(reinterpret_cast<const void*>(ptr), size, device);
      },
      py::arg("ptr"), py::arg("size"), py::arg("device"), py::call_guard<py::gil_scoped_release>(),
      "value_checksum of device memory on `device`, hashed through a host copy");
  bind_enums(m);
  bind_configs(m);
  bind_host_memory(m);
  bind_client(m);
}
