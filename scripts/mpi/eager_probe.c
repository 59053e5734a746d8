/* How large a message MPI_Send returns from before the receiver posts its receive, on this host.
 * Rank 0 sends N bytes after three warm-up exchanges; rank 1 sleeps 1 s before MPI_Recv. A send
 * that took about a second waited for the receive (rendezvous); one that took ~0 s was buffered.
 *   mpicc.openmpi eager_probe.c -o p && mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 ./p 256
 *   mpicc.mpich eager_probe.c -o p && mpirun.mpich -np 2 ./p 8192
 * The figures behind the local backend's default eager limit (docs/mpi.md, "Eager limits"). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long n = argc > 1 ? atol(argv[1]) : 1024;
    char *buf = calloc(1, (size_t)n + 8);
    for (int w = 0; w < 3; w++) {
        if (rank == 0) {
            MPI_Send(buf, 8, MPI_CHAR, 1, 99, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_CHAR, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 8, MPI_CHAR, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 8, MPI_CHAR, 0, 99, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        double t = MPI_Wtime();
        MPI_Send(buf, (int)n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        printf("%ld bytes: MPI_Send returned after %.3f s (%s)\n", n, t, t > 0.5 ? "waited for the receive" : "buffered");
    } else {
        usleep(1000000);
        MPI_Recv(buf, (int)n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
