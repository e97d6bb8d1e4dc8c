/* An allreduce of our own (issue 24): every rank contributes a vector that depends on its rank;
 * each checks the sum against the closed form, for several lengths (small messages to ones
 * past the eager limits). Rank 0 prints "allreduce: OK (<ranks> ranks)" or the first mismatch.
 * Usage: mpi_allreduce [max doubles (default 262144)] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long max_len = argc > 1 ? atol(argv[1]) : 262144;
  double* in = malloc(sizeof(double) * (size_t)max_len);
  double* out = malloc(sizeof(double) * (size_t)max_len);
  long bad_len = -1, bad_index = -1;
  for (long len = 1; len <= max_len && bad_len < 0; len *= 8) {
    for (long i = 0; i < len; ++i) in[i] = (double)(rank + 1) * (double)(i % 1000 + 1);
    MPI_Allreduce(in, out, (int)len, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    /* sum over ranks r of (r + 1) * k = k * size * (size + 1) / 2, exact in doubles here */
    const double ranks_sum = (double)size * (size + 1) / 2.0;
    for (long i = 0; i < len; ++i)
      if (out[i] != ranks_sum * (double)(i % 1000 + 1)) {
        bad_len = len;
        bad_index = i;
        break;
      }
  }
  long worst = bad_len;
  MPI_Allreduce(&bad_len, &worst, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    if (worst < 0)
      printf("allreduce: OK (%d ranks)\n", size);
    else
      printf("allreduce: MISMATCH at length %ld (rank 0 index %ld)\n", worst, bad_index);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return worst < 0 ? 0 : 1;
}
