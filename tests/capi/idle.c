/* SPDX-License-Identifier: MIT
 * PEs idle in a barrier give the core up: while one PE computes for a while, the others wait
 * in shmem_barrier_all and in a team barrier, and each waiting PE's thread may wake only a few
 * times a second (the library's own barrier words are written by operations that ring the
 * waiter's doorbell, so it sleeps until rung; a timed nap every 2 ms would wake it 500 times a
 * second and take time slices from the PE that works) and spends little CPU (a busy-polling
 * wait would spend the whole second). Wake-ups are the thread's voluntary context switches (its
 * sleeps); the involuntary ones are the scheduler's preemptions, which a loaded host adds
 * whatever the wait does (a CI run counted 187 once). Values stay exact: every PE adds its
 * random share to a counter on PE 0 before each barrier. */
#define _GNU_SOURCE
#include <sys/resource.h>
#include <time.h>

#include "check.h"

#define BUSY_SECONDS 1.0
#define MAX_WAKEUPS 150      /* per barrier that waits BUSY_SECONDS; 2 ms naps: ~500 */
#define MAX_CPU_SECONDS 0.25 /* of the waiter's thread over those BUSY_SECONDS */

static long counter;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long wakeups(void) {
  struct rusage u;
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_THREAD, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static void busy(double seconds) {
  volatile uint64_t x = 0;
  const double until = now_s() + seconds;
  while (now_s() < until) x = mix64(x);
}

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  const int me = shmem_my_pe(), n = shmem_n_pes();
  shmem_team_t evens = SHMEM_TEAM_INVALID;
  shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, (n + 1) / 2, NULL, 0, &evens);
  long expect = 0;
  for (int pe = 0; pe < n; ++pe) expect += (long)(rnd(1, pe, 0) % 1000);
  for (int phase = 0; phase < 2; ++phase) {
    const int team = phase == 1, waits = !team || evens != SHMEM_TEAM_INVALID;
    shmem_barrier_all();
    if (me == 0) counter = 0;
    shmem_barrier_all();
    shmem_long_atomic_add(&counter, (long)(rnd(1, me, 0) % 1000), 0);
    const long before = wakeups();
    const double cpu_before = cpu_s();
    if (me == 0) busy(BUSY_SECONDS);
    if (team && waits)
      shmem_team_sync(evens);
    else if (!team)
      shmem_barrier_all();
    const long woke = wakeups() - before;
    const double cpu = cpu_s() - cpu_before;
    if (me != 0 && waits) {
      CHECK(woke <= MAX_WAKEUPS, "%s: PE %d woke %ld times while PE 0 computed for %.1f s",
            team ? "team sync" : "barrier", me, woke, BUSY_SECONDS);
      CHECK(cpu <= MAX_CPU_SECONDS, "%s: PE %d spent %.2f s of CPU waiting while PE 0 computed for %.1f s",
            team ? "team sync" : "barrier", me, cpu, BUSY_SECONDS);
    }
    shmem_barrier_all();
    if (me == 0 && !team) CHECK(counter == expect, "counter %ld, expected %ld", counter, expect);
  }
  if (me == 0) printf("idle: OK on %d PEs\n", n);
  shmem_finalize();
  return 0;
}
