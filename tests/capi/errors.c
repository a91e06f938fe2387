/* SPDX-License-Identifier: MIT
 * Error behaviour: `errors <case>` does one bad thing; the test checks the exit status and
 * that the message names the call. Cases: pe (out-of-range PE), addr (non-symmetric
 * address), oom (exhausted heap returns NULL, then the program continues), exit (global_exit 99),
 * stop (the last PE stops itself with SIGSTOP: with MORI_SHMEM_WAIT_TIMEOUT the others' barrier
 * times out naming it), stop_active (the same in an active-set barrier), dead (the last PE
 * exits without finalizing: the others' barrier fails naming it), wait (a wait_until nobody
 * satisfies times out saying what it waited for). */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

long g;

int main(int argc, char** argv) {
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  const char* what = argc > 1 ? argv[1] : "";
  if (!strcmp(what, "pe")) {
    if (me == 0) shmem_long_p(&g, 1, n + 3);
    shmem_barrier_all(); /* the other PEs must not hang here: PE 0's error ends the job */
  } else if (!strcmp(what, "addr")) {
    long local = 0;
    if (me == n - 1) shmem_long_put(&local, &local, 1, 0);
    shmem_barrier_all();
  } else if (!strcmp(what, "oom")) {
    void* p = shmem_malloc((size_t)1 << 40);
    CHECK(p == NULL, "a 1 TiB allocation must fail");
    void* q = shmem_malloc(1024); /* and the heap still works afterwards, on every PE */
    CHECK(q != NULL, "malloc after failure");
    shmem_free(q);
    if (me == 0) printf("oom: NULL as expected\n");
  } else if (!strcmp(what, "stop") || !strcmp(what, "stop_active")) {
    static long psync[SHMEM_BARRIER_SYNC_SIZE];
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; ++i) psync[i] = SHMEM_SYNC_VALUE;
    shmem_barrier_all();
    if (me == n - 1) raise(SIGSTOP);
    if (!strcmp(what, "stop"))
      shmem_barrier_all();
    else
      shmem_barrier(0, 0, n, psync);
  } else if (!strcmp(what, "dead")) {
    shmem_barrier_all();
    if (me == n - 1) _exit(7);
    shmem_barrier_all();
  } else if (!strcmp(what, "wait")) {
    shmem_barrier_all();
    if (me == 0)
      shmem_long_wait_until(&g, SHMEM_CMP_EQ, 7);
    else
      sleep(60); /* alive, never writes (PE 0's error ends it) */
  } else if (!strcmp(what, "exit")) {
    if (me == n - 1) shmem_global_exit(99);
    for (;;) shmem_long_wait_until(&g, SHMEM_CMP_NE, 0); /* blocked PEs are ended too */
  }
  shmem_finalize();
  return 0;
}
