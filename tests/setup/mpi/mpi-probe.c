/* An MPI test program for the bind-model tests: every rank joins an
 * allreduce and prints the MPI library it runs on (the file the loader
 * mapped MPI_Init from), so a test can tell the image's MPI from the
 * host's injected one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0, one, sum = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    Dl_info info;
    const char *from = "?";
    void *sym = dlsym(RTLD_DEFAULT, "MPI_Init");
    if (sym && dladdr(sym, &info) && info.dli_fname) from = info.dli_fname;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, "\n")] = 0;
    printf("rank %d of %d sum %d libmpi %s version %.48s\n", rank, size, sum, from, version);
    MPI_Finalize();
    return 0;
}
