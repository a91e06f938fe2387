// Loopback TCP round trips with the reply sent by different kernel paths: what MORI-IO's tcp
// lanes could gain by not copying a payload into the kernel (docs/io.md, "Round 10").
//
//   cc -O2 -o /tmp/lsp scripts/loopback_send_paths.c
//   /tmp/lsp SIZE MODE [ROUNDS] [POLL] [FRESH]   one line: p10/p50/p90 of ROUNDS round trips in us
//   /tmp/lsp --hazard                            shows why splicing is not used (exits 0 either way)
//
// A client sends 8 bytes; the server answers with a 24-byte header and SIZE payload bytes, as
//   send     one sendmsg() of header and payload (what MORI-IO does),
//   halves   the header with MSG_MORE, then the payload in two send()s (MORI_IO_TCP_SEND_HALVES),
//   quarters the same in four send()s,
//   splice   the header with MSG_MORE, then the payload's pages by vmsplice() into a pipe and
//            splice() from it into the socket: no copy on the sending side,
//   splice2  the same in two halves,
//   staged   the payload copied into a buffer of the sender's own first, then spliced from there:
//            the safe form, if the buffer is reused only once the peer has answered,
//   zc       the payload with MSG_ZEROCOPY (loopback copies it anyway, later).
// POLL 1 (default): both sides spin on non-blocking recv(); 0: blocking recv().
// FRESH 1: the sender writes one byte of every cache line of the payload before each reply, as
// a producer of new data would; 0 (default): the payload is the same every round, so the
// receiver may find a spliced payload's lines still in its own cache from the round before.
// Every reply is compared with the payload.
//
// --hazard: with splice, the socket holds references to the sender's pages, not a copy, until
// the receiver reads them: even after the sender has closed the connection with a reset, the
// receiver reads what the sender wrote into the buffer afterwards. A transfer that failed (its
// peer stalled past the timeout) would then hand the peer whatever its caller put there next.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

enum { kHeader = 24 };
static int spin = 1;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void die(const char* what) {
  perror(what);
  exit(1);
}

static void recv_all(int fd, char* p, size_t n) {
  while (n) {
    ssize_t k = recv(fd, p, n, spin ? MSG_DONTWAIT : 0);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k == 0) {
      exit(0);  // the other side closed: the run is over
    } else if (errno != EAGAIN && errno != EINTR) {
      die("recv");
    }
  }
}

static void send_all(int fd, const char* p, size_t n, int flags) {
  while (n) {
    ssize_t k = send(fd, p, n, flags);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k < 0 && errno != EINTR && errno != ENOBUFS) {
      die("send");
    }
  }
}

// The pages of [p, p + n) go into the socket by reference: vmsplice into the pipe, splice out.
static void splice_all(int fd, int pipe_r, int pipe_w, const char* p, size_t n) {
  while (n) {
    struct iovec v = {(void*)p, n};
    ssize_t in = vmsplice(pipe_w, &v, 1, 0);
    if (in <= 0) die("vmsplice");
    for (ssize_t left = in; left > 0;) {
      ssize_t out = splice(pipe_r, NULL, fd, NULL, (size_t)left, 0);
      if (out < 0 && errno != EINTR) die("splice");
      if (out > 0) left -= out;
    }
    p += in;
    n -= (size_t)in;
  }
}

static void answer(int fd, const char* mode, const char* header, const char* payload, size_t size, int pipe_r,
                   int pipe_w) {
  if (!strcmp(mode, "send")) {
    struct iovec v[2] = {{(void*)header, kHeader}, {(void*)payload, size}};
    struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
    size_t left = kHeader + size;
    while (left) {
      ssize_t k = sendmsg(fd, &m, 0);
      if (k < 0) die("sendmsg");
      left -= (size_t)k;
      for (size_t used = (size_t)k; used && m.msg_iovlen;) {
        size_t take = used < m.msg_iov->iov_len ? used : m.msg_iov->iov_len;
        m.msg_iov->iov_base = (char*)m.msg_iov->iov_base + take;
        m.msg_iov->iov_len -= take;
        used -= take;
        if (!m.msg_iov->iov_len) m.msg_iov++, m.msg_iovlen--;
      }
    }
    return;
  }
  send_all(fd, header, kHeader, MSG_MORE);
  size_t half = size / 2;
  if (!strcmp(mode, "halves")) {
    send_all(fd, payload, half, 0);
    send_all(fd, payload + half, size - half, 0);
  } else if (!strcmp(mode, "quarters")) {
    for (int q = 0; q < 4; ++q) send_all(fd, payload + q * (size / 4), q < 3 ? size / 4 : size - 3 * (size / 4), 0);
  } else if (!strcmp(mode, "splice")) {
    splice_all(fd, pipe_r, pipe_w, payload, size);
  } else if (!strcmp(mode, "splice2")) {
    splice_all(fd, pipe_r, pipe_w, payload, half);
    splice_all(fd, pipe_r, pipe_w, payload + half, size - half);
  } else if (!strcmp(mode, "staged")) {
    // Reused each round: the next request comes only after the client has read this reply.
    static char* staging;
    static size_t staged_size;
    if (staged_size < size) {
      free(staging);
      staging = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
      if (!staging) die("aligned_alloc");
      staged_size = size;
    }
    memcpy(staging, payload, size);
    splice_all(fd, pipe_r, pipe_w, staging, size);
  } else if (!strcmp(mode, "zc")) {
    send_all(fd, payload, size, MSG_ZEROCOPY);
    char control[128];
    struct msghdr m = {.msg_control = control, .msg_controllen = sizeof control};
    while (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) > 0) m.msg_controllen = sizeof control;
  } else {
    fprintf(stderr, "unknown mode '%s'\n", mode);
    exit(2);
  }
}

