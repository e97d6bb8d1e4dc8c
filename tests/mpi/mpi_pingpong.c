/* A two-rank MPI ping-pong of our own (issue 24): ranks 0 and 1 bounce a message of each size
 * and check every byte; rank 0 prints one line per size, "pingpong <bytes> B: <us> us one-way,
 * <MB/s> MB/s", for scripts/bench.sh middleware. Other ranks (if any) only take part in the
 * closing barrier. Usage: mpi_pingpong [max bytes (default 1 MiB)] [iterations (default 1000)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every byte is written and checked in the warm-up rounds and the last round; the timed rounds
 * in between touch 8 bytes at each end only (a lost or stale message still shows), so that the
 * figures are the transport's, not this loop's. */
static int check(const unsigned char* buf, size_t n, unsigned seed, int all) {
  for (size_t i = 0; i < n; ++i) {
    if (!all && i == 8 && n > 16) i = n - 8;
    if (buf[i] != (unsigned char)(seed + i * 7)) return 0;
  }
  return 1;
}

static void fill(unsigned char* buf, size_t n, unsigned seed, int all) {
  for (size_t i = 0; i < n; ++i) {
    if (!all && i == 8 && n > 16) i = n - 8;
    buf[i] = (unsigned char)(seed + i * 7);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const size_t max_bytes = argc > 1 ? strtoul(argv[1], NULL, 0) : (1u << 20);
  const int iters = argc > 2 ? atoi(argv[2]) : 1000;
  if (size < 2 || iters < 1) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs at least 2 ranks and 1 iteration\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  unsigned char* buf = malloc(max_bytes ? max_bytes : 1);
  int failed = 0;
  if (rank < 2) {
    const int peer = 1 - rank;
    for (size_t n = 1; n <= max_bytes; n *= (n < 64 ? 8 : 4)) {
      const int rounds = n >= (256u << 10) ? (iters + 9) / 10 : iters;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = 0;
      for (int i = -10; i < rounds; ++i) { /* 10 warm-up rounds */
        if (i == 0) t0 = MPI_Wtime();
        const unsigned seed = (unsigned)(n + (size_t)i);
        const int all = i < 0 || i == rounds - 1;
        if (rank == 0) {
          fill(buf, n, seed, all);
          MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
          MPI_Recv(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          failed |= !check(buf, n, seed ^ 0x5a, all);
        } else {
          MPI_Recv(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          failed |= !check(buf, n, seed, all);
          fill(buf, n, seed ^ 0x5a, all);
          MPI_Send(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
        }
      }
      const double one_way_us = (MPI_Wtime() - t0) * 1e6 / (2.0 * rounds);
      if (rank == 0 && !failed)
        printf("pingpong %zu B: %.2f us one-way, %.1f MB/s\n", n, one_way_us, n / one_way_us);
    }
  } else {
    for (size_t n = 1; n <= max_bytes; n *= (n < 64 ? 8 : 4)) MPI_Barrier(MPI_COMM_WORLD);
  }
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  if (rank == 0) printf(any_failed ? "pingpong: DATA MISMATCH\n" : "pingpong: OK\n");
  free(buf);
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
