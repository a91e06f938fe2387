// SPDX-License-Identifier: MIT
// UCX's UCP API, loaded at run time. MORI never links libucp: whatever UCX is
// installed (a distro's, a wheel's, a site's HPC-X) is dlopen'ed on first use, so
// the project builds and runs without UCX and picks up a better one when present.
// Shared by transports/ucx (the shmem transport) and io/ (MORI-IO's RDMA backend).
#pragma once

#include <string>

#if MORI_HAVE_UCX_HEADERS
#include <ucp/api/ucp.h>
#endif

namespace mori::ucx {

#if MORI_HAVE_UCX_HEADERS
// Every UCP function either user needs, resolved by dlsym from the loaded library.
struct Ucp {
  decltype(&::ucp_config_read) config_read;
  decltype(&::ucp_config_release) config_release;
  decltype(&::ucp_config_modify) config_modify;
  decltype(&::ucp_init_version) init_version;
  decltype(&::ucp_cleanup) cleanup;
  decltype(&::ucp_context_query) context_query;
  decltype(&::ucp_context_print_info) context_print_info;
  decltype(&::ucp_get_version_string) get_version_string;
  decltype(&::ucp_worker_create) worker_create;
  decltype(&::ucp_worker_destroy) worker_destroy;
  decltype(&::ucp_worker_get_address) worker_get_address;
  decltype(&::ucp_worker_release_address) worker_release_address;
  decltype(&::ucp_worker_progress) worker_progress;
  decltype(&::ucp_worker_arm) worker_arm;
  decltype(&::ucp_worker_get_efd) worker_get_efd;
  decltype(&::ucp_worker_signal) worker_signal;
  decltype(&::ucp_worker_fence) worker_fence;
  decltype(&::ucp_worker_flush_nbx) worker_flush_nbx;
  decltype(&::ucp_worker_set_am_recv_handler) worker_set_am_recv_handler;
  decltype(&::ucp_ep_create) ep_create;
  decltype(&::ucp_ep_close_nbx) ep_close_nbx;
  decltype(&::ucp_ep_flush_nbx) ep_flush_nbx;
  decltype(&::ucp_ep_query) ep_query;
  // UCX 1.13 (Debian 12) has no transports field in ucp_ep_query: which transports and
  // devices an endpoint uses is read from print_info's lanes (see ucp_lanes.h).
  decltype(&::ucp_ep_print_info) ep_print_info;
  decltype(&::ucp_worker_print_info) worker_print_info;
  decltype(&::ucp_mem_map) mem_map;
  decltype(&::ucp_mem_unmap) mem_unmap;
  decltype(&::ucp_mem_query) mem_query;
  decltype(&::ucp_rkey_pack) rkey_pack;
  decltype(&::ucp_rkey_buffer_release) rkey_buffer_release;
  decltype(&::ucp_ep_rkey_unpack) ep_rkey_unpack;
  decltype(&::ucp_rkey_destroy) rkey_destroy;
  decltype(&::ucp_put_nbx) put_nbx;
  decltype(&::ucp_get_nbx) get_nbx;
  decltype(&::ucp_atomic_op_nbx) atomic_op_nbx;
  decltype(&::ucp_am_send_nbx) am_send_nbx;
  decltype(&::ucp_am_data_release) am_data_release;
  decltype(&::ucp_request_check_status) request_check_status;
  decltype(&::ucp_request_free) request_free;
  decltype(&::ucp_request_cancel) request_cancel;
  const char* (*status_string)(ucs_status_t);  // from libucs
  std::string version;                         // "1.13.1"
  std::string path;                            // the file actually loaded
};

// Throws mori::Error (kTransport) "<what>: <ucs_status_string>" when status is an error.
// UCS_OK and UCS_INPROGRESS pass.
void check(const Ucp& u, ucs_status_t status, const char* what);
#else
struct Ucp;
#endif

// Loads once per process (thread-safe): MORI_UCX_LIBRARY when set, else libucp.so.0,
// then libucp.so. nullptr when unavailable; `why` then says why ("built without UCX
// headers", "libucp.so.0: cannot open shared object file ...", a missing symbol).
const Ucp* load(std::string* why = nullptr);

// What load() found, for `mori info` and tests: available, version, path, why.
struct LibraryInfo {
  bool available = false;
  std::string version, path, why;
};
LibraryInfo library_info();

}  // namespace mori::ucx
