/* SPDX-License-Identifier: MIT
 * MORI's OpenSHMEM extensions (shmemx_*): routines from OpenSHMEM 1.6 and timing helpers.
 */
#ifndef MORI_SHMEMX_H
#define MORI_SHMEMX_H

#include <shmem.h>

/* Feature macros: one per routine below, so portable programs can test for it. */
#define HAVE_SHMEMX_WTIME 1
#define HAVE_SHMEMX_HEAP_SIZE 1
#define HAVE_SHMEMX_HEAP_FREE 1
#define HAVE_SHMEMX_SIGNAL_ADD 1
#define HAVE_SHMEMX_SIGNAL_SET 1
#define HAVE_SHMEMX_TEAM_PTR 1
#define HAVE_SHMEMX_SYMMETRIC_DATA_SIZE 1

#ifdef __cplusplus
extern "C" {
#endif

/* Wall-clock seconds from a monotonic clock (for benchmarks). */
SHMEM_FUNCTION_ATTRIBUTES double shmemx_wtime(void);
/* Bytes of this PE's symmetric heap, and how many are free now. */
SHMEM_FUNCTION_ATTRIBUTES size_t shmemx_heap_size(void);
SHMEM_FUNCTION_ATTRIBUTES size_t shmemx_heap_free(void);
/* OpenSHMEM 1.6: update a remote signal without data. */
SHMEM_FUNCTION_ATTRIBUTES void shmemx_signal_add(uint64_t* sig_addr, uint64_t signal, int pe);
SHMEM_FUNCTION_ATTRIBUTES void shmemx_signal_set(uint64_t* sig_addr, uint64_t signal, int pe);
/* OpenSHMEM 1.6: shmem_ptr with a team-relative PE number. */
SHMEM_FUNCTION_ATTRIBUTES void* shmemx_team_ptr(shmem_team_t team, const void* dest, int pe);
/* Bytes of the program's data+bss made symmetric at init (0 when disabled). */
SHMEM_FUNCTION_ATTRIBUTES size_t shmemx_symmetric_data_size(void);

#ifdef __cplusplus
}
#endif

#endif /* MORI_SHMEMX_H */