// One byte in each 64-byte line rewritten: every line of the payload leaves other CPUs' caches.
static void touch_lines(char* p, size_t n, unsigned round) {
  for (size_t i = 0; i < n; i += 64) p[i] = (char)(round + i);
}

static void connected_pair(int* client, int* server) {
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(ls, (struct sockaddr*)&a, sizeof a) || getsockname(ls, (struct sockaddr*)&a, &len) || listen(ls, 1))
    die("listen");
  *client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*client, (struct sockaddr*)&a, sizeof a)) die("connect");
  *server = accept(ls, NULL, NULL);
  if (*server < 0) die("accept");
  setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(*server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  close(ls);
}

static int hazard(void) {
  int client, server, pipefd[2];
  connected_pair(&client, &server);
  if (pipe(pipefd)) die("pipe");
  static char buf[65536] __attribute__((aligned(4096)));
  memset(buf, 'P', sizeof buf);  // the payload
  splice_all(server, pipefd[0], pipefd[1], buf, sizeof buf);
  struct linger reset = {1, 0};
  setsockopt(server, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(server);                 // the sender gives up on the transfer and resets the connection
  memset(buf, 'S', sizeof buf);  // ... and reuses its buffer
  static char got[65536];
  spin = 0;
  ssize_t k = recv(client, got, sizeof got, MSG_WAITALL);
  printf(
      "spliced 64 KiB, reset the connection, then rewrote the buffer: the receiver got %zd bytes, '%c' "
      "(%s)\n",
      k, k > 0 ? got[0] : '-', k > 0 && got[0] == 'S' ? "the rewritten bytes" : "the payload");
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "--hazard")) return hazard();
  if (argc < 3) {
    fprintf(
        stderr,
        "usage: %s SIZE send|halves|quarters|splice|splice2|staged|zc [ROUNDS] [POLL] [FRESH]\n       %s --hazard\n",
        argv[0], argv[0]);
    return 2;
  }
  size_t size = strtoul(argv[1], NULL, 0);
  const char* mode = argv[2];
  int rounds = argc > 3 ? atoi(argv[3]) : 4000;
  spin = argc > 4 ? atoi(argv[4]) : 1;
  const int fresh = argc > 5 ? atoi(argv[5]) : 0;
  if (size == 0 || rounds <= 0) {
    fprintf(stderr, "SIZE and ROUNDS must be positive\n");
    return 2;
  }
  char* payload = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
  char* got = malloc(size);
  double* took = malloc(sizeof(double) * (size_t)rounds);
  if (!payload || !got || !took) die("malloc");
  for (size_t i = 0; i < size; ++i) payload[i] = (char)(i * 131 + (i >> 12));
  int client, server;
  connected_pair(&client, &server);
  pid_t child = fork();
  if (child == 0) {
    close(client);
    int pipefd[2], one = 1;
    if (pipe(pipefd)) die("pipe");
    fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 20);  // 256 pages per vmsplice where allowed
    if (!strcmp(mode, "zc")) setsockopt(server, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one);
    char request[8], header[kHeader];
    memset(header, 7, sizeof header);
    for (unsigned round = 1;; ++round) {
      recv_all(server, request, sizeof request);
      if (fresh) touch_lines(payload, size, round);
      answer(server, mode, header, payload, size, pipefd[0], pipefd[1]);
    }
  }
  close(server);
  int wrong = 0;
  for (int i = 0; i < rounds; ++i) {
    char header[kHeader];
    memset(got, 0, size < 64 ? size : 64);
    double t0 = now_us();
    send_all(client, "12345678", 8, 0);
    recv_all(client, header, sizeof header);
    recv_all(client, got, size);
    took[i] = now_us() - t0;
    if (fresh) touch_lines(payload, size, (unsigned)i + 1);
    wrong += memcmp(got, payload, size) != 0;
  }
  close(client);
  waitpid(child, NULL, 0);
  qsort(took, (size_t)rounds, sizeof(double), by_value);
  printf("size %8zu %-7s spin %d fresh %d  p10 %7.2f  p50 %7.2f  p90 %7.2f us  wrong %d\n", size, mode, spin, fresh,
         took[rounds / 10], took[rounds / 2], took[rounds * 9 / 10], wrong);
  return wrong != 0;
}
