// CPU backend only (tests/test_cpu_safety.py): a kernel that waits without computing, as a
// thread blocked on a lock or a pipe would. It uses no CPU time, so the CPU-time limit never
// comes; the clock's backstop (WAIT_FACTOR times the limit) stops it.
#include <unistd.h>

extern "C" __global__ void wait_forever(float* x)
{
    for (;;) {
        x[0] += 1.0f;
        usleep(100000);
    }
}
