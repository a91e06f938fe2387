/* SPDX-License-Identifier: MIT
 * A profiling tool in the style of TAU or Score-P wrappers, built as a shared library
 * linked before libmori_shmem: it defines shmem_putmem, shmem_my_pe and shmem_pcontrol,
 * counts the program's calls (while the level set by shmem_pcontrol is non-zero) and
 * forwards them to the pshmem_ names; at shmem_finalize it prints what it counted. */
#include <pshmem.h>
#include <stdio.h>

static long putmem_calls, putmem_bytes, my_pe_calls, pcontrol_calls;
static int level = 1;

void shmem_putmem(void* dest, const void* source, size_t nelems, int pe) {
  if (level) {
    ++putmem_calls;
    putmem_bytes += (long)nelems;
  }
  pshmem_putmem(dest, source, nelems, pe);
}

int shmem_my_pe(void) {
  ++my_pe_calls;
  return pshmem_my_pe();
}

void shmem_pcontrol(const int new_level, ...) {
  ++pcontrol_calls;
  level = new_level;
  pshmem_pcontrol(new_level);
}

void shmem_finalize(void) {
  printf("tool PE %d: putmem %ld calls %ld bytes, my_pe %ld, pcontrol %ld\n", pshmem_my_pe(), putmem_calls,
         putmem_bytes, my_pe_calls, pcontrol_calls);
  fflush(stdout);
  pshmem_finalize();
}
