// SPDX-License-Identifier: MIT
#include "mori/transports/ucx/ucp_library.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/status.h"

namespace mori::ucx {

#if MORI_HAVE_UCX_HEADERS
namespace {

struct Loaded {
  Ucp ucp{};
  bool ok = false;
  std::string why;
};

// Resolves `name` from `lib` into `slot`; on failure records the first missing symbol.
template <typename F>
bool resolve(void* lib, const char* name, F& slot, std::string& why) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  if (!slot && why.empty()) why = std::string("symbol ") + name + " missing";
  return slot != nullptr;
}

void load_into(Loaded& l) {
  std::string chosen = env::current().ucx_library;
  std::vector<std::string> names;
  if (!chosen.empty())
    names.push_back(chosen);
  else
    names = {"libucp.so.0", "libucp.so"};
  void* lib = nullptr;
  std::string tried;
  for (auto& n : names) {
    // RTLD_LOCAL: UCX's symbols stay out of the global scope (a second UCX, e.g. Open
    // MPI's, may be loaded by the application).
    lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* err = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(err ? err : n.c_str());
  }
  if (!lib) {
    l.why = chosen.empty() ? tried : "MORI_UCX_LIBRARY=" + chosen + ": " + tried;
    return;
  }
  Ucp& u = l.ucp;
  std::string miss;
#define MORI_UCP_SYM(field) resolve(lib, "ucp_" #field, u.field, miss)
  MORI_UCP_SYM(config_read);
  MORI_UCP_SYM(config_release);
  MORI_UCP_SYM(config_modify);
  MORI_UCP_SYM(init_version);
  MORI_UCP_SYM(cleanup);
  MORI_UCP_SYM(context_query);
  MORI_UCP_SYM(context_print_info);
  MORI_UCP_SYM(get_version_string);
  MORI_UCP_SYM(worker_create);
  MORI_UCP_SYM(worker_destroy);
  MORI_UCP_SYM(worker_get_address);
  MORI_UCP_SYM(worker_release_address);
  MORI_UCP_SYM(worker_progress);
  MORI_UCP_SYM(worker_arm);
  MORI_UCP_SYM(worker_get_efd);
  MORI_UCP_SYM(worker_signal);
  MORI_UCP_SYM(worker_fence);
  MORI_UCP_SYM(worker_flush_nbx);
  MORI_UCP_SYM(worker_set_am_recv_handler);
  MORI_UCP_SYM(ep_create);
  MORI_UCP_SYM(ep_close_nbx);
  MORI_UCP_SYM(ep_flush_nbx);
  MORI_UCP_SYM(ep_query);
  MORI_UCP_SYM(ep_print_info);
  MORI_UCP_SYM(worker_print_info);
  MORI_UCP_SYM(mem_map);
  MORI_UCP_SYM(mem_unmap);
  MORI_UCP_SYM(mem_query);
  MORI_UCP_SYM(rkey_pack);
  MORI_UCP_SYM(rkey_buffer_release);
  MORI_UCP_SYM(ep_rkey_unpack);
  MORI_UCP_SYM(rkey_destroy);
  MORI_UCP_SYM(put_nbx);
  MORI_UCP_SYM(get_nbx);
  MORI_UCP_SYM(atomic_op_nbx);
  MORI_UCP_SYM(am_send_nbx);
  MORI_UCP_SYM(am_data_release);
  MORI_UCP_SYM(request_check_status);
  MORI_UCP_SYM(request_free);
  MORI_UCP_SYM(request_cancel);
#undef MORI_UCP_SYM
  // ucs_status_string lives in libucs, a dependency of libucp: dlsym on libucp's handle
  // searches its dependencies; the soname is the fallback for unusual builds.
  u.status_string = reinterpret_cast<const char* (*)(ucs_status_t)>(dlsym(lib, "ucs_status_string"));
  if (!u.status_string) {
    if (void* ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_LOCAL))
      u.status_string = reinterpret_cast<const char* (*)(ucs_status_t)>(dlsym(ucs, "ucs_status_string"));
    if (!u.status_string && miss.empty()) miss = "symbol ucs_status_string missing (libucs)";
  }
  Dl_info info{};
  void* any =
      u.get_version_string ? reinterpret_cast<void*>(u.get_version_string) : reinterpret_cast<void*>(u.init_version);
  if (any && dladdr(any, &info) && info.dli_fname)
    u.path = info.dli_fname;
  else
    u.path = names.front();
  if (!miss.empty()) {
    // Too old a UCX (the *_nbx API is UCX >= 1.10): unusable, say which symbol.
    l.why = u.path + ": " + miss;
    dlclose(lib);
    return;
  }
  u.version = u.get_version_string();
  l.ok = true;
  MORI_LOG(kInfo, "UCX", "loaded UCX %s from %s", u.version.c_str(), u.path.c_str());
}

Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] { load_into(l); });
  return l;
}

}  // namespace

const Ucp* load(std::string* why) {
  Loaded& l = loaded();
  if (!l.ok) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.ucp;
}

void check(const Ucp& u, ucs_status_t status, const char* what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return;
  raise(Status::kTransport, "%s: %s", what, u.status_string(status));
}

LibraryInfo library_info() {
  LibraryInfo r;
  const Ucp* u = load(&r.why);
  if (u) {
    r.available = true;
    r.version = u->version;
    r.path = u->path;
  }
  return r;
}

#else  // built without UCX headers

const Ucp* load(std::string* why) {
  if (why) *why = "built without UCX headers (ucp/api/ucp.h was not found when MORI was built)";
  return nullptr;
}

LibraryInfo library_info() {
  LibraryInfo r;
  load(&r.why);
  return r;
}

#endif

}  // namespace mori::ucx
