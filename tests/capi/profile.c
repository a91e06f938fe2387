/* SPDX-License-Identifier: MIT
 * Runs under tests/capi/profile_tool.c: a random number of shmem_putmem calls (data checked
 * on arrival), some of them while shmem_pcontrol(0) has switched the tool off, and calls
 * to shmem_my_pe and the deprecated _my_pe (which the library implements without calling
 * shmem_my_pe, so the tool sees only the program's own calls). Prints what the tool must
 * have counted. */
#include "check.h"

#define MAXB 512

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
  unsigned char* box = shmem_malloc(MAXB);
  unsigned char buf[MAXB];
  int calls = 1 + (int)(rnd(1, 0, 0) % 20), quiet_calls = 1 + (int)(rnd(2, 0, 0) % 5);
  long counted = 0, bytes = 0;
  for (int k = 0; k < calls + quiet_calls; ++k) {
    if (k == calls) shmem_pcontrol(0);
    size_t len = 1 + rnd(3, 0, (uint64_t)k) % MAXB;
    for (size_t i = 0; i < len; ++i) buf[i] = (unsigned char)rnd(4 + k, me, i);
    shmem_barrier_all();
    shmem_putmem(box, buf, len, right);
    shmem_barrier_all();
    for (size_t i = 0; i < len; ++i) CHECK(box[i] == (unsigned char)rnd(4 + k, left, i), "put %d byte %zu", k, i);
    if (k < calls) ++counted, bytes += (long)len;
  }
  shmem_pcontrol(1);
  CHECK(_my_pe() == me && shmem_my_pe() == me, "my_pe");
  printf("program PE %d: putmem %ld calls %ld bytes, my_pe 2, pcontrol 2\n", me, counted, bytes);
  fflush(stdout);
  shmem_free(box);
  shmem_finalize();
  return 0;
}
