/* A driver-API probe, the program in the test image (and in the real-GPU
 * check, tests/gpu/): dlopen libcuda.so.1 as CUDA programs do, call cuInit
 * and cuDeviceGetCount, print what answered and from which file.
 *
 * Against a real driver (the library exports cuDeviceGet, which the test
 * suite's fake does not) it then does real work on device 0 and prints a
 * second line: the driver version, the device's name and memory, a memset
 * on the device and a PTX kernel (JIT-compiled by the driver, so the
 * driver's PTX compiler must be visible too) that adds 1 to each of N
 * words; the result is copied back and checked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;

static void *lib;
/* SYM(name, pointer type): a local `name` bound to the driver's symbol. */
#define SYM(name, ...) __typeof__(__VA_ARGS__) name = (__typeof__(__VA_ARGS__))dlsym(lib, #name)

static const char PTX[] =
    ".version 7.5\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry inc(.param .u64 p, .param .u32 n)\n"
    "{\n"
    " .reg .pred %q;\n"
    " .reg .b32 %r<7>;\n"
    " .reg .b64 %d<4>;\n"
    " ld.param.u64 %d1, [p];\n"
    " ld.param.u32 %r1, [n];\n"
    " mov.u32 %r2, %ctaid.x;\n"
    " mov.u32 %r3, %ntid.x;\n"
    " mov.u32 %r4, %tid.x;\n"
    " mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    " setp.ge.u32 %q, %r5, %r1;\n"
    " @%q bra DONE;\n"
    " cvta.to.global.u64 %d2, %d1;\n"
    " mul.wide.u32 %d3, %r5, 4;\n"
    " add.s64 %d2, %d2, %d3;\n"
    " ld.global.u32 %r6, [%d2];\n"
    " add.u32 %r6, %r6, 1;\n"
    " st.global.u32 [%d2], %r6;\n"
    "DONE:\n"
    " ret;\n"
    "}\n";

#define CHECK(what, call)                                                       \
    do {                                                                        \
        CUresult r_ = (call);                                                   \
        if (r_ != 0) {                                                          \
            fprintf(stderr, "cuda-probe: %s failed: CUresult %d\n", what, r_); \
            return 4;                                                           \
        }                                                                       \
    } while (0)

/* Real work on device 0; only called when the driver exports it all. */
static int work(void) {
    SYM(cuDriverGetVersion, CUresult (*)(int *));
    SYM(cuDeviceGet, CUresult (*)(CUdevice *, int));
    SYM(cuDeviceGetName, CUresult (*)(char *, int, CUdevice));
    SYM(cuDeviceTotalMem_v2, CUresult (*)(size_t *, CUdevice));
    SYM(cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext *, CUdevice));
    SYM(cuCtxSetCurrent, CUresult (*)(CUcontext));
    SYM(cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t));
    SYM(cuMemsetD32_v2, CUresult (*)(CUdeviceptr, unsigned int, size_t));
    SYM(cuMemcpyDtoH_v2, CUresult (*)(void *, CUdeviceptr, size_t));
    SYM(cuModuleLoadData, CUresult (*)(CUmodule *, const void *));
    SYM(cuModuleGetFunction, CUresult (*)(CUfunction *, CUmodule, const char *));
    SYM(cuLaunchKernel, CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, unsigned, void *, void **, void **));
    SYM(cuCtxSynchronize, CUresult (*)(void));
    SYM(cuMemFree_v2, CUresult (*)(CUdeviceptr));
    if (!cuDriverGetVersion || !cuDeviceGetName || !cuDeviceTotalMem_v2 ||
        !cuDevicePrimaryCtxRetain || !cuCtxSetCurrent || !cuMemAlloc_v2 ||
        !cuMemsetD32_v2 || !cuMemcpyDtoH_v2 || !cuModuleLoadData ||
        !cuModuleGetFunction || !cuLaunchKernel || !cuCtxSynchronize || !cuMemFree_v2) {
        fprintf(stderr, "cuda-probe: libcuda lacks a driver-API call it should have\n");
        return 3;
    }
    int version = 0;
    CUdevice dev;
    char name[128] = "";
    size_t mem = 0;
    CUcontext ctx;
    CHECK("cuDriverGetVersion", cuDriverGetVersion(&version));
    CHECK("cuDeviceGet", cuDeviceGet(&dev, 0));
    CHECK("cuDeviceGetName", cuDeviceGetName(name, sizeof name, dev));
    CHECK("cuDeviceTotalMem", cuDeviceTotalMem_v2(&mem, dev));
    CHECK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK("cuCtxSetCurrent", cuCtxSetCurrent(ctx));

    enum { N = 1 << 20 };
    CUdeviceptr buf;
    CHECK("cuMemAlloc", cuMemAlloc_v2(&buf, N * 4));
    CHECK("cuMemsetD32", cuMemsetD32_v2(buf, 41, N));
    CUmodule mod;
    CUfunction inc;
    CHECK("cuModuleLoadData (PTX JIT)", cuModuleLoadData(&mod, PTX));
    CHECK("cuModuleGetFunction", cuModuleGetFunction(&inc, mod, "inc"));
    unsigned int n = N;
    void *args[] = {&buf, &n};
    CHECK("cuLaunchKernel", cuLaunchKernel(inc, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK("cuCtxSynchronize", cuCtxSynchronize());
    unsigned int *host = malloc(N * 4);
    if (!host) return 5;
    CHECK("cuMemcpyDtoH", cuMemcpyDtoH_v2(host, buf, N * 4));
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) bad += host[i] != 42;
    free(host);
    CHECK("cuMemFree", cuMemFree_v2(buf));
    printf("driver=%d.%d device0=\"%s\" memory=%zu MiB kernel=%s (%d words, %zu wrong)\n",
           version / 1000, version % 1000 / 10, name, mem >> 20, bad ? "WRONG" : "ok",
           (int)N, bad);
    return bad ? 1 : 0;
}

int main(void) {
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) { fprintf(stderr, "cuda-probe: dlopen libcuda.so.1: %s\n", dlerror()); return 2; }
    SYM(cuInit, CUresult (*)(unsigned int));
    SYM(cuDeviceGetCount, CUresult (*)(int *));
    if (!cuInit || !cuDeviceGetCount) {
        fprintf(stderr, "cuda-probe: libcuda lacks cuInit/cuDeviceGetCount\n");
        return 3;
    }
    int n = -1;
    int r1 = cuInit(0);
    int r2 = cuDeviceGetCount(&n);
    Dl_info info;
    const char *from =
        dladdr((void *)cuDeviceGetCount, &info) && info.dli_fname ? info.dli_fname : "?";
    printf("cuInit=%d cuDeviceGetCount=%d devices=%d libcuda=%s\n", r1, r2, n, from);
    fflush(stdout);
    if (r1 != 0 || r2 != 0) return 1;
    if (n > 0 && dlsym(lib, "cuDeviceGet")) return work();
    return 0;
}
