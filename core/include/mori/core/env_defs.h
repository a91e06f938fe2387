// SPDX-License-Identifier: MIT
// Every environment variable MORI reads, one row each:
//   X(field, NAME, type, default, category, alias, description)
// type is one of: size (bytes, K/M/G/KiB/MiB/GiB suffixes), seconds, number, bool, int, string.
// category is the layer (or tool) the variable configures, as `mori info --env` groups them.
// alias is another program's name for the same setting, read when NAME is unset or empty
// (e.g. OpenSHMEM's SHMEM_SYMMETRIC_SIZE); "" for none.
// Nothing else in the tree calls getenv() for MORI_* or UMBP_* settings (tests/test_env_table.py
// checks it); Python reads them through mori.core.env.setting(). UMBP_* keep MORI-UMBP's names.
// Rows of category `tools` are read by MORI's shell tools (oshrun, oshcc); they are listed here
// so that every MORI_* name is documented once.
#pragma once

#define MORI_ENV_TABLE(X)                                                                                              \
  X(heap_size, "MORI_SHMEM_HEAP_SIZE", size, "1GiB", shmem, "SHMEM_SYMMETRIC_SIZE",                                    \
    "bytes of the host symmetric heap of each PE")                                                                     \
  X(gpu_heap_size, "MORI_SHMEM_GPU_HEAP_SIZE", size, "4GiB", shmem, "",                                                \
    "bytes of the GPU symmetric heap of each PE bound to a GPU")                                                       \
  X(bootstrap_timeout, "MORI_BOOTSTRAP_TIMEOUT", seconds, "120", bootstrap, "",                                        \
    "seconds any bootstrap or peer wait may last before it fails naming the missing PE")                               \
  X(disable_p2p, "MORI_DISABLE_P2P", bool, "0", transports, "",                                                        \
    "never map peers' memory directly; route every peer through a remote transport")                                   \
  X(node_id, "MORI_NODE_ID", string, "", core, "",                                                                     \
    "override the node identity (default: kernel boot id, then hostname)")                                             \
  X(socket_ifname, "MORI_SOCKET_IFNAME", string, "", transports, "",                                                   \
    "network interface whose address is published for TCP (default: first non-loopback)")                              \
  X(device, "MORI_DEVICE", int, "-1", core, "", "CUDA device of this PE (-1: torch's current device / none)")          \
  X(spin_iterations, "MORI_SPIN_ITERATIONS", int, "20000", shmem, "", "polls of a wait before it sleeps on a futex")   \
  X(shared_tensors, "MORI_SHARED_TENSORS", bool, "0", shmem, "",                                                       \
    "CPU PEs: large torch CPU tensors come from a shared arena that PEs of this host read in place")                   \
  X(shared_tensor_bytes, "MORI_SHARED_TENSOR_BYTES", size, "32GiB", shmem, "",                                         \
    "address space of each PE's shared tensor arena (memory is committed only where tensors live)")                    \
  X(copy_threads, "MORI_COPY_THREADS", int, "0", core, "", "threads used for large host copies (0: automatic)")        \
  X(log_level, "MORI_LOG_LEVEL", string, "WARN", core, "", "ERROR, WARN, INFO, DEBUG or TRACE")                        \
  X(ep_launch_config_mode, "MORI_EP_LAUNCH_CONFIG_MODE", string, "MANUAL", ep, "",                                     \
    "EP launch parameters: MANUAL (config/call arguments) or AUTO (JSON tuning rules)")                                \
  X(ep_combine_staging, "MORI_EP_COMBINE_STAGING", string, "bulk", ep, "",                                             \
    "CUDA combine from an external input: bulk (stage every row, then pull) or pipelined (pull each row once staged)") \
  X(store_addr, "MORI_STORE_ADDR", string, "", bootstrap, "",                                                          \
    "host:port of the job's bootstrap store (set by mori run)")                                                        \
  X(rank, "MORI_RANK", int, "-1", bootstrap, "", "this process's rank (set by mori run)")                              \
  X(world_size, "MORI_WORLD_SIZE", int, "0", bootstrap, "", "number of ranks of the job (set by mori run)")            \
  X(job_secret, "MORI_JOB_SECRET", string, "", bootstrap, "",                                                          \
    "hex job secret each rank proves (never sends) to the store")                                                      \
  X(master_port, "MORI_MASTER_PORT", int, "0", bootstrap, "",                                                          \
    "store port for MASTER_ADDR/RANK/WORLD_SIZE launches (0: MASTER_PORT + 1)")                                        \
  X(shmem_symmetric_data, "MORI_SHMEM_SYMMETRIC_DATA", bool, "1", shmem, "",                                           \
    "C API: make the program's global and static variables symmetric at shmem_init")                                   \
  X(mpi_library, "MORI_MPI_LIBRARY", string, "", shmem, "",                                                            \
    "C API under mpirun: the libmpi to load for the bootstrap (default: libmpi.so.40 / libmpich.so.12)")               \
  X(ccl_chunk_size, "MORI_CCL_CHUNK_SIZE", size, "16MiB", collectives, "",                                             \
    "largest staging buffer of a host collective; larger staged calls run in chunks")                                  \
  X(ccl_gpu_staging_size, "MORI_CCL_GPU_STAGING_SIZE", size, "256MiB", collectives, "",                                \
    "GPU collectives: receive staging in the GPU symmetric heap (split over the peers)")                               \
  X(deepspeed, "MORI_DEEPSPEED", bool, "0", apps, "",                                                                  \
    "install the DeepSpeed hook on import of mori.apps.deepspeed (ZeRO-3 all-gathers via MORI)")                       \
  X(deepspeed_max_numel, "MORI_DEEPSPEED_MAX_NUMEL", int, "67108864", apps, "",                                        \
    "largest all-gather input (elements per rank) the DeepSpeed hook routes through MORI")                             \
  X(ep_tuning_config, "MORI_EP_TUNING_CONFIG", string, "", ep, "",                                                     \
    "EP AUTO mode: explicit tuning-rule JSON file (default: search ep/tuning_configs)")                                \
  X(io_timeout_ms, "MORI_IO_TIMEOUT_MS", int, "10000", io, "",                                                         \
    "MORI-IO: a peer silent this long with transfers pending fails them (dead, stopped or cut off)")                   \
  X(io_cp_timeout_ms, "MORI_IO_CP_TIMEOUT_MS", int, "5000", io, "",                                                    \
    "MORI-IO: connecting to a peer engine and proving its secret may take this long")                                  \
  X(io_tcp_lanes, "MORI_IO_TCP_LANES", string, "auto", io, "",                                                         \
    "MORI-IO tcp backend: connections per peer (auto: 4 where the process may run on 8 or more CPUs, else 2; "         \
    "RdmaBackendConfig.qp_per_transfer > 1 overrides)")                                                                \
  X(io_tcp_chunk, "MORI_IO_TCP_CHUNK", size, "512KiB", io, "",                                                         \
    "MORI-IO tcp backend: larger transfers are striped over the lanes, in equal pieces of at most this size")          \
  X(io_tcp_stripe_from, "MORI_IO_TCP_STRIPE_FROM", string, "auto", io, "",                                             \
    "MORI-IO tcp backend: transfers larger than this or than MORI_IO_TCP_CHUNK are striped, in equal pieces of at "    \
    "most the chunk, over as many lanes as give each at least this much, two at least (0: the chunk alone decides; "   \
    "auto: 192 KiB where the process may run on 8 or more CPUs, else 0)")                                              \
  X(io_tcp_send_halves, "MORI_IO_TCP_SEND_HALVES", size, "128KiB", io, "",                                             \
    "MORI-IO tcp backend: a message (headers and payloads) of more than 64 KiB and at most this size is sent as two "  \
    "halves, so the receiver takes the first while the second is copied in (0: never)")                                \
  X(io_inline_bytes, "MORI_IO_INLINE_BYTES", size, "64KiB", io, "",                                                    \
    "MORI-IO: posts up to this size are sent from the caller's thread when the connection is not sending (larger "     \
    "ones up to its 4 MiB socket buffer when nothing is in flight either)")                                            \
  X(io_tcp_poll_us, "MORI_IO_TCP_POLL_US", string, "auto", io, "",                                                     \
    "MORI-IO tcp backend: microseconds a target's connection thread, a caller waiting for a reply and, for a "         \
    "striped transfer of one piece per lane, its lanes' receiving threads busy-poll before sleeping (0: never; auto: " \
    "50 where the process may run on 8 or more CPUs, else 0)")                                                         \
  X(io_direct, "MORI_IO_DIRECT", bool, "1", io, "",                                                                    \
    "MORI-IO: CPU memory of engines on one host moves by process_vm_readv/writev, not sockets")                        \
  X(io_direct_threads, "MORI_IO_DIRECT_THREADS", int, "2", io, "", "MORI-IO: threads that run large same-host copies") \
  X(io_qp_per_transfer, "MORI_IO_QP_PER_TRANSFER", int, "0", io, "",                                                   \
    "MORI-IO (MORI's name): overrides RdmaBackendConfig.qp_per_transfer, here the tcp lanes per peer (0: the config)") \
  X(io_enable_notification, "MORI_IO_ENABLE_NOTIFICATION", string, "", io, "",                                         \
    "MORI-IO (MORI's name): 1/0 overrides RdmaBackendConfig.enable_notification (empty: the config)")                  \
  X(io_rdma_transport, "MORI_IO_RDMA_TRANSPORT", string, "auto", io, "",                                               \
    "MORI-IO: what BackendType.RDMA runs on: auto (UCX when it reports an RDMA transport, else tcp), tcp, or ucx "     \
    "(forced, e.g. over UCX_TLS=tcp/sm)")                                                                              \
  X(ep_profile, "MORI_EP_PROFILE", bool, "0", ep, "",                                                                  \
    "EP ops record a span per dispatch/combine call (op.get_debug_time_buf, mori.kernel_profiler)")                    \
  X(shmem_wait_timeout, "MORI_SHMEM_WAIT_TIMEOUT", seconds, "inf", shmem, "",                                          \
    "seconds a shmem wait (wait_until, barrier, collective) may last before it fails saying what it waited for on "    \
    "which PE (inf: no limit)")                                                                                        \
  X(ucx_library, "MORI_UCX_LIBRARY", string, "", transports, "",                                                       \
    "UCX: the libucp to load at run time (default: libucp.so.0, then libucp.so)")                                      \
  X(net_transport, "MORI_NET_TRANSPORT", string, "auto", transports, "",                                               \
    "transport between hosts: auto (ucx when UCX has an RDMA transport, else tcp), tcp, ucx, or ucx-all (ucx for "     \
    "every pair, same host too: testing)")                                                                             \
  X(fp8_combine_scale_dim, "MORI_FP8_COMBINE_SCALE_DIM", int, "56", ep, "",                                            \
    "EP fp8_blockwise / fp4_blockwise combine (MORI's name): scales per row, blocks of ceil(hidden / it) values; "     \
    "read when an op is built")                                                                                        \
  X(umbp_dram_capacity, "UMBP_DRAM_CAPACITY", size, "4GiB", umbp, "",                                                  \
    "MORI-UMBP: bytes of the DRAM tier of a client (or of the per-host server)")                                       \
  X(umbp_dram_high_wm, "UMBP_DRAM_HIGH_WM", number, "0.9", umbp, "",                                                   \
    "MORI-UMBP: DRAM use (fraction of capacity) above which a put evicts")                                             \
  X(umbp_dram_low_wm, "UMBP_DRAM_LOW_WM", number, "0.7", umbp, "",                                                     \
    "MORI-UMBP: DRAM use an eviction brings the tier down to")                                                         \
  X(umbp_dram_use_hugepages, "UMBP_DRAM_USE_HUGEPAGES", bool, "0", umbp, "",                                           \
    "MORI-UMBP: back the DRAM tier with huge pages (falls back to 4 KiB pages, and says so)")                          \
  X(umbp_dram_hugepage_size, "UMBP_DRAM_HUGEPAGE_SIZE", size, "2MiB", umbp, "",                                        \
    "MORI-UMBP: huge page size of the DRAM tier")                                                                      \
  X(umbp_dram_numa_node, "UMBP_DRAM_NUMA_NODE", int, "-1", umbp, "",                                                   \
    "MORI-UMBP: NUMA node of the DRAM tier (-1: none)")                                                                \
  X(umbp_dram_prefault, "UMBP_DRAM_PREFAULT", bool, "1", umbp, "",                                                     \
    "MORI-UMBP: fault the DRAM tier's pages in at start")                                                              \
  X(umbp_ssd_enabled, "UMBP_SSD_ENABLED", bool, "1", umbp, "", "MORI-UMBP: mirror values to the SSD tier")             \
  X(umbp_ssd_dir, "UMBP_SSD_DIR", string, "/tmp/umbp_ssd", umbp, "",                                                   \
    "MORI-UMBP: directory of the SSD tier's segment files")                                                            \
  X(umbp_ssd_capacity, "UMBP_SSD_CAPACITY", size, "32GiB", umbp, "", "MORI-UMBP: bytes of the SSD tier")               \
  X(umbp_ssd_backend, "UMBP_SSD_BACKEND", string, "file", umbp, "",                                                    \
    "MORI-UMBP: SSD tier backend: file (segmented log; spdk and spdk_proxy are refused: not built)")                   \
  X(umbp_ssd_high_wm, "UMBP_SSD_HIGH_WM", number, "0.9", umbp, "",                                                     \
    "MORI-UMBP: SSD use above which old values are reclaimed")                                                         \
  X(umbp_ssd_low_wm, "UMBP_SSD_LOW_WM", number, "0.7", umbp, "",                                                       \
    "MORI-UMBP: SSD use a reclaim brings the tier down to")                                                            \
  X(umbp_eviction_policy, "UMBP_EVICTION_POLICY", string, "lru", umbp, "", "MORI-UMBP: DRAM eviction policy (lru)")    \
  X(umbp_role, "UMBP_ROLE", string, "", umbp, "",                                                                      \
    "MORI-UMBP: standalone, shared_ssd_leader or shared_ssd_follower (empty: standalone)")                             \
  X(umbp_verify_dram, "UMBP_VERIFY_DRAM_CHECKSUM", bool, "0", umbp, "",                                                \
    "MORI-UMBP (ours): also verify each value's checksum on DRAM hits (debug; SSD reads always verify)")               \
  X(umbp_call_timeout_ms, "UMBP_CALL_TIMEOUT_MS", int, "30000", umbp, "",                                              \
    "MORI-UMBP (ours): deadline of every call to the per-host server; a dead server is an error naming it")            \
  X(umbp_server_poll_us, "UMBP_SERVER_POLL_US", int, "0", umbp, "",                                                    \
    "MORI-UMBP (ours): microseconds a rank waiting for the per-host server's reply, and the server's connection "      \
    "thread waiting for a rank's next request, busy-poll the socket before sleeping (0: never)")                       \
  X(umbp_server_direct_reads, "UMBP_SERVER_DIRECT_READS", bool, "1", umbp, "",                                         \
    "MORI-UMBP (ours): ranks of the per-host server read values that are on its SSD only straight from the segment "   \
    "files (the server's shared SSD index says where), instead of asking the server (0: always ask)")                  \
  X(umbp_standalone_address, "UMBP_STANDALONE_ADDRESS", string, "", umbp, "",                                          \
    "MORI-UMBP: the per-host server's address (unix:///path.sock); set = standalone-process mode")                     \
  X(umbp_standalone_auto_start, "UMBP_STANDALONE_AUTO_START", bool, "0", umbp, "",                                     \
    "MORI-UMBP: a client starts the per-host server when none answers at the address")                                 \
  X(umbp_standalone_startup_timeout_ms, "UMBP_STANDALONE_STARTUP_TIMEOUT_MS", int, "30000", umbp, "",                  \
    "MORI-UMBP: how long a client waits for an auto-started server to answer")                                         \
  X(umbp_standalone_bin, "UMBP_STANDALONE_BIN", string, "", umbp, "",                                                  \
    "MORI-UMBP: the per-host server program auto_start runs (default: mori umbp-server)")                              \
  X(umbp_standalone_idle_exit_timeout_ms, "UMBP_STANDALONE_IDLE_EXIT_TIMEOUT_MS", int, "0", umbp, "",                  \
    "MORI-UMBP: an auto-started server exits after this long with no client (0: never)")                               \
  X(umbp_dram_read_lease_ms, "UMBP_DRAM_READ_LEASE_MS", int, "500", umbp, "",                                          \
    "MORI-UMBP: how long a peer keeps a DRAM value pinned for a remote reader that does not release it")               \
  X(umbp_ssd_read_lease_ms, "UMBP_SSD_READ_LEASE_MS", int, "3000", umbp, "",                                           \
    "MORI-UMBP: how long a peer keeps an SSD value staged for a remote reader that does not release it")               \
  X(umbp_place_feed_ms, "UMBP_PLACE_FEED_MS", int, "20", umbp, "",                                                     \
    "MORI-UMBP: how often a worker reads the master's place feed (where owners' DRAM values lie; 0: never)")           \
  X(umbp_place_feed_horizon_ms, "UMBP_PLACE_FEED_HORIZON_MS", int, "5000", umbp, "",                                   \
    "MORI-UMBP: how long a worker tries a place the feed gave before it routes the key again")                         \
  X(umbp_log_level, "UMBP_LOG_LEVEL", string, "", umbp, "",                                                            \
    "MORI-UMBP: 0 INFO, 1 WARN, 2 ERROR (empty: MORI_LOG_LEVEL)")                                                      \
  X(umbp_heartbeat_ttl_sec, "UMBP_HEARTBEAT_TTL_SEC", int, "10", umbp, "",                                             \
    "MORI-UMBP master: a client silent this long (x UMBP_MAX_MISSED_HEARTBEATS rule) is dropped with its keys")        \
  X(umbp_reaper_interval_sec, "UMBP_REAPER_INTERVAL_SEC", number, "5", umbp, "",                                       \
    "MORI-UMBP master: how often dead clients are looked for")                                                         \
  X(umbp_max_missed_heartbeats, "UMBP_MAX_MISSED_HEARTBEATS", int, "3", umbp, "",                                      \
    "MORI-UMBP master: heartbeat intervals a client may miss before it expires")                                       \
  X(umbp_eviction_check_interval_sec, "UMBP_EVICTION_CHECK_INTERVAL_SEC", number, "5", umbp, "",                       \
    "MORI-UMBP master: how often the eviction manager looks for tiers above the high watermark")                       \
  X(umbp_eviction_high_wm, "UMBP_EVICTION_HIGH_WM", number, "0.9", umbp, "",                                           \
    "MORI-UMBP master (ours): tier use above which the master evicts")                                                 \
  X(umbp_eviction_low_wm, "UMBP_EVICTION_LOW_WM", number, "0.7", umbp, "",                                             \
    "MORI-UMBP master (ours): tier use a master eviction brings a tier down to")                                       \
  X(umbp_eviction_strategy, "UMBP_EVICTION_STRATEGY", string, "lru", umbp, "",                                         \
    "MORI-UMBP master (ours): eviction strategy (lru)")                                                                \
  X(umbp_lease_duration_sec, "UMBP_LEASE_DURATION_SEC", number, "2", umbp, "",                                         \
    "MORI-UMBP master: a routed get protects its key from master eviction this long")                                  \
  X(umbp_heartbeat_interval_divisor, "UMBP_HEARTBEAT_INTERVAL_DIVISOR", int, "2", umbp, "",                            \
    "MORI-UMBP master: heartbeat interval = UMBP_HEARTBEAT_TTL_SEC / this")                                            \
  X(umbp_evictkey_deadline_ms, "UMBP_EVICTKEY_DEADLINE_MS", int, "1000", umbp, "",                                     \
    "MORI-UMBP master: deadline of an EvictKey call to a peer")                                                        \
  X(umbp_hit_index_ttl_sec, "UMBP_HIT_INDEX_TTL_SEC", int, "7200", umbp, "",                                           \
    "MORI-UMBP master: an external-KV hit counter untouched this long is dropped")                                     \
  X(umbp_hit_index_gc_interval_sec, "UMBP_HIT_INDEX_GC_INTERVAL_SEC", number, "60", umbp, "",                          \
    "MORI-UMBP master: how often stale hit counters are dropped")                                                      \
  X(umbp_hit_query_max_batch, "UMBP_HIT_QUERY_MAX_BATCH", int, "4096", umbp, "",                                       \
    "MORI-UMBP master: most hashes one GetExternalKvHitCounts may ask (more: INVALID_ARGUMENT)")                       \
  X(umbp_route_put_select_algo, "UMBP_ROUTE_PUT_SELECT_ALGO", string, "most_available", umbp, "",                      \
    "MORI-UMBP master: put target choice: most_available or random (capacity-weighted)")                               \
  X(umbp_route_put_node_affinity, "UMBP_ROUTE_PUT_NODE_AFFINITY", string, "none", umbp, "",                            \
    "MORI-UMBP master: none, same (prefer the writer) or local (only the writer)")                                     \
  X(umbp_route_get_strategy, "UMBP_ROUTE_GET_STRATEGY", string, "tier_priority", umbp, "",                             \
    "MORI-UMBP master (ours): get routing: tier_priority or random")                                                   \
  X(umbp_master_index_shards, "UMBP_MASTER_INDEX_SHARDS", int, "32", umbp, "",                                         \
    "MORI-UMBP master: lock shards of the in-memory block index")                                                      \
  X(umbp_metadata_backend, "UMBP_METADATA_BACKEND", string, "memory", umbp, "",                                        \
    "MORI-UMBP master: metadata store: memory or redis")                                                               \
  X(umbp_redis_uri, "UMBP_REDIS_URI", string, "redis://127.0.0.1:6379", umbp, "",                                      \
    "MORI-UMBP master: the Redis/Valkey endpoint (single mode, or a cluster seed)")                                    \
  X(umbp_redis_namespace, "UMBP_REDIS_NAMESPACE", string, "umbp", umbp, "",                                            \
    "MORI-UMBP master: prefix of every Redis key")                                                                     \
  X(umbp_redis_cluster, "UMBP_REDIS_CLUSTER", bool, "0", umbp, "",                                                     \
    "MORI-UMBP master: UMBP_REDIS_URI is a Redis Cluster")                                                             \
  X(umbp_redis_required, "UMBP_REDIS_REQUIRED", bool, "1", umbp, "",                                                   \
    "MORI-UMBP master: refuse to start when Redis is unreachable (0: fall back to memory)")                            \
  X(umbp_redis_shard_uris, "UMBP_REDIS_SHARD_URIS", string, "", umbp, "",                                              \
    "MORI-UMBP master: comma-separated Redis endpoints, one per block shard; the first also holds control state")      \
  X(umbp_redis_block_shards, "UMBP_REDIS_BLOCK_SHARDS", int, "16", umbp, "",                                           \
    "MORI-UMBP master: block-index shards (hash tags) spread over the endpoints or cluster slots")                     \
  X(umbp_redis_pool_size, "UMBP_REDIS_POOL_SIZE", int, "16", umbp, "",                                                 \
    "MORI-UMBP master: connections per Redis endpoint")                                                                \
  X(umbp_redis_connect_timeout_ms, "UMBP_REDIS_CONNECT_TIMEOUT_MS", int, "1000", umbp, "",                             \
    "MORI-UMBP master: Redis connect timeout")                                                                         \
  X(umbp_redis_socket_timeout_ms, "UMBP_REDIS_SOCKET_TIMEOUT_MS", int, "1000", umbp, "",                               \
    "MORI-UMBP master: Redis command timeout")                                                                         \
  X(umbp_redis_password, "UMBP_REDIS_PASSWORD", string, "", umbp, "",                                                  \
    "MORI-UMBP master: Redis AUTH password (empty: none)")                                                             \
  X(umbp_master_address, "UMBP_MASTER_ADDRESS", string, "", umbp, "", "MORI-UMBP: host:port of the master")            \
  X(umbp_master_listen, "UMBP_MASTER_LISTEN", string, "0.0.0.0:50051", umbp, "",                                       \
    "MORI-UMBP master: listen address when none is given")                                                             \
  X(umbp_master_metrics_port, "UMBP_MASTER_METRICS_PORT", int, "9091", umbp, "",                                       \
    "MORI-UMBP master (ours): Prometheus port when none is given (0: none)")                                           \
  X(umbp_master_server, "UMBP_MASTER_SERVER", string, "auto", umbp, "",                                                \
    "MORI-UMBP master (ours): gRPC server, cpp (grpc++, in process), python (grpcio) or auto (cpp when built)")        \
  X(umbp_master_threads, "UMBP_MASTER_THREADS", int, "1", umbp, "",                                                    \
    "MORI-UMBP master (ours): threads polling its grpc++ calls and answering in-memory routes, at most the cores "     \
    "(each idle one costs every call a hand-off; one serves about a core's worth of small calls)")                     \
  X(umbp_master_handler_threads, "UMBP_MASTER_HANDLER_THREADS", string, "auto", umbp, "",                              \
    "MORI-UMBP master (ours): threads running its grpc++ calls that may wait (Python handlers, Redis) and its "        \
    "batches; auto: 4 where the process may run on 8 or more CPUs, else 2")                                            \
  X(umbp_master_inline_bytes, "UMBP_MASTER_INLINE_BYTES", int, "1024", umbp, "",                                       \
    "MORI-UMBP master (ours): in-memory routes whose request is larger (batches) run on the handler threads, not on "  \
    "the polling thread (0: every one; -1: none)")                                                                     \
  X(umbp_peer_server, "UMBP_PEER_SERVER", string, "auto", umbp, "",                                                    \
    "MORI-UMBP worker (ours): its UMBPPeer gRPC server, cpp (grpc++), python (grpcio) or auto (cpp when built)")       \
  X(umbp_peer_threads, "UMBP_PEER_THREADS", int, "2", umbp, "",                                                        \
    "MORI-UMBP worker (ours): threads answering its UMBPPeer calls, at least 2 (each idle one costs every call: a "    \
    "64 KiB put 190-244 us with 2 against 339-355 with 8 on 16 cores)")                                                \
  X(umbp_grpc_client, "UMBP_GRPC_CLIENT", string, "auto", umbp, "",                                                    \
    "MORI-UMBP (ours): gRPC client of the master and peers, cpp (grpc++, no GIL), python (grpcio) or auto")            \
  X(umbp_grpc_streams, "UMBP_GRPC_STREAMS", bool, "1", umbp, "",                                                       \
    "MORI-UMBP (ours): the grpc++ client carries its calls on call streams where the server answers them (0: unary)")  \
  X(umbp_lookup_timeout_ms, "UMBP_LOOKUP_TIMEOUT_MS", int, "2000", umbp, "",                                           \
    "MORI-UMBP (ours): deadline of every control-plane call to the master; past it a lookup is a miss")                \
  X(umbp_auth_window_ms, "UMBP_AUTH_WINDOW_MS", int, "30000", umbp, "",                                                \
    "MORI-UMBP master (ours): a signed RPC older or newer than this is refused; nonces are remembered this long")      \
  X(io_max_notifications, "MORI_IO_MAX_NOTIFICATIONS", int, "65536", io, "",                                           \
    "MORI-IO: inbound notifications kept for pop_inbound_transfer_status; beyond it the oldest is dropped (counted, "  \
    "warned)")                                                                                                         \
  X(io_max_connections, "MORI_IO_MAX_CONNECTIONS", int, "1024", io, "",                                                \
    "MORI-IO: authenticated connections an engine serves at once; more are refused, saying so")                        \
  X(io_max_connections_per_peer, "MORI_IO_MAX_CONNECTIONS_PER_PEER", int, "128", io, "",                               \
    "MORI-IO: authenticated connections one peer engine may hold at once; more are refused, saying so")                \
  X(ir_bitcode, "MORI_IR_BITCODE", string, "", ir, "",                                                                 \
    "MORI-IR: the device bitcode file Triton links (empty: the installed copy, else the per-arch cache)")              \
  X(ir_cache_dir, "MORI_IR_CACHE_DIR", string, "", ir, "",                                                             \
    "MORI-IR: where bitcode built on first use is kept (empty: $XDG_CACHE_HOME/mori/ir or ~/.cache/mori/ir)")          \
  X(ir_clang, "MORI_IR_CLANG", string, "", ir, "",                                                                     \
    "MORI-IR: the clang (with NVPTX) that builds the bitcode (empty: the newest clang on PATH)")                       \
  X(precompile, "MORI_PRECOMPILE", bool, "0", ir, "",                                                                  \
    "build time: a build that cannot make the MORI-IR bitcode (no clang with NVPTX) fails instead of skipping it")     \
  X(local_rank, "MORI_LOCAL_RANK", int, "0", bootstrap, "",                                                            \
    "this process's rank among the ranks of its host (set by mori run)")                                               \
  X(local_world_size, "MORI_LOCAL_WORLD_SIZE", int, "1", bootstrap, "",                                                \
    "ranks of the job on this host (set by mori run)")                                                                 \
  X(nnodes, "MORI_NNODES", int, "1", bootstrap, "", "hosts of the job (set by mori run)")                              \
  X(node_rank, "MORI_NODE_RANK", int, "0", bootstrap, "",                                                              \
    "index of this host among the job's hosts (set by mori run)")                                                      \
  X(python, "MORI_PYTHON", string, "", tools, "",                                                                      \
    "oshrun: the Python with mori installed that runs mori run (empty: the one oshrun came with)")                     \
  X(oshrun_launcher, "MORI_OSHRUN_LAUNCHER", string, "mori", tools, "", "oshrun: mori (mori run) or mpirun")           \
  X(oshcc_cc, "MORI_OSHCC_CC", string, "cc", tools, "", "oshcc: the C compiler it wraps")                              \
  X(oshcxx_cxx, "MORI_OSHCXX_CXX", string, "c++", tools, "", "oshc++: the C++ compiler it wraps")                      \
  X(test_gpu_pes, "MORI_TEST_GPU_PES", string, "", tests, "",                                                          \
    "GPU tests and mori bench ir: comma-separated PE counts that may share GPUs (empty: one PE per GPU, 2 and up)")
