// SPDX-License-Identifier: MIT
// mori._C.ep: the EP handle with tensors as (address, shape) integers; mori.ep builds the
// torch views on top.
#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mori/core/env.h"
#include "mori/ep/blockwise.h"
#include "mori/ep/config.h"
#include "mori/ep/dtype.h"
#include "mori/ep/handle.h"
#ifdef MORI_EP_CUDA
#include "mori/ep/cuda/intranode.h"
#endif
#include <memory>
#include <type_traits>
#include <vector>

#include "mori/core/status.h"

namespace py = pybind11;
using namespace mori::ep;

namespace {

template <typename T>
T* ptr_of(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

// A config field from the dict EpDispatchCombineConfig.native() builds; enums come as ints.
template <typename T>
void read_field(const py::dict& d, const char* key, T& field) {
  if (!d.contains(key)) return;
  if constexpr (std::is_enum_v<T>)
    field = static_cast<T>(d[key].cast<int>());
  else
    field = d[key].cast<T>();
}

EpConfig make_config(const py::dict& d) {
  EpConfig c;
#define MORI_EP_CONFIG_READ(type, field, def) read_field(d, #field, c.field);
  MORI_EP_CONFIG_FIELDS(MORI_EP_CONFIG_READ)
#undef MORI_EP_CONFIG_READ
  read_field(d, "num_threads", c.num_threads);
  return c;
}

// [(field, kind, default)] in MORI's order; kind is "int", "bool" or the enum's Python name.
py::list config_fields() {
  py::list out;
  auto kind = [](auto v) -> const char* {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, bool>)
      return "bool";
    else if constexpr (std::is_same_v<T, KernelType>)
      return "EpDispatchCombineKernelType";
    else if constexpr (std::is_same_v<T, QuantType>)
      return "EpDispatchCombineQuantType";
    else
      return "int";
  };
  EpConfig defaults;
#define MORI_EP_CONFIG_ROW(type, field, def) \
  out.append(py::make_tuple(#field, kind(defaults.field), static_cast<int>(defaults.field)));
  MORI_EP_CONFIG_FIELDS(MORI_EP_CONFIG_ROW)
#undef MORI_EP_CONFIG_ROW
  return out;
}

}  // namespace

void bind_ep(py::module_& m) {
  // MORI's names for the config's enums (mori.ops re-exports these classes).
  py::native_enum<KernelType>(m, "EpDispatchCombineKernelType", "enum.IntEnum",
                              "Which dispatch/combine protocol an op runs (values are MORI's).")
      .value("IntraNode", KernelType::kIntraNode)
      .value("InterNode", KernelType::kInterNode)
      .value("InterNodeV1", KernelType::kInterNodeV1)
      .value("InterNodeV1LL", KernelType::kInterNodeV1LL)
      .value("AsyncLL", KernelType::kAsyncLL)
      .value("IntraNodeLL", KernelType::kIntraNodeLL)
      .finalize();
  py::native_enum<QuantType>(m, "EpDispatchCombineQuantType", "enum.IntEnum",
                             "How combine carries expert outputs on the wire (MORI's quant_type).")
      .value("None_", QuantType::kNone)
      .value("Fp8DirectCast", QuantType::kFp8DirectCast)
      .value("Fp8BlockwiseQuant", QuantType::kFp8Blockwise)
      .value("Fp4BlockwiseQuant", QuantType::kFp4Blockwise)
      .finalize();
  m.def("config_fields", &config_fields,
        "EpDispatchCombineConfig's fields after data_type as (name, kind, C++ default), in order.");
  py::class_<EpHandle>(m, "EpHandle")
      .def(py::init([](const py::dict& cfg) {
             EpConfig c = make_config(cfg);
             py::gil_scoped_release nogil;  // construction is collective: peers may take a while
             return new EpHandle(c);
           }),
           py::arg("config"))
      .def_property_readonly("threads", &EpHandle::threads)
      .def_property_readonly("max_recv", [](const EpHandle& h) { return h.config().max_recv(); })
      .def(
          "dispatch",
          [](EpHandle& h, uintptr_t input, int dtype, int num_tokens, int hidden, uintptr_t weights, uintptr_t scales,
             uintptr_t indices, int block_num, int warp_per_block, int rdma_block_num, uintptr_t replay_dest_map,
             uintptr_t replay_forward) {
            DispatchArgs a;
            a.replay_dest_map = ptr_of<const int64_t>(replay_dest_map);
            a.replay_forward = ptr_of<const int32_t>(replay_forward);
            a.input = ptr_of<const void>(input);
            a.dtype = mori::check_dtype(dtype, "dispatch");
            a.num_tokens = num_tokens;
            a.hidden = hidden;
            a.weights = ptr_of<const float>(weights);
            a.scales = ptr_of<const void>(scales);
            a.indices = ptr_of<const int32_t>(indices);
            a.launch = {block_num, warp_per_block, rdma_block_num};
            DispatchResult r;
            {
              py::gil_scoped_release nogil;
              r = h.dispatch(a);
            }
            return py::make_tuple(reinterpret_cast<uintptr_t>(r.tokens), reinterpret_cast<uintptr_t>(r.weights),
                                  reinterpret_cast<uintptr_t>(r.scales), reinterpret_cast<uintptr_t>(r.indices),
                                  reinterpret_cast<uintptr_t>(r.total_recv));
          },
          py::arg("input"), py::arg("dtype"), py::arg("num_tokens"), py::arg("hidden"), py::arg("weights"),
          py::arg("scales"), py::arg("indices"), py::arg("block_num") = -1, py::arg("warp_per_block") = -1,
          py::arg("rdma_block_num") = -1, py::arg("replay_dest_map") = 0, py::arg("replay_forward") = 0)
      .def("dispatch_recv", &EpHandle::dispatch_recv, py::call_guard<py::gil_scoped_release>())
      .def(
          "combine",
          [](EpHandle& h, uintptr_t input, int dtype, int num_rows, int hidden, uintptr_t weights, uintptr_t indices,
             int num_tokens, int use_external_inp_buf, int block_num, int warp_per_block, int rdma_block_num,
             bool routing, uintptr_t routing_dest_map, int routing_tokens, uintptr_t routing_indices, int routing_total,
             uintptr_t routing_src, uintptr_t routing_node_sent, uintptr_t routing_inbox_count,
             uintptr_t routing_inbox_meta) {
            CombineArgs a;
            RoutingView view{ptr_of<const int64_t>(routing_dest_map),    routing_tokens,
                             ptr_of<const int32_t>(routing_indices),     routing_total,
                             ptr_of<const int32_t>(routing_src),         ptr_of<const uint8_t>(routing_node_sent),
                             ptr_of<const int32_t>(routing_inbox_count), ptr_of<const int32_t>(routing_inbox_meta)};
            if (routing) a.routing = &view;
            a.input = ptr_of<const void>(input);
            a.dtype = mori::check_dtype(dtype, "combine");
            a.num_rows = num_rows;
            a.hidden = hidden;
            a.weights = ptr_of<const float>(weights);
            a.indices = ptr_of<const int32_t>(indices);
            a.num_tokens = num_tokens;
            a.use_external_inp_buf = use_external_inp_buf;
            a.launch = {block_num, warp_per_block, rdma_block_num};
            CombineResult r;
            {
              py::gil_scoped_release nogil;
              r = h.combine(a);
            }
            return py::make_tuple(reinterpret_cast<uintptr_t>(r.tokens), reinterpret_cast<uintptr_t>(r.weights));
          },
          py::arg("input"), py::arg("dtype"), py::arg("num_rows"), py::arg("hidden"), py::arg("weights"),
          py::arg("indices"), py::arg("num_tokens"), py::arg("use_external_inp_buf") = -1, py::arg("block_num") = -1,
          py::arg("warp_per_block") = -1, py::arg("rdma_block_num") = -1, py::arg("routing") = false,
          py::arg("routing_dest_map") = 0, py::arg("routing_tokens") = 0, py::arg("routing_indices") = 0,
          py::arg("routing_total") = 0, py::arg("routing_src") = 0, py::arg("routing_node_sent") = 0,
          py::arg("routing_inbox_count") = 0, py::arg("routing_inbox_meta") = 0)
      .def("combine_recv", &EpHandle::combine_recv, py::call_guard<py::gil_scoped_release>())
      .def("total_recv", &EpHandle::total_recv)
      .def("cur_rank_num_token", &EpHandle::cur_rank_num_token)
      .def("src_token_pos", [](const EpHandle& h) { return reinterpret_cast<uintptr_t>(h.src_token_pos()); })
      .def("dest_map", [](const EpHandle& h) { return reinterpret_cast<uintptr_t>(h.dest_map()); })
      .def("node_sent", [](const EpHandle& h) { return reinterpret_cast<uintptr_t>(h.node_sent()); })
      .def("inbox_count", [](const EpHandle& h) { return reinterpret_cast<uintptr_t>(h.inbox_count()); })
      .def("inbox_meta", [](const EpHandle& h) { return reinterpret_cast<uintptr_t>(h.inbox_meta()); })
      .def("forward_slots", [](const EpHandle& h) { return reinterpret_cast<uintptr_t>(h.forward_slots()); })
      .def("registered_combine_input",
           [](const EpHandle& h) {
             return py::make_tuple(reinterpret_cast<uintptr_t>(h.registered_combine_input()),
                                   h.registered_combine_input_bytes());
           })
      .def("last_dispatch_remote_bytes", &EpHandle::last_dispatch_remote_bytes)
      .def("last_combine_remote_bytes", &EpHandle::last_combine_remote_bytes)
      .def("last_combine_in_place_peers", &EpHandle::last_combine_in_place_peers)
      .def("published_layout", [](const EpHandle& h) {
        const EpHandle::PublishedLayout p = h.published_layout();
        py::dict fields;
        for (const auto& [name, off] : p.fields) fields[name] = off;
        py::dict d;
        d["base"] = reinterpret_cast<uintptr_t>(p.base);
        d["bytes"] = p.bytes;
        d["pull_source"] = p.pull_source;
        d["pull_source_bytes"] = p.pull_source_bytes;
        d["combine_signals"] = p.combine_signals;
        d["fields"] = fields;
        return d;
      });

#ifdef MORI_EP_CUDA
  namespace cu = mori::ep::cuda;
  m.attr("cuda_built") = true;
  // The kernels of one PE over per-PE addresses the caller got from the GPU symmetric heap
  // (own buffers + shmem ptr() of every peer's): what EpDispatchCombineOp uses on CUDA tensors.
  struct PeKernels {
    cu::Shape s{};
    cu::Peers p{};
    cu::Local l{};
    bool pipelined = false;  // MORI_EP_COMBINE_STAGING=pipelined
  };
  py::class_<PeKernels>(m, "PeKernels")
      .def(py::init([](int rank, int world, int topk, int experts_per_rank, int max_inp, int64_t max_recv,
                       int64_t max_send, int scale_bytes, const py::dict& peers, const py::dict& local) {
             MORI_CHECK_ARG(world >= 1 && world <= cu::kMaxPes, "CUDA IntraNode kernels support 1..%d PEs, got %d",
                            cu::kMaxPes, world);
             auto k = std::make_unique<PeKernels>();
             k->s = cu::Shape{rank, world, topk, experts_per_rank, max_inp, max_recv, max_send, scale_bytes};
             auto list = [&](const char* name) {
               auto v = peers[name].cast<std::vector<uintptr_t>>();
               MORI_CHECK_ARG(static_cast<int>(v.size()) == world, "PeKernels: peers[%s] needs %d addresses", name,
                              world);
               return v;
             };
             for (int r = 0; r < world; ++r) {
               k->p.disp_tok[r] = ptr_of<uint8_t>(list("disp_tok")[r]);
               k->p.disp_w[r] = ptr_of<float>(list("disp_w")[r]);
               k->p.disp_idx[r] = ptr_of<int32_t>(list("disp_idx")[r]);
               k->p.disp_scale[r] = ptr_of<uint8_t>(list("disp_scale")[r]);
               k->p.disp_src[r] = ptr_of<int32_t>(list("disp_src")[r]);
               k->p.counter[r] = ptr_of<unsigned long long>(list("counter")[r]);
               k->p.disp_sig[r] = ptr_of<unsigned long long>(list("disp_sig")[r]);
               k->p.comb_stage[r] = ptr_of<uint8_t>(list("comb_stage")[r]);
               k->p.comb_stage_w[r] = ptr_of<float>(list("comb_stage_w")[r]);
               k->p.comb_flag[r] = ptr_of<unsigned int>(list("comb_flag")[r]);
               k->p.comb_done[r] = ptr_of<unsigned long long>(list("comb_done")[r]);
               k->p.comb_in[r] = ptr_of<uint8_t>(list("reg_in")[r]);
               k->p.comb_ready[r] = ptr_of<unsigned long long>(list("comb_ready")[r]);
               k->p.disp_inv[r] = ptr_of<unsigned long long>(list("disp_inv")[r]);
             }
             const std::string& staging = mori::env::get().ep_combine_staging;
             MORI_CHECK_ARG(staging == "bulk" || staging == "pipelined",
                            "MORI_EP_COMBINE_STAGING=%s: must be 'bulk' or 'pipelined'", staging.c_str());
             k->pipelined = staging == "pipelined";
             k->l.dest_map = ptr_of<int64_t>(local["dest_map"].cast<uintptr_t>());
             k->l.total_recv = ptr_of<int32_t>(local["total_recv"].cast<uintptr_t>());
             k->l.state = ptr_of<unsigned long long>(local["state"].cast<uintptr_t>());
             k->l.comb_out = ptr_of<uint8_t>(local["comb_out"].cast<uintptr_t>());
             k->l.comb_out_w = ptr_of<float>(local["comb_out_w"].cast<uintptr_t>());
             return k;
           }),
           py::arg("rank"), py::arg("world"), py::arg("topk"), py::arg("experts_per_rank"), py::arg("max_inp"),
           py::arg("max_recv"), py::arg("max_send"), py::arg("scale_bytes"), py::arg("peers"), py::arg("local"))
      .def_static("state_words", [](int world) { return cu::state_words(world); })
      .def_readwrite("pipelined_staging", &PeKernels::pipelined,
                     "combine from an external input flags each staged row (MORI_EP_COMBINE_STAGING)")
      .def(
          "dispatch_send",
          [](PeKernels& k, uintptr_t input, int row_bytes, uintptr_t weights, uintptr_t scales, uintptr_t indices,
             int n, int blocks, int warps, bool with_recv, uintptr_t stream, uintptr_t replay_dest_map) {
            MORI_CHECK_ARG(n >= 0 && n <= k.s.max_inp, "dispatch: %d tokens, max_num_inp_token_per_rank %d", n,
                           k.s.max_inp);
            cu::dispatch_send(k.s, k.p, k.l, ptr_of<const void>(input), row_bytes, ptr_of<const float>(weights),
                              ptr_of<const void>(scales), ptr_of<const int32_t>(indices), n, blocks, warps, with_recv,
                              ptr_of<void>(stream), ptr_of<const int64_t>(replay_dest_map));
          },
          py::arg("input"), py::arg("row_bytes"), py::arg("weights"), py::arg("scales"), py::arg("indices"),
          py::arg("n"), py::arg("blocks"), py::arg("warps"), py::arg("with_recv"), py::arg("stream"),
          py::arg("replay_dest_map") = 0)
      .def("dispatch_recv",
           [](PeKernels& k, uintptr_t stream) { cu::dispatch_recv(k.s, k.p, k.l, ptr_of<void>(stream)); })
      .def(
          "combine",
          [](PeKernels& k, uintptr_t input, uintptr_t weights, bool with_weights, int dtype, int hidden, bool fp8,
             int num_tokens, int phase, bool zero_copy, int blocks, int warps, uintptr_t stream, int block, bool fp4) {
            MORI_CHECK_ARG(phase >= 0 && phase <= 2, "combine phase %d (0 fused, 1 send, 2 receive)", phase);
            cu::CombineArgs a;
            a.input = ptr_of<const void>(input);
            a.weights = ptr_of<const float>(weights);
            a.with_weights = with_weights;
            a.dtype = dtype;
            a.hidden = hidden;
            a.fp8 = fp8;
            a.num_tokens = num_tokens;
            a.zero_copy = zero_copy;
            a.pipelined = k.pipelined;
            a.block = block;
            a.fp4 = fp4;
            cu::combine(k.s, k.p, k.l, a, static_cast<cu::CombinePhase>(phase), blocks, warps, ptr_of<void>(stream));
          },
          py::arg("input"), py::arg("weights"), py::arg("with_weights"), py::arg("dtype"), py::arg("hidden"),
          py::arg("fp8"), py::arg("num_tokens"), py::arg("phase"), py::arg("zero_copy"), py::arg("blocks"),
          py::arg("warps"), py::arg("stream"), py::arg("block") = 0, py::arg("fp4") = false);
#else
  m.attr("cuda_built") = false;
#endif

  m.def(
      "validate_config", [](const py::dict& cfg) { make_config(cfg).validate(); }, py::arg("config"),
      "Raises InvalidArgument naming the first bad field (or product of fields) of an EP config.");
  m.def("dtype_size", [](int t) { return mori::dtype_size(mori::check_dtype(t, "dtype_size")); });
  // Element-wise fp32 -> dtype encode of n values (tests compare it with torch's casts).
  m.def(
      "encode_fp32",
      [](uintptr_t src, uintptr_t dst, int dtype, int n) {
        mori::store_row(ptr_of<void>(dst), ptr_of<const float>(src), mori::check_dtype(dtype, "encode_fp32"), n);
      },
      py::arg("src"), py::arg("dst"), py::arg("dtype"), py::arg("n"));
  // Combine's fused bf16 sum of m rows of n values (tests compare it with a torch fp32 sum).
  m.def(
      "sum_rows_bf16",
      [](uintptr_t rows, int m, uintptr_t dst, int n) {
        std::vector<const uint16_t*> p(static_cast<size_t>(m));
        for (int r = 0; r < m; ++r) p[r] = ptr_of<const uint16_t>(rows) + static_cast<size_t>(r) * n;
        mori::sum_rows_bf16(ptr_of<uint16_t>(dst), p.data(), m, n);
      },
      py::arg("rows"), py::arg("m"), py::arg("dst"), py::arg("n"));
  m.def("blockwise_scale_dim", &blockwise_scale_dim,
        "MORI_FP8_COMBINE_SCALE_DIM: blockwise combine scales per row (InvalidArgument unless > 0).");
  m.def("launch_config_mode", [] { return mori::env::get().ep_launch_config_mode; });
  m.def("tuning_config_path", [] { return mori::env::get().ep_tuning_config; });
}
