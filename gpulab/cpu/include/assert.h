// Shadows the C library's assert.h (this folder comes first on the include
// path): a failed assert in a kernel must become a KernelLaunchError naming
// the block and thread, not abort the Python process.  Like the C library's,
// this header may be included many times and honours NDEBUG each time.
#undef assert
#ifdef NDEBUG
#define assert(expr) ((void)0)
#else
#define assert(expr) \
    ((expr) ? (void)0 : gpulab_assert_fail(#expr, __FILE__, __LINE__, __func__))
#endif
#ifndef GPULAB_ASSERT_DECLARED
#define GPULAB_ASSERT_DECLARED
extern "C" [[noreturn]] void gpulab_assert_fail(const char* expr, const char* file, int line, const char* func);
#endif
