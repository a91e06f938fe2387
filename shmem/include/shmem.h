/* SPDX-License-Identifier: MIT
 *
 * MORI's OpenSHMEM 1.5 C API (with the 1.4 and older names existing programs use).
 * Link with libmori_shmem (oshcc does it). The typed routines are generated:
 * mori_shmem/typed.h (declarations) and mori_shmem/generic.h (C11 _Generic).
 */
#ifndef MORI_SHMEM_H
#define MORI_SHMEM_H

#include <stddef.h>
#include <stdint.h>

/* SHMEM_DEF_H + SHMEM_FUNCTION_ATTRIBUTES are the two macros OpenSHMEM clients
 * (e.g. shmem4py) test to recognise a header that provides the complete 1.5 API. */
#define SHMEM_DEF_H 1
#define SHMEM_FUNCTION_ATTRIBUTES __attribute__((visibility("default")))

#define MORI_SHMEM_C_API 1

/* ---------------------------------------------------------------- versions */
#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 5
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define SHMEM_MAX_NAME_LEN 256
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define SHMEM_VENDOR_STRING "MORI OpenSHMEM"
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING
#define SHMEM_VENDOR_MAJOR_VERSION 0
#define SHMEM_VENDOR_MINOR_VERSION 1

/* ---------------------------------------------------------------- constants */
#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3
#define _SHMEM_THREAD_SINGLE SHMEM_THREAD_SINGLE
#define _SHMEM_THREAD_FUNNELED SHMEM_THREAD_FUNNELED
#define _SHMEM_THREAD_SERIALIZED SHMEM_THREAD_SERIALIZED
#define _SHMEM_THREAD_MULTIPLE SHMEM_THREAD_MULTIPLE

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_LE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_GE 5
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_LE SHMEM_CMP_LE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_GE SHMEM_CMP_GE

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

#define SHMEM_CTX_PRIVATE (1L << 0)
#define SHMEM_CTX_SERIALIZED (1L << 1)
#define SHMEM_CTX_NOSTORE (1L << 2)

#define SHMEM_MALLOC_ATOMICS_REMOTE (1L << 0)
#define SHMEM_MALLOC_SIGNAL_REMOTE (1L << 1)

#define SHMEM_TEAM_NUM_CONTEXTS (1L << 0)

/* pSync arrays (in longs). MORI keeps dissemination counters in them; 64 covers any job. */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_BARRIER_SYNC_SIZE 64
#define SHMEM_BCAST_SYNC_SIZE 64
#define SHMEM_REDUCE_SYNC_SIZE 64
#define SHMEM_COLLECT_SYNC_SIZE 64
#define SHMEM_ALLTOALL_SYNC_SIZE 64
#define SHMEM_ALLTOALLS_SYNC_SIZE 64
#define SHMEM_SYNC_SIZE 64
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 1
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_ALLTOALL_SYNC_SIZE SHMEM_ALLTOALL_SYNC_SIZE
#define _SHMEM_ALLTOALLS_SYNC_SIZE SHMEM_ALLTOALLS_SYNC_SIZE
#define _SHMEM_SYNC_SIZE SHMEM_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* ---------------------------------------------------------------- types */
#ifdef __cplusplus
#define SHMEMI_COMPLEXF __complex__ float
#define SHMEMI_COMPLEXD __complex__ double
extern "C" {
#else
#define SHMEMI_COMPLEXF float _Complex
#define SHMEMI_COMPLEXD double _Complex
#endif

typedef struct mori_shmem_team* shmem_team_t;
typedef struct mori_shmem_ctx* shmem_ctx_t;
typedef struct {
  int num_contexts;
} shmem_team_config_t;

/* Predefined teams and contexts: addresses of objects inside the library. */
SHMEM_FUNCTION_ATTRIBUTES extern struct mori_shmem_team mori_shmem_team_world, mori_shmem_team_shared;
SHMEM_FUNCTION_ATTRIBUTES extern struct mori_shmem_ctx mori_shmem_ctx_default;
#define SHMEM_TEAM_WORLD (&mori_shmem_team_world)
#define SHMEM_TEAM_SHARED (&mori_shmem_team_shared)
#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_CTX_DEFAULT (&mori_shmem_ctx_default)
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)

