/* SPDX-License-Identifier: MIT
 * Prints the symmetric heap size (to check SHMEM_SYMMETRIC_SIZE is honoured). */
#include <shmemx.h>
#include <stdio.h>

int main(void) {
  shmem_init();
  if (shmem_my_pe() == 0) printf("%zu\n", shmemx_heap_size());
  shmem_finalize();
  return 0;
}
