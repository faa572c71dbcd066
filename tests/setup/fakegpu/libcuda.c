/* A stand-in for the NVIDIA driver's libcuda.so.1, for tests on machines
 * without a GPU (built by tests/setup/fake_gpu.sh; named as a fake). It
 * exports the two driver-API calls the probe uses. cuDeviceGetCount counts
 * the /dev/nvidiaN nodes this process can open, so a container shows
 * exactly the GPUs it was given. */
#include <fcntl.h>
#include <glob.h>
#include <unistd.h>

int cuInit(unsigned int flags) { (void)flags; return 0; }

int cuDeviceGetCount(int *count) {
    glob_t g;
    int n = 0;
    if (glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            int fd = open(g.gl_pathv[i], O_RDWR | O_CLOEXEC);
            if (fd >= 0) { n++; close(fd); }
        }
        globfree(&g);
    }
    *count = n;
    return 0;
}