/* ---------------------------------------------------------------- setup, exit, query */
SHMEM_FUNCTION_ATTRIBUTES void shmem_init(void);
SHMEM_FUNCTION_ATTRIBUTES int shmem_init_thread(int requested, int* provided);
SHMEM_FUNCTION_ATTRIBUTES void shmem_query_thread(int* provided);
/* OpenSHMEM 1.6: nonzero while initialized (init/finalize calls are counted and matched). */
SHMEM_FUNCTION_ATTRIBUTES void shmem_query_initialized(int* initialized);
SHMEM_FUNCTION_ATTRIBUTES void shmem_finalize(void);
SHMEM_FUNCTION_ATTRIBUTES void shmem_global_exit(int status) __attribute__((noreturn));
SHMEM_FUNCTION_ATTRIBUTES int shmem_my_pe(void);
SHMEM_FUNCTION_ATTRIBUTES int shmem_n_pes(void);
SHMEM_FUNCTION_ATTRIBUTES int shmem_pe_accessible(int pe);
SHMEM_FUNCTION_ATTRIBUTES int shmem_addr_accessible(const void* addr, int pe);
SHMEM_FUNCTION_ATTRIBUTES void* shmem_ptr(const void* dest, int pe);
SHMEM_FUNCTION_ATTRIBUTES void shmem_info_get_version(int* major, int* minor);
SHMEM_FUNCTION_ATTRIBUTES void shmem_info_get_name(char* name);
SHMEM_FUNCTION_ATTRIBUTES void shmem_pcontrol(const int level, ...);

/* ---------------------------------------------------------------- memory */
SHMEM_FUNCTION_ATTRIBUTES void* shmem_malloc(size_t size);
SHMEM_FUNCTION_ATTRIBUTES void* shmem_calloc(size_t count, size_t size);
SHMEM_FUNCTION_ATTRIBUTES void* shmem_realloc(void* ptr, size_t size);
SHMEM_FUNCTION_ATTRIBUTES void* shmem_align(size_t alignment, size_t size);
SHMEM_FUNCTION_ATTRIBUTES void* shmem_malloc_with_hints(size_t size, long hints);
SHMEM_FUNCTION_ATTRIBUTES void shmem_free(void* ptr);

/* ---------------------------------------------------------------- teams */
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_my_pe(shmem_team_t team);
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_n_pes(shmem_team_t team);
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t* config);
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                                                       const shmem_team_config_t* config, long config_mask,
                                                       shmem_team_t* new_team);
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_split_2d(shmem_team_t parent_team, int xrange,
                                                  const shmem_team_config_t* xaxis_config, long xaxis_mask,
                                                  shmem_team_t* xaxis_team, const shmem_team_config_t* yaxis_config,
                                                  long yaxis_mask, shmem_team_t* yaxis_team);
SHMEM_FUNCTION_ATTRIBUTES void shmem_team_destroy(shmem_team_t team);

/* ---------------------------------------------------------------- contexts */
SHMEM_FUNCTION_ATTRIBUTES int shmem_ctx_create(long options, shmem_ctx_t* ctx);
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t* ctx);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_destroy(shmem_ctx_t ctx);
SHMEM_FUNCTION_ATTRIBUTES int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t* team);

/* ---------------------------------------------------------------- signals, ordering */
SHMEM_FUNCTION_ATTRIBUTES uint64_t shmem_signal_fetch(const uint64_t* sig_addr);
SHMEM_FUNCTION_ATTRIBUTES uint64_t shmem_signal_wait_until(uint64_t* sig_addr, int cmp, uint64_t cmp_value);
SHMEM_FUNCTION_ATTRIBUTES void shmem_fence(void);
SHMEM_FUNCTION_ATTRIBUTES void shmem_quiet(void);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_fence(shmem_ctx_t ctx);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_quiet(shmem_ctx_t ctx);
/* OpenSHMEM 1.6: complete the operations to the listed PEs (MORI completes all of them). */
SHMEM_FUNCTION_ATTRIBUTES void shmem_pe_quiet(const int* target_pes, size_t npes);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_pe_quiet(shmem_ctx_t ctx, const int* target_pes, size_t npes);

/* ---------------------------------------------------------------- collectives */
SHMEM_FUNCTION_ATTRIBUTES void shmem_barrier_all(void);
SHMEM_FUNCTION_ATTRIBUTES void shmem_sync_all(void);
SHMEM_FUNCTION_ATTRIBUTES int shmem_team_sync(shmem_team_t team);
SHMEM_FUNCTION_ATTRIBUTES int shmem_broadcastmem(shmem_team_t team, void* dest, const void* source, size_t nelems,
                                                 int PE_root);
SHMEM_FUNCTION_ATTRIBUTES int shmem_collectmem(shmem_team_t team, void* dest, const void* source, size_t nelems);
SHMEM_FUNCTION_ATTRIBUTES int shmem_fcollectmem(shmem_team_t team, void* dest, const void* source, size_t nelems);
SHMEM_FUNCTION_ATTRIBUTES int shmem_alltoallmem(shmem_team_t team, void* dest, const void* source, size_t nelems);
SHMEM_FUNCTION_ATTRIBUTES int shmem_alltoallsmem(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst,
                                                 ptrdiff_t sst, size_t nelems);

