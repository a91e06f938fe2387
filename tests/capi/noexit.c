/* SPDX-License-Identifier: MIT
 * A program that leaves main without shmem_finalize (`noexit return|exit|mixed STATUS SEED`):
 * `return` returns STATUS from main, `exit` calls exit(STATUS), `mixed` has the even PEs
 * call shmem_finalize and the odd ones return. The library must finalize at exit, keep the
 * status and lose no output (stdout to a pipe is fully buffered: written at exit). */
#include <string.h>

#include "check.h"

long g_from_left;

int main(int argc, char** argv) {
  const char* how = argc > 1 ? argv[1] : "return";
  int status = argc > 2 ? atoi(argv[2]) : 0;
  if (argc > 3) test_seed = strtoull(argv[3], NULL, 0);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n;
  shmem_long_p(&g_from_left, (long)(rnd(1, me, 0) >> 8), right);
  shmem_barrier_all();
  printf("noexit PE %d got %ld\n", me, g_from_left); /* stdout is a pipe: flushed only by exit */
  if (!strcmp(how, "exit")) exit(status);
  if (!strcmp(how, "mixed") && me % 2 == 0) shmem_finalize();
  return status;
}
