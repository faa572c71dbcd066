/* A driver-API probe, the program in the test image (and the GPU check
 * script's): dlopen libcuda.so.1 as CUDA programs do, call cuInit and
 * cuDeviceGetCount, print what answered and from which file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "cuda-probe: dlopen libcuda.so.1: %s\n", dlerror()); return 2; }
    int (*init)(unsigned int) = (int (*)(unsigned int))dlsym(h, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    if (!init || !count) { fprintf(stderr, "cuda-probe: libcuda lacks cuInit/cuDeviceGetCount\n"); return 3; }
    int n = -1;
    int r1 = init(0);
    int r2 = count(&n);
    Dl_info info;
    const char *from = dladdr((void *)count, &info) && info.dli_fname ? info.dli_fname : "?";
    printf("cuInit=%d cuDeviceGetCount=%d devices=%d libcuda=%s\n", r1, r2, n, from);
    return (r1 == 0 && r2 == 0) ? 0 : 1;
}