/* Active-set collectives (1.4; deprecated in 1.5 but used by most suites). */
SHMEM_FUNCTION_ATTRIBUTES void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_sync(int PE_start, int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_broadcast32(void* dest, const void* source, size_t nelems, int PE_root,
                                                 int PE_start, int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_broadcast64(void* dest, const void* source, size_t nelems, int PE_root,
                                                 int PE_start, int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_collect32(void* dest, const void* source, size_t nelems, int PE_start,
                                               int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_collect64(void* dest, const void* source, size_t nelems, int PE_start,
                                               int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_fcollect32(void* dest, const void* source, size_t nelems, int PE_start,
                                                int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_fcollect64(void* dest, const void* source, size_t nelems, int PE_start,
                                                int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_alltoall32(void* dest, const void* source, size_t nelems, int PE_start,
                                                int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_alltoall64(void* dest, const void* source, size_t nelems, int PE_start,
                                                int logPE_stride, int PE_size, long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_alltoalls32(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst,
                                                 size_t nelems, int PE_start, int logPE_stride, int PE_size,
                                                 long* pSync);
SHMEM_FUNCTION_ATTRIBUTES void shmem_alltoalls64(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst,
                                                 size_t nelems, int PE_start, int logPE_stride, int PE_size,
                                                 long* pSync);

/* ---------------------------------------------------------------- locks */
SHMEM_FUNCTION_ATTRIBUTES void shmem_set_lock(long* lock);
SHMEM_FUNCTION_ATTRIBUTES void shmem_clear_lock(long* lock);
SHMEM_FUNCTION_ATTRIBUTES int shmem_test_lock(long* lock);

/* ---------------------------------------------------------------- OpenSHMEM 1.6 additions */
/* (typed ibput/ibget and sum_inscan/exscan are in mori_shmem/typed.h; docs/shmem-c.md lists
 * which 1.6 routines are in: SHMEM_MINOR_VERSION stays 5 until all are.) */
#define SHMEM_CTX_SESSION_BATCH (1L << 0)
#define SHMEM_CTX_SESSION_TOTAL_OPS (1L << 0)
typedef struct {
  size_t total_ops;
} shmem_ctx_session_config_t;
SHMEM_FUNCTION_ATTRIBUTES void* shmem_team_ptr(shmem_team_t team, const void* dest, int pe);
SHMEM_FUNCTION_ATTRIBUTES void shmem_signal_add(uint64_t* sig_addr, uint64_t signal, int pe);
SHMEM_FUNCTION_ATTRIBUTES void shmem_signal_set(uint64_t* sig_addr, uint64_t signal, int pe);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_signal_add(shmem_ctx_t ctx, uint64_t* sig_addr, uint64_t signal, int pe);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_signal_set(shmem_ctx_t ctx, uint64_t* sig_addr, uint64_t signal, int pe);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_session_start(shmem_ctx_t ctx, long options,
                                                       const shmem_ctx_session_config_t* config, long config_mask);
SHMEM_FUNCTION_ATTRIBUTES void shmem_ctx_session_stop(shmem_ctx_t ctx);

/* ---------------------------------------------------------------- deprecated names */
SHMEM_FUNCTION_ATTRIBUTES void start_pes(int npes);
SHMEM_FUNCTION_ATTRIBUTES int _my_pe(void);
SHMEM_FUNCTION_ATTRIBUTES int _num_pes(void);
SHMEM_FUNCTION_ATTRIBUTES void* shmalloc(size_t size);
SHMEM_FUNCTION_ATTRIBUTES void shfree(void* ptr);
SHMEM_FUNCTION_ATTRIBUTES void* shrealloc(void* ptr, size_t size);
SHMEM_FUNCTION_ATTRIBUTES void* shmemalign(size_t alignment, size_t size);
SHMEM_FUNCTION_ATTRIBUTES void shmem_clear_cache_inv(void);
SHMEM_FUNCTION_ATTRIBUTES void shmem_set_cache_inv(void);
SHMEM_FUNCTION_ATTRIBUTES void shmem_clear_cache_line_inv(void* dest);
SHMEM_FUNCTION_ATTRIBUTES void shmem_set_cache_line_inv(void* dest);
SHMEM_FUNCTION_ATTRIBUTES void shmem_udcflush(void);
SHMEM_FUNCTION_ATTRIBUTES void shmem_udcflush_line(void* dest);
SHMEM_FUNCTION_ATTRIBUTES void shmem_wait(long* ivar, long cmp_value);
SHMEM_FUNCTION_ATTRIBUTES void shmem_wait_until(long* ivar, int cmp, long cmp_value);

#ifdef __cplusplus
}
#endif

#include "mori_shmem/typed.h"

#ifdef __cplusplus
/* OpenSHMEM 1.5's shmem_sync(team) beside the deprecated active-set shmem_sync (C11 gets a
 * _Generic macro in mori_shmem/generic.h). */
inline int shmem_sync(shmem_team_t team) { return shmem_team_sync(team); }
#endif

#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#include "mori_shmem/generic.h"
#endif

#endif /* MORI_SHMEM_H */
