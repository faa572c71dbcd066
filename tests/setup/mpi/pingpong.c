/* OSU-style ping-pong between ranks 0 and 1: the one-way latency of an
 * 8-byte message and the bandwidth of 1 MiB messages, as medians over
 * batches (bench/mpi.sh runs it natively and in containers). Prints one
 * line: "latency_us L bandwidth_MBps B". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over `batches` of the one-way time of a `size`-byte message. */
static double one_way(int rank, char *buf, int size, int iters, int batches) {
    double *t = malloc(sizeof(double) * batches);
    for (int b = -1; b < batches; b++) {   /* batch -1 warms up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            if (rank == 0) {
                MPI_Send(buf, size, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, size, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, size, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, size, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
            }
        }
        if (b >= 0) t[b] = (MPI_Wtime() - t0) / iters / 2.0;
    }
    qsort(t, batches, sizeof(double), cmp);
    double m = t[batches / 2];
    free(t);
    return m;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "pingpong: run with exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    int big = 1 << 20;
    char *buf = malloc(big);
    memset(buf, 1, big);
    double lat = one_way(rank, buf, 8, iters, 9);
    double bw_t = one_way(rank, buf, big, iters / 20 + 1, 9);
    if (rank == 0)
        printf("latency_us %.3f bandwidth_MBps %.1f\n", lat * 1e6, big / bw_t / 1e6);
    free(buf);
    MPI_Finalize();
    return 0;
}
