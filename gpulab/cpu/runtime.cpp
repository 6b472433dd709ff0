// The CPU backend's runtime: fibers, the per-OS-thread block scheduler,
// barriers, warp operations, bounds-checked buffers and the fault handler.
// It is compiled into every kernel module (included at the end of the
// generated source), so each module is one self-contained shared object.
// libstdc++ spells some attributes __noinline__, which the CUDA header has made a macro.
#pragma push_macro("__noinline__")
#undef __noinline__
// The runtime names the fields of ThreadView, which kernels see as macros.
#pragma push_macro("threadIdx")
#pragma push_macro("blockIdx")
#pragma push_macro("blockDim")
#pragma push_macro("gridDim")
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <atomic>
#include <new>
#ifdef GPULAB_INSTRUMENTED
#include <dlfcn.h>
#include <link.h>
#include <array>
#include <unordered_map>
#include <vector>
#endif
#if !defined(__x86_64__) || defined(GPULAB_USE_UCONTEXT)
#define GPULAB_UCONTEXT 1
#include <ucontext.h>
#endif
#pragma pop_macro("__noinline__")


namespace gpulab {

thread_local ThreadView* current_view;

namespace {

constexpr size_t kStackBytes = 128 * 1024;
constexpr size_t kCanaryMin = 256;
constexpr unsigned char kCanary = 0xA5;
constexpr int kMaxWorkers = 256;
// A thread-block cluster (kernels with __cluster_dims__) runs on one worker: the fibers of its
// blocks are scheduled together, since they wait on each other's mbarriers. 8 blocks is the
// portable cluster size limit; a block has at most 32 warps.
constexpr int kMaxCluster = 8;
constexpr int kMaxWarps = 32 * kMaxCluster;

// MBAR_WAIT: waiting for a phase of an mbarrier (kernels/common/hopper.h) to complete.
enum FiberState { READY, BLOCK_WAIT, WARP_WAIT, MBAR_WAIT, DONE, FAILED };
enum Schedule { IN_ORDER = 0, REVERSE = 1, SHUFFLE = 2 };

#ifndef GPULAB_UCONTEXT
// Saves the callee-saved registers and the floating-point control words on
// the current stack, stores the stack pointer in *save and continues on the
// stack 'load' (a frame saved by this function or made by new_frame).
extern "C" void gpulab_swap_context(void** save, void* load);
asm(R"(
    .text
    .p2align 4
    .globl gpulab_swap_context
    .hidden gpulab_swap_context
    .type gpulab_swap_context, @function
gpulab_swap_context:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size gpulab_swap_context, .-gpulab_swap_context
)");
#endif

struct Fiber {
    ThreadView view;
    int warp, lane;                // warp: numbered over the worker's fibers (the cluster's blocks)
    int rank;                      // the block's rank in its cluster (%cluster_ctarank), 0 without one
    unsigned cluster_token;        // the cluster barrier's phase this thread arrived in
    FiberState state;
    const char* wait_file;
    int wait_line;
    int barrier_predicate;
    WarpOp warp_op;
    const char* collective_name;  // the operation's name, for WARP_COLLECTIVE
    unsigned warp_mask;
    unsigned long long warp_value, warp_result;
    int warp_arg, warp_width;
    // MBAR_WAIT: the barrier and the test that releases the thread (see wait_until).
    const void* wait_object;
    unsigned wait_parity;
    bool (*wait_ready)(const void*, unsigned);
    char* stack_top;
#ifdef GPULAB_UCONTEXT
    ucontext_t context;
#else
    void* sp;
#endif
};

struct Guarded {
    void* original;
    size_t bytes, itemsize;
    const char* name;
    int writable;
    char* map;
    size_t map_bytes;
    char* data;
    char* back_guard;       // null without bounds checking (no guard pages, no canaries)
};

// What the launch's worker process shares with the Python process: its
// outcome, its error message, where it is (for the time limit's message) and
// the final bytes of the module's __device__ and __constant__ variables.
constexpr size_t kErrorBytes = 8192;
struct Shared {
    std::atomic<int> finished;          // the worker process got to the end
    int exit_code;
    std::atomic<long> blocks_done;
    int nworkers;
    long running_block[kMaxWorkers];    // linear block index, -1 between blocks
    int running_thread[kMaxWorkers];    // linear thread index of the running fiber
    int symbols_saved;
    long long run_cpu_ns;               // CPU time of the blocks' run, all worker threads
    char error[kErrorBytes];
    // the symbols' bytes follow
};

// A __shared__ array of one worker (the blocks it runs reuse it, as a block
// on a GPU finds whatever its SM's shared memory last held): a function's
// static array, by the number the compiler gave its declaration, or the
// launch's dynamic shared memory.  With bounds checking its copy is laid out
// like an argument's: the end against an inaccessible page, a canary region
// and another inaccessible page before the start.
constexpr int kMaxSharedArrays = 128;   // compiler.py's MAX_CHECKED_SHARED
constexpr int kDynamicShared = kMaxSharedArrays;
struct SharedArray {
    const void* key;           // which declaration (and instantiation, in a template)
    const char* name;
    const char* type;          // the element type as declared
    size_t bytes, itemsize, align;
    size_t extents[4];
    int rank;
    char* map;
    size_t map_bytes;
    char* data;
    char* back_guard;          // null without bounds checking
};

// A launch's printf output, in memory shared with the Python process, which
// prints it when the launch has ended (as a GPU prints its printf buffer at
// the next synchronisation).  Like a GPU's buffer (cudaLimitPrintfFifoSize,
// 1 MiB by default) it is circular: past its size, the latest output is kept.
constexpr size_t kPrintfBytes = 1 << 20;
struct Printed {
    std::atomic<unsigned long long> total;   // bytes printed in all
    char text[kPrintfBytes];
};

struct Launch;
struct Instr;

// One block's shared memory on a worker that runs a cluster: the worker's fields of the same
// names hold the running block's (select_rank switches them), this the others'.
struct RankState {
    char* dynamic_shared;
    SharedArray* shared_arrays;
    int* shared_in_use;
    int nshared_in_use;
};
struct Counts;
struct Shadow;

struct Worker {
    Launch* launch;
    int index;
    Instr* instr;                  // counters and race checking (instrumented builds)
    pthread_t thread;
    Fiber* fibers;
    int nthreads;
    char* stacks;
    size_t stacks_bytes;
    char* dynamic_shared;
    SharedArray* shared_arrays;    // kMaxSharedArrays static ones, then the dynamic one
    int* shared_in_use;            // kMaxSharedArrays + 1 of them
    int nshared_in_use;
    int* order;
    Fiber* running;
    int block_waiting, warp_waiting, done;
    int object_waiting;            // threads in MBAR_WAIT
    int barrier_result;
    unsigned long long rng;
    unsigned live_lanes[kMaxWarps];
    unsigned existing_lanes[kMaxWarps];
    // Clusters: nthreads = cluster_size * block_threads fibers, block r's from r * block_threads;
    // the shared memory fields above are block `rank`'s, ranks[] holds every block's.
    int cluster_size, block_threads, nwarps, rank;
    RankState ranks[kMaxCluster];
    int rank_waiting[kMaxCluster];         // threads of each block at __syncthreads()
    int rank_barrier_result[kMaxCluster];
    int cluster_arrived;                   // barrier.cluster: arrivals in the current phase
    unsigned cluster_phase;
    sigjmp_buf fault_jump;
    void* fault_address;
    int fault_signal, fault_is_write;
    char* alt_stack;
#ifdef GPULAB_UCONTEXT
    ucontext_t scheduler_context;
#else
    void* scheduler_sp;
    unsigned long long fp_control;
#endif
};

struct Launch {
    void (*thunk)(void**);
    void** args;
    const char* kernel;
    dim3 grid, block, cluster;
    int cluster_size;              // blocks per cluster (1: none)
    long nclusters;                // what the workers take in turn: clusters of blocks
    size_t shared_bytes;
    int schedule;
    unsigned long long seed;
    long nblocks;
    unsigned* block_order;
    std::atomic<long> next_block;
    std::atomic<int> failed;
    pthread_mutex_t error_lock;
    char* error;
    size_t error_size;
    Guarded* guarded;
    int nguarded;
    int bounds_checked;
    Shared* shared;
    int nsymbols;
    void* const* symbol_address;
    const size_t* symbol_bytes;
    const int* symbol_constant;
    Printed* printed;              // the kernel's printf output
    Counts* counts;                // null unless instrumented
    Shadow** global_shadow;        // per array argument, for race checking
};

thread_local Worker* current_worker;

#ifdef GPULAB_INSTRUMENTED
void instr_block_start(Worker* w);
void instr_flush(Worker* w);
void instr_barrier(Worker* w);
void instr_warp_sync(Worker* w, int warp);
void instr_merge(Worker* w);
Instr* instr_setup(Worker* w);
#else
inline void instr_block_start(Worker*) {}
inline void instr_flush(Worker*) {}
inline void instr_barrier(Worker*) {}
inline void instr_warp_sync(Worker*, int) {}
inline void instr_merge(Worker*) {}
#endif
#ifdef GPULAB_INSTRUMENTED
void instr_select_rank(Worker* w, int from, int to);
#else
inline void instr_select_rank(Worker*, int, int) {}
#endif

// Makes block `rank`'s shared memory the worker's current one (the running fiber's block).
void select_rank(Worker* w, int rank) {
    if (rank == w->rank) return;
    w->ranks[w->rank].nshared_in_use = w->nshared_in_use;
    const RankState& r = w->ranks[rank];
    w->dynamic_shared = r.dynamic_shared;
    w->shared_arrays = r.shared_arrays;
    w->shared_in_use = r.shared_in_use;
    w->nshared_in_use = r.nshared_in_use;
    instr_select_rank(w, w->rank, rank);
    w->rank = rank;
}

// The fault handler cannot touch thread_local storage safely on a thread that
// never used it, so it finds its worker by thread id in this table.
std::atomic<Worker*> worker_slots[kMaxWorkers];
pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;
int handler_users;
struct sigaction previous_segv, previous_bus, previous_fpe, previous_ill;

long floor_div(long a, long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

unsigned long long splitmix(unsigned long long& state) {
    unsigned long long z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void fail(Launch* L, const char* format, ...) {
    pthread_mutex_lock(&L->error_lock);
    if (!L->failed.load()) {
        va_list ap;
        va_start(ap, format);
        vsnprintf(L->error, L->error_size, format, ap);
        va_end(ap);
        L->failed.store(1);
    }
    pthread_mutex_unlock(&L->error_lock);
}

void resume(Worker* w, Fiber* f) {
    select_rank(w, f->rank);
    w->running = f;
    w->launch->shared->running_thread[w->index] = (int)(f - w->fibers);
    current_view = &f->view;
#ifdef GPULAB_UCONTEXT
    swapcontext(&w->scheduler_context, &f->context);
#else
    gpulab_swap_context(&w->scheduler_sp, f->sp);
#endif
    w->running = nullptr;
}

void yield_to_scheduler(Worker* w, Fiber* f) {
#ifdef GPULAB_UCONTEXT
    swapcontext(&f->context, &w->scheduler_context);
#else
    gpulab_swap_context(&f->sp, w->scheduler_sp);
#endif
}

void fiber_main() {
    Worker* w = current_worker;
    Fiber* f = w->running;
    w->launch->thunk(w->launch->args);
    f->state = DONE;
    w->done++;
    w->live_lanes[f->warp] &= ~(1u << f->lane);
    yield_to_scheduler(w, f);
    __builtin_unreachable();
}

void start_fiber(Worker* w, Fiber* f) {
#ifdef GPULAB_UCONTEXT
    getcontext(&f->context);
    f->context.uc_stack.ss_sp = f->stack_top - kStackBytes;
    f->context.uc_stack.ss_size = kStackBytes;
    f->context.uc_link = nullptr;
    makecontext(&f->context, fiber_main, 0);
#else
    unsigned long long* sp = reinterpret_cast<unsigned long long*>(f->stack_top);
    *--sp = 0;                                              // fiber_main's return address: never used
    *--sp = reinterpret_cast<unsigned long long>(&fiber_main);  // where the swap's 'ret' goes
    for (int i = 0; i < 6; ++i) *--sp = 0;                  // rbp rbx r12-r15
    *--sp = w->fp_control;
    f->sp = sp;
#endif
}

const char* warp_op_name(WarpOp op) {
    switch (op) {
        case SHFL_IDX: return "__shfl_sync";
        case SHFL_UP: return "__shfl_up_sync";
        case SHFL_DOWN: return "__shfl_down_sync";
        case SHFL_XOR: return "__shfl_xor_sync";
        case BALLOT: return "__ballot_sync";
        case ANY: return "__any_sync";
        case ALL: return "__all_sync";
        case SYNCWARP: return "__syncwarp";
        case WARP_COLLECTIVE: return "a warp-collective operation";
        default: return "__reduce_*_sync";
    }
}

int append(char* buffer, size_t size, int used, const char* format, ...) {
    if (used >= (int)size) return used;
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(buffer + used, size - used, format, ap);
    va_end(ap);
    return used + (n > 0 ? n : 0);
}

// The test a thread waiting at barrier.cluster waits on (cluster_wait, below).
bool cluster_phase_passed(const void* phase, unsigned token);

// Describes where the threads of a block that cannot go on are waiting,
// one line per distinct (state, barrier site), in thread order.
void report_stuck_block(Worker* w, const char* headline) {
    Launch* L = w->launch;
    char text[3000];
    const ThreadView& v0 = w->fibers[0].view;
    int used = append(text, sizeof text, 0, "kernel '%s', %sblock (%u,%u,%u): %s\n", L->kernel,
                      w->cluster_size > 1 ? "the cluster of " : "", v0.blockIdx.x, v0.blockIdx.y, v0.blockIdx.z,
                      headline);
    static thread_local bool listed[1024 * kMaxCluster];
    for (int i = 0; i < w->nthreads; ++i) listed[i] = false;
    int groups = 0;
    for (int i = 0; i < w->nthreads && groups < 8; ++i) {
        if (listed[i]) continue;
        Fiber& a = w->fibers[i];
        int count = 0, last = i;
        for (int j = i; j < w->nthreads; ++j) {
            Fiber& b = w->fibers[j];
            const bool same_warp_op = a.state != WARP_WAIT ||
                (a.warp_op == WARP_COLLECTIVE ? b.warp_op == WARP_COLLECTIVE
                                              : b.warp_op != WARP_COLLECTIVE && b.warp_mask == a.warp_mask);
            bool same = b.state == a.state && b.rank == a.rank &&
                        (a.state == DONE || (b.wait_line == a.wait_line && strcmp(b.wait_file, a.wait_file) == 0 &&
                                             same_warp_op));
            if (same) { listed[j] = true; ++count; last = j; }
        }
        ++groups;
        const uint3 t = a.view.threadIdx, u = w->fibers[last].view.threadIdx;
        if (w->cluster_size > 1) {       // which block of the cluster
            const uint3 b = a.view.blockIdx;
            used = append(text, sizeof text, used, "  block (%u,%u,%u):", b.x, b.y, b.z);
        }
        used = append(text, sizeof text, used, "  %d thread%s (threadIdx (%u,%u,%u)%s", count,
                      count == 1 ? "" : "s", t.x, t.y, t.z, count == 1 ? "" : " to ");
        if (count > 1) used = append(text, sizeof text, used, "(%u,%u,%u)", u.x, u.y, u.z);
        if (a.state == DONE)
            used = append(text, sizeof text, used, ") %s exited the kernel\n", count == 1 ? "has" : "have");
        else if (a.state == BLOCK_WAIT)
            used = append(text, sizeof text, used, ") wait%s at __syncthreads() at %s:%d\n",
                          count == 1 ? "s" : "", a.wait_file, a.wait_line);
        else if (a.state == MBAR_WAIT && a.wait_ready == cluster_phase_passed)
            used = append(text, sizeof text, used, ") wait%s at barrier.cluster (cluster_wait) for threads of "
                          "the cluster that can no longer arrive, at %s:%d\n", count == 1 ? "s" : "", a.wait_file,
                          a.wait_line);
        else if (a.state == MBAR_WAIT)
            used = append(text, sizeof text, used, ") wait%s for phase parity %u of the mbarrier at %p, "
                          "which no thread can complete any more, at %s:%d\n", count == 1 ? "s" : "",
                          a.wait_parity, a.wait_object, a.wait_file, a.wait_line);
        else if (a.warp_op == WARP_COLLECTIVE)
            used = append(text, sizeof text, used, ") wait%s at %s() at %s:%d\n",
                          count == 1 ? "s" : "", a.collective_name, a.wait_file, a.wait_line);
        else
            used = append(text, sizeof text, used, ") wait%s at %s(mask 0x%08x) at %s:%d\n",
                          count == 1 ? "s" : "", warp_op_name(a.warp_op), a.warp_mask, a.wait_file, a.wait_line);
    }
    append(text, sizeof text, used,
           "Every thread of a block must reach the same __syncthreads() (every lane named in a "
           "warp operation's mask must call it, and every lane of a warp that has not exited must "
           "make the same call of a warp-collective operation such as wmma::load_matrix_sync): a barrier "
           "inside a branch or after an early return that only some threads take hangs a GPU or gives "
           "undefined results.");
    fail(L, "%s", text);
}

// Releases block `rank`'s threads, all waiting at __syncthreads().
bool release_block_barrier(Worker* w, int rank) {
    const int from = rank * w->block_threads, to = from + w->block_threads;
    Fiber* first = &w->fibers[from];
    int count = 0;
    for (int i = from; i < to; ++i) {
        Fiber& f = w->fibers[i];
        if (f.wait_line != first->wait_line || strcmp(f.wait_file, first->wait_file) != 0) {
            report_stuck_block(w, "its threads wait at different __syncthreads() calls");
            return false;
        }
        count += f.barrier_predicate;
    }
    w->rank_barrier_result[rank] = count;
    select_rank(w, rank);
    instr_barrier(w);
    for (int i = from; i < to; ++i) w->fibers[i].state = READY;
    w->block_waiting -= w->block_threads;
    w->rank_waiting[rank] = 0;
    return true;
}

unsigned long long warp_result(const Fiber* lanes, unsigned group, int lane) {
    const Fiber& me = lanes[lane];
    int width = me.warp_width;
    if (width < 1 || width > 32 || (width & (width - 1))) width = 32;
    const int segment = lane & ~(width - 1), in_segment = lane & (width - 1);
    int source = lane;
    switch (me.warp_op) {
        case SHFL_IDX: source = segment + (me.warp_arg & (width - 1)); break;
        case SHFL_UP: source = in_segment - me.warp_arg < 0 ? lane : lane - me.warp_arg; break;
        case SHFL_DOWN: source = in_segment + me.warp_arg >= width ? lane : lane + me.warp_arg; break;
        case SHFL_XOR:
            source = lane ^ me.warp_arg;
            if (source < segment || source >= segment + width) source = lane;
            break;
        default: break;
    }
    if (me.warp_op <= SHFL_XOR)
        return (source >= 0 && source < 32 && (group >> source & 1u)) ? lanes[source].warp_value : me.warp_value;
    unsigned ballot = 0;
    unsigned long long sum = 0, all_and = ~0ull, any_or = 0, any_xor = 0;
    long long smin = LLONG_MAX, smax = LLONG_MIN;
    unsigned long long umin_ = ~0ull, umax_ = 0;
    for (int l = 0; l < 32; ++l) {
        if (!(group >> l & 1u)) continue;
        const unsigned long long v = lanes[l].warp_value;
        const long long s = (int)(unsigned)v;
        if (v) ballot |= 1u << l;
        sum += v; all_and &= v; any_or |= v; any_xor ^= v;
        if (s < smin) smin = s;
        if (s > smax) smax = s;
        if (v < umin_) umin_ = v;
        if (v > umax_) umax_ = v;
    }
    switch (me.warp_op) {
        case BALLOT: return ballot;
        case ANY: return ballot != 0;
        case ALL: return ballot == group;
        case REDUCE_ADD: return (unsigned)sum;
        case REDUCE_MIN: return (unsigned)(int)smin;
        case REDUCE_MAX: return (unsigned)(int)smax;
        case REDUCE_UMIN: return umin_;
        case REDUCE_UMAX: return umax_;
        case REDUCE_AND: return (unsigned)all_and;
        case REDUCE_OR: return (unsigned)any_or;
        case REDUCE_XOR: return (unsigned)any_xor;
        default: return 0;
    }
}

bool same_collective(const Fiber& a, const Fiber& b) {
    return b.state == WARP_WAIT && b.warp_op == WARP_COLLECTIVE && b.warp_arg == a.warp_arg &&
           b.wait_line == a.wait_line && strcmp(b.wait_file, a.wait_file) == 0 &&
           strcmp(b.collective_name, a.collective_name) == 0;
}

// Releases every group of lanes whose mask's lanes have all arrived at a
// warp operation with that same mask.  Results are computed here, at release,
// so a lane that runs ahead into its next shuffle cannot overwrite a value
// another lane has yet to read.  A warp-collective operation's group is every
// lane of the warp that has not exited, as it is at release, all at the same call.
bool release_warps(Worker* w) {
    bool released = false;
    for (int i = 0; i < w->nthreads && w->warp_waiting; ++i) {
        Fiber& f = w->fibers[i];
        if (f.state != WARP_WAIT) continue;
        Fiber* lanes = &w->fibers[f.warp * 32];
        const bool collective = f.warp_op == WARP_COLLECTIVE;
        const unsigned group = collective ? w->live_lanes[f.warp] : f.warp_mask;
        bool complete = true;
        for (int l = 0; l < 32 && complete; ++l)
            if (group >> l & 1u)
                complete = collective ? same_collective(f, lanes[l])
                                      : lanes[l].state == WARP_WAIT && lanes[l].warp_op != WARP_COLLECTIVE &&
                                        lanes[l].warp_mask == group;
        if (!complete) continue;
        for (int l = 0; l < 32 && !collective; ++l)
            if (group >> l & 1u) lanes[l].warp_result = warp_result(lanes, group, l);
        for (int l = 0; l < 32; ++l)
            if (group >> l & 1u) { lanes[l].state = READY; --w->warp_waiting; }
        instr_warp_sync(w, f.warp);
        released = true;
    }
    return released;
}

// The blockIdx of block `rank` of cluster `cluster` (clusters tile the grid, x fastest; ranks
// number a cluster's blocks x fastest, as %cluster_ctarank does). Without clusters, block `cluster`.
uint3 block_of(const Launch* L, long cluster, int rank) {
    const dim3 c = L->cluster;
    const long gx = L->grid.x / c.x, gy = L->grid.y / c.y;
    return {(unsigned)(cluster % gx * c.x + rank % c.x), (unsigned)(cluster / gx % gy * c.y + rank / c.x % c.y),
            (unsigned)(cluster / (gx * gy) * c.z + rank / (c.x * c.y))};
}

long linear_block(const Launch* L, uint3 b) {
    return b.x + (long)L->grid.x * (b.y + (long)L->grid.y * b.z);
}

void prepare_block(Worker* w, long cluster) {
    Launch* L = w->launch;
    for (int i = 0; i < w->nthreads; ++i) {
        Fiber& f = w->fibers[i];
        f.view.blockIdx = block_of(L, cluster, f.rank);
        f.state = READY;
        start_fiber(w, &f);
    }
    const long block = linear_block(L, block_of(L, cluster, 0));
    for (int i = 0; i < w->nwarps; ++i) w->live_lanes[i] = w->existing_lanes[i];
    w->block_waiting = w->warp_waiting = w->object_waiting = w->done = 0;
    for (int r = 0; r < w->cluster_size; ++r) w->rank_waiting[r] = 0;
    w->cluster_arrived = 0;
    instr_block_start(w);
    unsigned long long state = L->seed ^ (0xD1B54A32D192ED03ull * (unsigned long long)(block + 1));
    w->rng = splitmix(state);
}

bool run_block_steps(Worker* w);
bool check_shared_canaries(Worker* w, long block);

// Runs one block, or the blocks of cluster number `cluster` together.
bool run_block(Worker* w, long cluster) {
    Launch* L = w->launch;
    L->shared->running_block[w->index] = linear_block(L, block_of(L, cluster, 0));
    prepare_block(w, cluster);
    bool ok = run_block_steps(w);
    for (int r = 0; ok && L->bounds_checked && r < w->cluster_size; ++r) {
        select_rank(w, r);
        ok = check_shared_canaries(w, linear_block(L, block_of(L, cluster, r)));
    }
    if (ok) instr_flush(w);
    L->shared->running_block[w->index] = -1;
    if (ok) L->shared->blocks_done.fetch_add(w->cluster_size, std::memory_order_relaxed);
    return ok;
}

// Makes READY every thread whose awaited mbarrier phase has completed.
bool release_object_waits(Worker* w) {
    bool released = false;
    for (int i = 0; i < w->nthreads && w->object_waiting; ++i) {
        Fiber& f = w->fibers[i];
        if (f.state == MBAR_WAIT && f.wait_ready(f.wait_object, f.wait_parity)) {
            f.state = READY;
            --w->object_waiting;
            released = true;
        }
    }
    return released;
}

bool run_block_steps(Worker* w) {
    Launch* L = w->launch;
    const int n = w->nthreads;
    for (;;) {
        int ready = 0;
        if (L->schedule == REVERSE) {
            for (int i = n - 1; i >= 0; --i) if (w->fibers[i].state == READY) w->order[ready++] = i;
        } else {
            for (int i = 0; i < n; ++i) if (w->fibers[i].state == READY) w->order[ready++] = i;
        }
        if (L->schedule == SHUFFLE) {
            for (int i = ready - 1; i > 0; --i) {
                const int j = (int)(splitmix(w->rng) % (unsigned long long)(i + 1));
                const int t = w->order[i]; w->order[i] = w->order[j]; w->order[j] = t;
            }
        }
        for (int k = 0; k < ready; ++k) {
            resume(w, &w->fibers[w->order[k]]);
            if (L->failed.load(std::memory_order_relaxed)) return false;
        }
        if (w->warp_waiting && release_warps(w)) continue;
        if (w->object_waiting && release_object_waits(w)) continue;
        if (ready) continue;
        if (w->done == n) return true;
        bool released = false;
        for (int r = 0; r < w->cluster_size && w->block_waiting; ++r)
            if (w->rank_waiting[r] == w->block_threads) {
                if (!release_block_barrier(w, r)) return false;
                released = true;
            }
        if (released) continue;
        report_stuck_block(w, w->object_waiting
            ? "its threads can never all go on: some wait for an mbarrier phase that the others can no longer complete"
            : w->warp_waiting
            ? "its threads can never all meet: some wait at a warp operation for lanes that are elsewhere"
            : "some of its threads wait at __syncthreads() while others have exited, so the barrier never opens");
        return false;
    }
}

// ------------------------------------------------------------ shared memory

// A guard page: any access faults (SIGSEGV), which the fault handler names by its
// address. Linux 6.13+ installs guard markers in the page table (MADV_GUARD_INSTALL)
// without splitting the mapping: a block of 256 threads' stacks stays one mapping
// instead of 512, which made mprotect and munmap a third of a small launch's cost.
// Older kernels answer EINVAL and get the PROT_NONE page. Private anonymous maps only.
#if defined(__linux__) && !defined(MADV_GUARD_INSTALL)
#define MADV_GUARD_INSTALL 102      // Linux's number (uapi/asm-generic/mman-common.h), not another system's
#endif
void guard_page(void* address, size_t bytes) {
#ifdef MADV_GUARD_INSTALL
    static std::atomic<int> markers{1};
    if (markers.load(std::memory_order_relaxed) && madvise(address, bytes, MADV_GUARD_INSTALL) == 0) return;
    markers.store(0, std::memory_order_relaxed);
#endif
    mprotect(address, bytes, PROT_NONE);
}

// Maps a's copy (a.bytes, a.align set): guarded when 'checked', zero-filled.
bool map_shared_array(SharedArray& a, bool checked) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t align = a.align < 16 ? 16 : a.align > page ? page : a.align;
    // The start stays aligned (16 bytes at least, for vector loads), so up to
    // align - 1 bytes of slack after the end are only canary-checked.
    const size_t data_bytes = (a.bytes + align - 1) / align * align;
    const size_t body = checked ? (data_bytes + kCanaryMin + page - 1) / page * page
                                : (data_bytes + page - 1) / page * page;
    a.map_bytes = checked ? body + 2 * page : (body ? body : page);
    void* map = mmap(nullptr, a.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) { a.map = nullptr; return false; }
    a.map = static_cast<char*>(map);
    if (checked) {
        a.back_guard = a.map + page + body;
        a.data = a.back_guard - data_bytes;
        guard_page(a.map, page);
        guard_page(a.back_guard, page);
        memset(a.map + page, kCanary, body - data_bytes);
        memset(a.data + a.bytes, kCanary, data_bytes - a.bytes);
    } else {
        a.back_guard = nullptr;
        a.data = a.map;
    }
    return true;
}

// The first byte in [from, to) that is not the canary, or null.
const char* not_canary(const char* from, const char* to) {
    constexpr unsigned long long word = 0x0101010101010101ull * kCanary;
    const char* p = from;
    for (; p < to && (reinterpret_cast<uintptr_t>(p) & 7); ++p)
        if ((unsigned char)*p != kCanary) return p;
    for (; p + 8 <= to; p += 8)
        if (*reinterpret_cast<const unsigned long long*>(p) != word) break;
    for (; p < to; ++p)
        if ((unsigned char)*p != kCanary) return p;
    return nullptr;
}

// "name[i][j]" for element 'index' of a (row-major for a multidimensional
// array, whose first index may run past its extent), "name[index]" otherwise.
void shared_element(char* out, size_t size, const SharedArray& a, long index) {
    if (a.rank < 2 || index < 0) {
        snprintf(out, size, "%s[%ld]", a.name, index);
        return;
    }
    long digit[4];
    long rest = index;
    for (int d = a.rank - 1; d > 0; --d) {
        digit[d] = rest % (long)a.extents[d];
        rest /= (long)a.extents[d];
    }
    digit[0] = rest;
    int used = snprintf(out, size, "%s", a.name);
    for (int d = 0; d < a.rank && used < (int)size; ++d)
        used += snprintf(out + used, size - used, "[%ld]", digit[d]);
}

// What the array is, for messages: its kind and name ("__shared__ array
// 'tile'") and its declaration and size ("float tile[32][33]: 1056 elements,
// valid flat indices 0..1055").
void shared_description(char* kind, size_t kind_size, char* detail, size_t size, const SharedArray& a,
                        bool dynamic) {
    const long elements = (long)(a.bytes / a.itemsize);
    int used;
    if (dynamic) {
        snprintf(kind, kind_size, "dynamic shared memory '%s'", a.name);
        used = snprintf(detail, size, "extern __shared__ %s %s[]: the launch gave %zu bytes (its shared_mem), ",
                        a.type, a.name, a.bytes);
    } else {
        snprintf(kind, kind_size, "__shared__ array '%s'", a.name);
        used = snprintf(detail, size, "%s %s", a.type, a.name);
        for (int d = 0; d < a.rank && used < (int)size; ++d)
            used += snprintf(detail + used, size - used, "[%zu]", a.extents[d]);
        used += snprintf(detail + used, size - used, ": ");
    }
    if (used < (int)size) {
        if (elements == 0)
            snprintf(detail + used, size - used, "no elements");
        else
            snprintf(detail + used, size - used, "%ld element%s, valid %sindices 0..%ld", elements,
                     elements == 1 ? "" : "s", a.rank >= 2 ? "flat " : "", elements - 1);
    }
}

// Writes before the start or into the slack after the end of the worker's
// shared arrays, checked when a block ends: false (the launch failed) if any.
bool check_shared_canaries(Worker* w, long block) {
    Launch* L = w->launch;
    const long page = sysconf(_SC_PAGESIZE);
    for (int k = 0; k < w->nshared_in_use; ++k) {
        const int id = w->shared_in_use[k];
        const SharedArray& a = w->shared_arrays[id];
        if (!a.back_guard) continue;
        const char* before = not_canary(a.map + page, a.data);
        const char* after = not_canary(a.data + a.bytes, a.back_guard);
        if (!before && !after) continue;
        if (before)  // the written byte nearest the start names the element
            for (const char* p = a.data - 1; p >= a.map + page; --p)
                if ((unsigned char)*p != kCanary) { before = p; break; }
        const char* at = before ? before : after;
        char element[96], kind[160], detail[320];
        shared_element(element, sizeof element, a, floor_div((long)(at - a.data), (long)a.itemsize));
        shared_description(kind, sizeof kind, detail, sizeof detail, a, id == kDynamicShared);
        const unsigned bx = (unsigned)(block % L->grid.x), by = (unsigned)(block / L->grid.x % L->grid.y),
                       bz = (unsigned)(block / ((long)L->grid.x * L->grid.y));
        fail(L, "kernel '%s', block (%u,%u,%u): out-of-bounds write %s of %s: element %s was written "
                "(%s; found when the block ended, so the thread is unknown)", L->kernel, bx, by, bz,
             before ? "before the start" : "past the end", kind, element, detail);
        return false;
    }
    return true;
}

// A fault at 'address' in one of the worker's shared arrays' guard pages:
// the array, and whether before its start or past its end; null if none.
const SharedArray* find_shared(Worker* w, const char* address, const char** where, bool* dynamic) {
    const long page = sysconf(_SC_PAGESIZE);
    for (int k = 0; k < w->nshared_in_use; ++k) {
        const int id = w->shared_in_use[k];
        const SharedArray& a = w->shared_arrays[id];
        if (!a.back_guard) continue;
        *dynamic = id == kDynamicShared;
        if (address >= a.back_guard && address < a.back_guard + page) { *where = "past the end"; return &a; }
        if (address >= a.map && address < a.map + page) { *where = "before the start"; return &a; }
    }
    return nullptr;
}

// ------------------------------------------------------------ fault handling

const Guarded* find_guarded(Launch* L, const char* address, const char** where) {
    const long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < L->nguarded; ++i) {
        const Guarded& g = L->guarded[i];
        if (!g.back_guard) {
            if (address >= g.data && address < g.data + g.bytes) { *where = "inside"; return &g; }
            continue;
        }
        if (address >= g.back_guard && address < g.back_guard + page) { *where = "past the end"; return &g; }
        if (address >= g.map && address < g.data) { *where = "before the start"; return &g; }
        if (address >= g.data && address < g.back_guard) { *where = "inside"; return &g; }
    }
    return nullptr;
}

void report_fault(Worker* w) {
    Launch* L = w->launch;
    Fiber* f = w->running;
    const uint3 b = f->view.blockIdx, t = f->view.threadIdx;
    const char* address = static_cast<const char*>(w->fault_address);
    const char* access = w->fault_is_write == 1 ? "write" : w->fault_is_write == 0 ? "read" : "access";
    char head[256];
    snprintf(head, sizeof head, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u)", L->kernel,
             b.x, b.y, b.z, t.x, t.y, t.z);
    if (w->fault_signal == SIGILL) {
        fail(L, "%s: illegal instruction (SIGILL). g++ compiles code whose behaviour it can prove undefined, "
                "such as an integer division by a zero it can see at compile time, into an illegal "
                "instruction (a GPU computes an unspecified value there instead); a jump through a corrupted "
                "pointer or return address can land on one too", head);
        return;
    }
    if (w->fault_signal == SIGFPE) {
        fail(L, "%s: integer division by zero (or overflow) - a GPU returns an unspecified value "
                "here without any error, so this is a bug in the kernel", head);
        return;
    }
    const char* where = nullptr;
    if (const Guarded* g = find_guarded(L, address, &where)) {
        const long index = floor_div((long)(address - g->data), (long)g->itemsize);
        const long elements = (long)(g->bytes / g->itemsize);
        fail(L, "%s: out-of-bounds %s of argument '%s' at element %s[%ld], %s of the array "
                "(it has %ld element%s, valid indices 0..%ld)", head, access, g->name, g->name, index,
             where, elements, elements == 1 ? "" : "s", elements - 1);
        return;
    }
    bool dynamic = false;
    if (const SharedArray* a = find_shared(w, address, &where, &dynamic)) {
        char element[96], kind[160], detail[320];
        shared_element(element, sizeof element, *a, floor_div((long)(address - a->data), (long)a->itemsize));
        shared_description(kind, sizeof kind, detail, sizeof detail, *a, dynamic);
        fail(L, "%s: out-of-bounds %s of %s at element %s, %s of the array (%s)", head, access, kind, element,
             where, detail);
        return;
    }
    for (int i = 0; i < w->nthreads; ++i) {
        const char* stack_bottom = w->fibers[i].stack_top - kStackBytes;
        if (address < stack_bottom && address >= stack_bottom - sysconf(_SC_PAGESIZE)) {
            fail(L, "%s: stack overflow - the thread's local variables need more than the %zu KiB of "
                    "stack the CPU backend gives each thread", head, kStackBytes / 1024);
            return;
        }
    }
    fail(L, "%s: invalid memory %s at address %p, which is not inside any argument array or shared array "
            "(an uninitialised, null or out-of-range pointer)%s", head, access, w->fault_address,
         L->bounds_checked ? "" : "; run with bounds checking on (gpulab.cpu.checking(bounds=True), the default) "
                                  "to name the array and index");
}

Worker* worker_of_this_thread() {
    const pthread_t self = pthread_self();
    for (int i = 0; i < kMaxWorkers; ++i) {
        Worker* w = worker_slots[i].load(std::memory_order_acquire);
        if (w && pthread_equal(w->thread, self)) return w;
    }
    return nullptr;
}

void chain_signal(int sig, siginfo_t* info, void* context) {
    const struct sigaction& previous = sig == SIGSEGV ? previous_segv : sig == SIGBUS ? previous_bus
                                     : sig == SIGILL ? previous_ill : previous_fpe;
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
    } else {
        // Returning re-executes the faulting instruction, which now gets the default action.
        signal(sig, SIG_DFL);
    }
}

void on_fault(int sig, siginfo_t* info, void* context) {
    Worker* w = worker_of_this_thread();
    if (!w || !w->running) {
        chain_signal(sig, info, context);
        return;
    }
    w->fault_signal = sig;
    w->fault_address = info->si_addr;
#if defined(__x86_64__) && defined(REG_ERR)
    w->fault_is_write = (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#else
    w->fault_is_write = -1;
#endif
    siglongjmp(w->fault_jump, 1);
}

void install_fault_handler() {
    pthread_mutex_lock(&handler_lock);
    if (handler_users++ == 0) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = on_fault;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        sigaction(SIGSEGV, &action, &previous_segv);
        sigaction(SIGBUS, &action, &previous_bus);
        sigaction(SIGFPE, &action, &previous_fpe);
        sigaction(SIGILL, &action, &previous_ill);
    }
    pthread_mutex_unlock(&handler_lock);
}

void remove_fault_handler() {
    pthread_mutex_lock(&handler_lock);
    if (--handler_users == 0) {
        sigaction(SIGSEGV, &previous_segv, nullptr);
        sigaction(SIGBUS, &previous_bus, nullptr);
        sigaction(SIGFPE, &previous_fpe, nullptr);
        sigaction(SIGILL, &previous_ill, nullptr);
    }
    pthread_mutex_unlock(&handler_lock);
}

// ------------------------------------------------------------------ workers

bool setup_worker(Worker* w) {
    Launch* L = w->launch;
    const long page = sysconf(_SC_PAGESIZE);
    const int n = w->nthreads;
    const size_t slot = kStackBytes + page;  // a PROT_NONE page under each stack catches overflows
    w->stacks_bytes = slot * n;
    void* stacks = mmap(nullptr, w->stacks_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    w->fibers = static_cast<Fiber*>(calloc(n, sizeof(Fiber)));
    w->order = static_cast<int*>(calloc(n, sizeof(int)));
    bool dynamic_ok = true;
    for (int r = 0; r < w->cluster_size; ++r) {   // each block of a cluster has its own shared memory
        RankState& state = w->ranks[r];
        state.shared_arrays = static_cast<SharedArray*>(calloc(kMaxSharedArrays + 1, sizeof(SharedArray)));
        state.shared_in_use = static_cast<int*>(calloc(kMaxSharedArrays + 1, sizeof(int)));
        if (!state.shared_arrays || !state.shared_in_use) { dynamic_ok = false; continue; }
        SharedArray& d = state.shared_arrays[kDynamicShared];
        d.name = "extern __shared__";   // until a thread declares it
        d.type = "";
        d.bytes = L->shared_bytes;
        d.itemsize = d.align = 1;
        if (map_shared_array(d, L->bounds_checked)) {
            state.dynamic_shared = d.data;
            state.shared_in_use[state.nshared_in_use++] = kDynamicShared;
            // Uninitialised shared memory reads as NaN (floats) or 0xff.. (ints), as a hint.
            memset(state.dynamic_shared, 0xff, L->shared_bytes);
        } else {
            dynamic_ok = false;
        }
    }
    w->rank = 0;
    w->dynamic_shared = w->ranks[0].dynamic_shared;
    w->shared_arrays = w->ranks[0].shared_arrays;
    w->shared_in_use = w->ranks[0].shared_in_use;
    w->nshared_in_use = w->ranks[0].nshared_in_use;
    if (stacks == MAP_FAILED || !w->fibers || !w->order || !dynamic_ok) {
        if (stacks != MAP_FAILED) munmap(stacks, w->stacks_bytes);
        w->stacks = nullptr;
        fail(L, "kernel '%s': out of memory setting up the CPU backend's threads", L->kernel);
        return false;
    }
    w->stacks = static_cast<char*>(stacks);
    const unsigned bx = L->block.x, by = L->block.y;
    const int bt = w->block_threads, warps_per_block = (bt + 31) / 32;
    memset(w->existing_lanes, 0, sizeof w->existing_lanes);
    for (int i = 0; i < n; ++i) {
        Fiber& f = w->fibers[i];
        guard_page(w->stacks + slot * i, page);
        f.stack_top = w->stacks + slot * (i + 1);
        const unsigned t = (unsigned)(i % bt);      // the thread in its block
        f.rank = i / bt;
        f.warp = f.rank * warps_per_block + (int)t / 32;
        f.lane = (int)t % 32;
        f.view.threadIdx = {t % bx, t / bx % by, t / (bx * by)};
        f.view.blockDim = L->block;
        f.view.gridDim = L->grid;
        w->existing_lanes[f.warp] |= 1u << f.lane;
    }
#ifndef GPULAB_UCONTEXT
    unsigned int mxcsr = __builtin_ia32_stmxcsr();
    unsigned short fpcw;
    asm volatile("fnstcw %0" : "=m"(fpcw));
    w->fp_control = mxcsr | ((unsigned long long)fpcw << 32);
#endif
    return true;
}

void teardown_worker(Worker* w) {
    if (w->stacks) munmap(w->stacks, w->stacks_bytes);
    free(w->fibers);
    free(w->order);
    w->ranks[w->rank].nshared_in_use = w->nshared_in_use;
    for (int r = 0; r < w->cluster_size; ++r) {
        RankState& state = w->ranks[r];
        for (int k = 0; k < state.nshared_in_use && state.shared_arrays; ++k) {
            const SharedArray& a = state.shared_arrays[state.shared_in_use[k]];
            if (a.map) munmap(a.map, a.map_bytes);
        }
        free(state.shared_arrays);
        free(state.shared_in_use);
    }
}

void* worker_main(void* arg) {
    Worker* w = static_cast<Worker*>(arg);
    Launch* L = w->launch;
    current_worker = w;
    w->thread = pthread_self();
    int slot = -1;
    for (int i = 0; i < kMaxWorkers && slot < 0; ++i) {
        Worker* expected = nullptr;
        if (worker_slots[i].compare_exchange_strong(expected, w)) slot = i;
    }
    constexpr size_t alt_bytes = 64 * 1024;
    w->alt_stack = static_cast<char*>(malloc(alt_bytes));
    stack_t alt = {};
    alt.ss_sp = w->alt_stack;
    alt.ss_size = alt_bytes;
    sigaltstack(&alt, nullptr);

    if (setup_worker(w)) {
#ifdef GPULAB_INSTRUMENTED
        if (L->counts) w->instr = instr_setup(w);
#endif
        if (sigsetjmp(w->fault_jump, 1)) {
            report_fault(w);
        } else {
            while (!L->failed.load(std::memory_order_relaxed)) {
                const long k = L->next_block.fetch_add(1);
                if (k >= L->nclusters) break;
                const long cluster = L->schedule == REVERSE ? L->nclusters - 1 - k
                                   : L->schedule == SHUFFLE ? (long)L->block_order[k] : k;
                if (!run_block(w, cluster)) break;
            }
        }
    }
    w->running = nullptr;
    instr_merge(w);
    alt.ss_flags = SS_DISABLE;
    sigaltstack(&alt, nullptr);
    if (slot >= 0) worker_slots[slot].store(nullptr);
    teardown_worker(w);
    free(w->alt_stack);
    current_worker = nullptr;
    return nullptr;
}

#ifdef GPULAB_INSTRUMENTED
}  // namespace
}  // namespace gpulab
#include "instrument.cpp"
namespace gpulab {
namespace {
#endif

// ------------------------------------------------------------ argument copies

// Every array argument is copied into memory shared with the launch's worker
// process (MAP_SHARED), which runs the kernel on the copies; the Python
// process copies the results back after the worker has exited, so nothing a
// kernel does can touch the Python process's own memory.  With bounds
// checking, each copy ends flush against an inaccessible page and starts
// after a canary region and another inaccessible page.
bool guard_arguments(Launch* L, void** substituted, void** pointer_values, const int* arg_index) {
    const long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < L->nguarded; ++i) {
        Guarded& g = L->guarded[i];
        // An array passed twice (in-place kernels) must stay one buffer.
        Guarded* twin = nullptr;
        for (int j = 0; j < i && !twin; ++j)
            if (L->guarded[j].original == g.original && L->guarded[j].bytes == g.bytes) twin = &L->guarded[j];
        if (twin) {
            twin->writable |= g.writable;
            g.map = nullptr;
            g.data = twin->data;
            g.back_guard = twin->back_guard;
        } else {
            // Data end flush against a PROT_NONE page catches reads and writes
            // past the end; the start stays 16-byte aligned for vector loads, so
            // up to 15 bytes of slack after the end are only canary-checked.
            const size_t data_bytes = (g.bytes + 15) / 16 * 16;
            const size_t body = L->bounds_checked ? (data_bytes + kCanaryMin + page - 1) / page * page
                                                  : (data_bytes + page - 1) / page * page;
            g.map_bytes = L->bounds_checked ? body + 2 * page : (body ? body : page);
            void* map = mmap(nullptr, g.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            if (map == MAP_FAILED) {
                g.map = nullptr;
                fail(L, "kernel '%s': out of memory for the CPU backend's copy of '%s' (%zu bytes)", L->kernel,
                     g.name, g.bytes);
                return false;
            }
            g.map = static_cast<char*>(map);
            if (L->bounds_checked) {
                g.back_guard = g.map + page + body;
                g.data = g.back_guard - data_bytes;
                mprotect(g.map, page, PROT_NONE);
                mprotect(g.back_guard, page, PROT_NONE);
                memset(g.map + page, kCanary, body - data_bytes);
                memset(g.data + g.bytes, kCanary, data_bytes - g.bytes);
            } else {
                g.back_guard = nullptr;
                g.data = g.map;
            }
            memcpy(g.data, g.original, g.bytes);
        }
        pointer_values[arg_index[i]] = g.data;
        substituted[arg_index[i]] = &pointer_values[arg_index[i]];
    }
    return true;
}

void check_canaries_and_copy_back(Launch* L) {
    const long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < L->nguarded; ++i) {
        Guarded& g = L->guarded[i];
        if (!g.map) continue;
        if (g.back_guard) {
            const char* before = nullptr;
            for (const char* p = g.data - 1; p >= g.map + page && !before; --p)
                if ((unsigned char)*p != kCanary) before = p;
            const char* after = nullptr;
            for (const char* p = g.data + g.bytes; p < g.back_guard && !after; ++p)
                if ((unsigned char)*p != kCanary) after = p;
            const long elements = (long)(g.bytes / g.itemsize);
            if (before) {
                const long index = floor_div((long)(before - g.data), (long)g.itemsize);
                fail(L, "kernel '%s': out-of-bounds write before the start of argument '%s': element %s[%ld] "
                        "was written (the array has %ld elements, valid indices 0..%ld; found after the launch, "
                        "so the block and thread are unknown)", L->kernel, g.name, g.name, index, elements,
                     elements - 1);
            }
            if (after) {
                const long index = (long)((after - g.data) / (long)g.itemsize);
                fail(L, "kernel '%s': out-of-bounds write past the end of argument '%s': element %s[%ld] "
                        "was written (the array has %ld elements, valid indices 0..%ld; found after the launch, "
                        "so the block and thread are unknown)", L->kernel, g.name, g.name, index, elements,
                     elements - 1);
            }
        }
        if (g.writable) memcpy(g.original, g.data, g.bytes);
    }
    for (int i = 0; i < L->nguarded; ++i)
        if (L->guarded[i].map) munmap(L->guarded[i].map, L->guarded[i].map_bytes);
}

}  // namespace

// ------------------------------------------------- called from kernel code

int barrier(BarrierOp op, int predicate, const char* file, int line) {
    Worker* w = current_worker;
    Fiber* f = w->running;
    f->state = BLOCK_WAIT;
    f->wait_file = file;
    f->wait_line = line;
    f->barrier_predicate = predicate;
    w->block_waiting++;
    w->rank_waiting[f->rank]++;
    yield_to_scheduler(w, f);
    const int result = w->rank_barrier_result[f->rank];
    switch (op) {
        case BAR_COUNT: return result;
        case BAR_AND: return result == w->block_threads;
        case BAR_OR: return result > 0;
        default: return 0;
    }
}

unsigned long long warp_op(WarpOp op, unsigned mask, unsigned long long value, int arg, int width,
                           const char* file, int line) {
    Worker* w = current_worker;
    Fiber* f = w->running;
    if (!(mask >> f->lane & 1u)) {
        const uint3 b = f->view.blockIdx, t = f->view.threadIdx;
        fail(w->launch, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u): %s(mask 0x%08x) at %s:%d is "
             "called by lane %d, which is not in the mask (undefined behaviour on a GPU)",
             w->launch->kernel, b.x, b.y, b.z, t.x, t.y, t.z, warp_op_name(op), mask, file, line, f->lane);
        f->state = FAILED;
        yield_to_scheduler(w, f);
    }
    f->state = WARP_WAIT;
    // Lanes past the end of a partial last warp do not exist; a mask may name them.
    f->warp_mask = mask & w->existing_lanes[f->warp];
    f->warp_op = op;
    f->warp_value = value;
    f->warp_arg = arg;
    f->warp_width = width;
    f->wait_file = file;
    f->wait_line = line;
    w->warp_waiting++;
    yield_to_scheduler(w, f);
    return f->warp_result;
}

void wait_until(bool (*ready)(const void*, unsigned), const void* object, unsigned parity, const char* file,
                int line) {
    if (ready(object, parity)) return;
    Worker* w = current_worker;
    Fiber* f = w->running;
    f->state = MBAR_WAIT;
    f->wait_ready = ready;
    f->wait_object = object;
    f->wait_parity = parity;
    f->wait_file = file;
    f->wait_line = line;
    w->object_waiting++;
    yield_to_scheduler(w, f);
}

void warp_collective(const char* name, int phase, const char* file, int line) {
    Worker* w = current_worker;
    Fiber* f = w->running;
    f->state = WARP_WAIT;
    f->warp_mask = w->live_lanes[f->warp];  // for messages; the release re-reads the live lanes
    f->warp_op = WARP_COLLECTIVE;
    f->collective_name = name;
    f->warp_arg = phase;
    f->wait_file = file;
    f->wait_line = line;
    w->warp_waiting++;
    yield_to_scheduler(w, f);
}

unsigned active_mask() {
    Worker* w = current_worker;
    return w->live_lanes[w->running->warp];
}

void* dynamic_shared() { return current_worker->dynamic_shared; }

// ------------------------------------------------ thread-block clusters

unsigned cluster_rank() { return (unsigned)current_worker->running->rank; }

unsigned cluster_blocks() { return (unsigned)current_worker->cluster_size; }

// mapa: the address in block `rank`'s shared memory of what p is in the running block's, the
// same offset in the same array. A static __shared__ array a block's threads have not touched
// yet is mapped for it here.
void* cluster_map(const void* p, unsigned rank, const char* file, int line) {
    Worker* w = current_worker;
    if (rank >= (unsigned)w->cluster_size) {
        char what[160];
        snprintf(what, sizeof what, "mapa to block rank %u of a cluster of %d block%s", rank, w->cluster_size,
                 w->cluster_size == 1 ? "" : "s");
        trap(what, file, line);
    }
    select_rank(w, w->running->rank);
    const char* a = static_cast<const char*>(p);
    RankState& peer = w->ranks[rank];
    if (a >= w->dynamic_shared && a < w->dynamic_shared + w->launch->shared_bytes)
        return peer.dynamic_shared + (a - w->dynamic_shared);
    for (int k = 0; k < w->nshared_in_use; ++k) {
        const int id = w->shared_in_use[k];
        const SharedArray& mine = w->shared_arrays[id];
        if (id == kDynamicShared || a < mine.data || a >= mine.data + mine.bytes) continue;
        if ((int)rank == w->rank) return const_cast<char*>(a);
        SharedArray& theirs = peer.shared_arrays[id];
        if (!theirs.map) {
            theirs = mine;
            if (!map_shared_array(theirs, w->launch->bounds_checked))
                trap("out of memory for the CPU backend's copy of a __shared__ array", file, line);
            peer.shared_in_use[peer.nshared_in_use++] = id;
        }
        return theirs.data + (a - mine.data);
    }
    trap("mapa of an address that is not in the running block's shared memory", file, line);
}

namespace {
bool cluster_phase_passed(const void* phase, unsigned token) {
    return *static_cast<const unsigned*>(phase) != token;
}
}  // namespace

// barrier.cluster.arrive / .wait: a phase completes when every thread of every block of the
// cluster has arrived; wait returns once the phase this thread arrived in has completed.
void cluster_arrive(const char*, int) {
    Worker* w = current_worker;
    w->running->cluster_token = w->cluster_phase;
    if (++w->cluster_arrived == w->nthreads) {
        w->cluster_arrived = 0;
        w->cluster_phase++;
    }
}

void cluster_wait(const char* file, int line) {
    Worker* w = current_worker;
    wait_until(cluster_phase_passed, &w->cluster_phase, w->running->cluster_token, file, line);
}

// The launch's copy of the `bytes` at `address` in one of its pointer arguments as the Python
// process passed them, or null: a tensor map holds the array's own address, and a bulk tensor
// store (gpulab_hopper_cpu.h) must write the copy that goes back, not this process's.
void* argument_copy(const void* address, size_t bytes) {
    const Launch* L = current_worker->launch;
    const char* a = static_cast<const char*>(address);
    for (int i = 0; i < L->nguarded; ++i) {
        const Guarded& g = L->guarded[i];
        const char* o = static_cast<const char*>(g.original);
        if (g.writable && a >= o && a + bytes <= o + g.bytes) return g.data + (a - o);
    }
    return nullptr;
}

void* dynamic_shared(const char* name, const char* type, size_t itemsize) {
    Worker* w = current_worker;
    SharedArray& d = w->shared_arrays[kDynamicShared];
    d.name = name;
    d.type = type;
    d.itemsize = itemsize ? itemsize : 1;
    return w->dynamic_shared;
}

void* static_shared_raw(const void* key, int id, const char* name, const char* type, size_t bytes, size_t align,
                        size_t itemsize, const size_t* extents, int rank) {
    Worker* w = current_worker;
    // The declaration's own slot, or (another instantiation of a template's) the next free one.
    int slot = id;
    while (slot < kMaxSharedArrays && w->shared_arrays[slot].map && w->shared_arrays[slot].key != key) ++slot;
    if (slot == kMaxSharedArrays) {
        char what[160];
        snprintf(what, sizeof what, "more than %d __shared__ arrays for the CPU backend (at '%s')",
                 kMaxSharedArrays, name);
        trap(what, "<gpulab-cpu runtime>", 0);
    }
    SharedArray& a = w->shared_arrays[slot];
    if (a.map) return a.data;
    a.key = key;
    a.name = name;
    a.type = type;
    a.bytes = bytes;
    a.align = align;
    a.itemsize = itemsize ? itemsize : 1;
    a.rank = rank < 4 ? rank : 4;
    for (int d = 0; d < a.rank; ++d) a.extents[d] = extents[d];
    if (!map_shared_array(a, w->launch->bounds_checked)) {
        char what[160];
        snprintf(what, sizeof what, "out of memory for the CPU backend's copy of __shared__ array '%s'", name);
        trap(what, "<gpulab-cpu runtime>", 0);
    }
    w->shared_in_use[w->nshared_in_use++] = slot;
    return a.data;
}

void trap(const char* what, const char* file, int line) {
    Worker* w = current_worker;
    Fiber* f = w->running;
    const uint3 b = f->view.blockIdx, t = f->view.threadIdx;
    fail(w->launch, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u): %s at %s:%d", w->launch->kernel,
         b.x, b.y, b.z, t.x, t.y, t.z, what, file, line);
    f->state = FAILED;
    yield_to_scheduler(w, f);
    __builtin_unreachable();
}

// printf in a kernel: formatted here, kept in the launch's buffer.
int device_vprintf(const char* format, va_list ap) {
    Worker* w = current_worker;
    if (!w || !w->running || !w->launch->printed) return vfprintf(stdout, format, ap);
    char local[1024];
    va_list copy;
    va_copy(copy, ap);
    const int n = vsnprintf(local, sizeof local, format, copy);
    va_end(copy);
    if (n <= 0) return n;
    char* text = local;
    if ((size_t)n >= sizeof local) {
        text = static_cast<char*>(malloc((size_t)n + 1));
        if (!text) return -1;
        vsnprintf(text, (size_t)n + 1, format, ap);
    }
    Printed* out = w->launch->printed;
    const unsigned long long at = out->total.fetch_add((unsigned long long)n);
    // Only the last kPrintfBytes of a longer text can survive.
    const size_t skip = (size_t)n > kPrintfBytes ? (size_t)n - kPrintfBytes : 0;
    for (size_t done = skip; done < (size_t)n;) {
        const size_t pos = (size_t)((at + done) % kPrintfBytes);
        const size_t piece = (size_t)n - done < kPrintfBytes - pos ? (size_t)n - done : kPrintfBytes - pos;
        memcpy(out->text + pos, text + done, piece);
        done += piece;
    }
    if (text != local) free(text);
    return n;
}

}  // namespace gpulab

// The module's own printf (hidden: it replaces the C library's for the kernel's
// code only; g++ is told not to turn printf calls into puts or putchar).
extern "C" int printf(const char* __restrict format, ...) {
    va_list ap;
    va_start(ap, format);
    const int n = gpulab::device_vprintf(format, ap);
    va_end(ap);
    return n;
}

extern "C" void gpulab_assert_fail(const char* expr, const char* file, int line, const char* func) {
    if (!gpulab::current_worker || !gpulab::current_worker->running) {
        fprintf(stderr, "%s:%d: %s: Assertion `%s' failed.\n", file, line, func, expr);
        abort();
    }
    char what[512];
    snprintf(what, sizeof what, "assertion `%s` failed in %s()", expr, func);
    gpulab::trap(what, file, line);
}


namespace gpulab {
namespace {

// A launch between gpulab_launch_start and gpulab_launch_finish.
struct Pending {
    Launch L;
    Guarded* guarded;
    void** substituted;
    void** pointer_values;
    Shared* shared;
    size_t shared_bytes;
    int nsymbols;
    void* const* symbol_address;
    const size_t* symbol_bytes;
    pid_t pid;
};

char* symbol_area(Shared* shared) { return reinterpret_cast<char*>(shared) + sizeof(Shared); }

// Runs the launch's blocks on worker threads; in the worker process.
void run_launch(Launch& L, int nworkers) {
    if (nworkers > kMaxWorkers) nworkers = kMaxWorkers;
    if (nworkers > L.nclusters) nworkers = (int)L.nclusters;
    if (nworkers < 1) nworkers = 1;
    L.shared->nworkers = nworkers;
    Worker* workers = static_cast<Worker*>(calloc(nworkers, sizeof(Worker)));
    const int block_threads = (int)(L.block.x * L.block.y * L.block.z);
    install_fault_handler();
    int started = 0;
    for (int i = 0; i < nworkers; ++i) {
        workers[i].launch = &L;
        workers[i].index = i;
        workers[i].cluster_size = L.cluster_size;
        workers[i].block_threads = block_threads;
        workers[i].nthreads = block_threads * L.cluster_size;
        workers[i].nwarps = (block_threads + 31) / 32 * L.cluster_size;
        if (pthread_create(&workers[i].thread, nullptr, worker_main, &workers[i]) == 0) ++started;
        else break;
    }
    if (started == 0) fail(&L, "kernel '%s': could not start a worker thread (%s)", L.kernel, strerror(errno));
    for (int i = 0; i < started; ++i) pthread_join(workers[i].thread, nullptr);
    remove_fault_handler();
    free(workers);
}

[[noreturn]] void worker_process(Pending* P, pid_t parent, unsigned alarm_seconds) {
    Launch& L = P->L;
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);   // never outlive the Python process
#endif
    if (getppid() != parent) _exit(3);
    // Python's handlers are not ours to run here (all signals are blocked
    // until they are replaced).  An interrupt (SIGINT, which a terminal or
    // Jupyter may send to the whole process group) is the Python process's to
    // handle: it stops this process with SIGKILL.
    signal(SIGINT, SIG_IGN);
    for (int sig : {SIGTERM, SIGPIPE, SIGCHLD, SIGALRM, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGUSR1, SIGUSR2})
        signal(sig, SIG_DFL);
    if (alarm_seconds) alarm(alarm_seconds);  // a backstop in case the Python process never stops it
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    if (L.counts) L.global_shadow = static_cast<Shadow**>(calloc(L.nguarded + 1, sizeof(Shadow*)));
    timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    run_launch(L, L.shared->nworkers);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    P->shared->run_cpu_ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    char* area = symbol_area(P->shared);
    for (int i = 0; i < P->nsymbols; ++i) {
        memcpy(area, P->symbol_address[i], P->symbol_bytes[i]);
        area += P->symbol_bytes[i];
    }
    P->shared->symbols_saved = 1;
    fflush(stdout);
    fflush(stderr);
    P->shared->exit_code = L.failed.load() ? 1 : 0;
    P->shared->finished.store(1);
    _exit(P->shared->exit_code);
}

// Frees a launch's memory; its argument copies must already be unmapped.
void release(Pending* P) {
    free(P->L.block_order);
    free(P->guarded);
    free(P->substituted);
    free(P->pointer_values);
    pthread_mutex_destroy(&P->L.error_lock);
    if (P->L.printed) munmap(P->L.printed, sizeof(Printed));
    munmap(P->shared, P->shared_bytes);
    free(P);
}

}  // namespace
}  // namespace gpulab

// Starts one launch in a worker process (fork) and returns its handle, or
// null with a message in 'error' when it could not start.  The caller waits
// for the process (gpulab_launch_pid), stopping it with SIGKILL if it must,
// then calls gpulab_launch_finish.  guarded_* describe the pointer arguments
// (copied into shared memory, with guard pages when bounds_checked);
// symbol_* the module's variables, whose final bytes come back.
GPULAB_EXPORT void* gpulab_launch_start(void (*thunk)(void**), const char* kernel, const unsigned* grid,
                                        const unsigned* block, size_t shared_bytes, void** args, int nargs,
                                        int nguarded, const int* guarded_arg, const size_t* guarded_bytes,
                                        const size_t* guarded_itemsize, const char* const* guarded_names,
                                        const int* guarded_writable, int bounds_checked, int schedule,
                                        unsigned long long seed, int nworkers, int nsymbols,
                                        void* const* symbol_address, const size_t* symbol_bytes,
                                        const int* symbol_constant, int instrument, unsigned alarm_seconds,
                                        const unsigned* cluster, char* error, size_t error_size) {
    using namespace gpulab;
    Pending* P = static_cast<Pending*>(calloc(1, sizeof(Pending)));
    size_t symbols_total = 0;
    for (int i = 0; i < nsymbols; ++i) symbols_total += symbol_bytes[i];
    const long page = sysconf(_SC_PAGESIZE);
#ifdef GPULAB_INSTRUMENTED
    const size_t counts_bytes = instrument ? sizeof(Counts) : 0;
#else
    const size_t counts_bytes = 0;
    instrument = 0;
#endif
    const size_t counts_offset = (sizeof(Shared) + symbols_total + 63) / 64 * 64;
    const size_t shared_total = (counts_offset + counts_bytes + page - 1) / page * page;
    void* shared = P ? mmap(nullptr, shared_total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                     : MAP_FAILED;
    if (shared == MAP_FAILED) {
        snprintf(error, error_size, "kernel '%s': out of memory starting the launch", kernel);
        free(P);
        return nullptr;
    }
    P->shared = new (shared) Shared();
    P->shared_bytes = shared_total;
    P->shared->nworkers = nworkers;
    for (int i = 0; i < kMaxWorkers; ++i) { P->shared->running_block[i] = -1; P->shared->running_thread[i] = -1; }
    P->nsymbols = nsymbols;
    P->symbol_address = symbol_address;
    P->symbol_bytes = symbol_bytes;

    Launch& L = P->L;
    new (&L) Launch();
    L.thunk = thunk;
    L.kernel = kernel;
    L.grid = dim3(grid[0], grid[1], grid[2]);
    L.block = dim3(block[0], block[1], block[2]);
    L.shared_bytes = shared_bytes;
    L.schedule = schedule;
    L.seed = seed;
    L.nblocks = (long)grid[0] * grid[1] * grid[2];
    // The caller (gpulab.cpu) has checked that the cluster divides the grid and has at most
    // kMaxCluster blocks.
    L.cluster = dim3(cluster[0], cluster[1], cluster[2]);
    L.cluster_size = (int)(cluster[0] * cluster[1] * cluster[2]);
    L.nclusters = L.nblocks / L.cluster_size;
    L.block_order = nullptr;
    L.next_block.store(0);
    L.failed.store(0);
    pthread_mutex_init(&L.error_lock, nullptr);
    L.error = P->shared->error;
    L.error_size = kErrorBytes;
    L.nguarded = nguarded;
    L.bounds_checked = bounds_checked;
    L.shared = P->shared;
    L.nsymbols = nsymbols;
    L.symbol_address = symbol_address;
    L.symbol_bytes = symbol_bytes;
    L.symbol_constant = symbol_constant;
    L.counts = nullptr;
    L.global_shadow = nullptr;
    void* printed = mmap(nullptr, sizeof(Printed), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
    // Default-initialised: the fresh mapping reads as zeros already, and value-initialising
    // (Printed()) would write all of its megabyte, a page fault per page, in every launch.
    L.printed = printed == MAP_FAILED ? nullptr : new (printed) Printed;
    if (L.printed) L.printed->total.store(0);
#ifdef GPULAB_INSTRUMENTED
    if (instrument) {
        L.counts = new (static_cast<char*>(shared) + counts_offset) Counts();
        L.counts->enabled = (instrument & 1) != 0;        // the counters (a race check alone skips them)
        L.counts->races_enabled = (instrument & 2) != 0;
    }
#endif

    P->substituted = static_cast<void**>(calloc(nargs + 1, sizeof(void*)));
    P->pointer_values = static_cast<void**>(calloc(nargs + 1, sizeof(void*)));
    P->guarded = static_cast<Guarded*>(calloc(nguarded + 1, sizeof(Guarded)));
    for (int i = 0; i < nargs; ++i) P->substituted[i] = args[i];
    for (int i = 0; i < nguarded; ++i) {
        Guarded& g = P->guarded[i];
        g.original = *static_cast<void**>(args[guarded_arg[i]]);
        g.bytes = guarded_bytes[i];
        g.itemsize = guarded_itemsize[i];
        g.name = guarded_names[i];
        g.writable = guarded_writable[i];
    }
    L.guarded = P->guarded;
    L.args = P->substituted;
    if (!guard_arguments(&L, P->substituted, P->pointer_values, guarded_arg)) {
        snprintf(error, error_size, "%s", L.error);
        L.nguarded = 0;
        for (int i = 0; i < nguarded; ++i)
            if (P->guarded[i].map) munmap(P->guarded[i].map, P->guarded[i].map_bytes);
        release(P);
        return nullptr;
    }
    if (schedule == SHUFFLE) {
        L.block_order = static_cast<unsigned*>(malloc(sizeof(unsigned) * L.nclusters));
        unsigned long long state = seed;
        for (long i = 0; i < L.nclusters; ++i) L.block_order[i] = (unsigned)i;
        for (long i = L.nclusters - 1; i > 0; --i) {
            const long j = (long)(splitmix(state) % (unsigned long long)(i + 1));
            const unsigned t = L.block_order[i]; L.block_order[i] = L.block_order[j]; L.block_order[j] = t;
        }
    }
    // Buffered output would otherwise be written twice, by both processes.
    fflush(stdout);
    fflush(stderr);
    const pid_t parent = getpid();
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    const pid_t pid = fork();
    if (pid == 0) worker_process(P, parent, alarm_seconds);
    const int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    errno = fork_errno;
    if (pid < 0) {
        snprintf(error, error_size, "kernel '%s': could not start the CPU backend's worker process (%s)", kernel,
                 strerror(errno));
        for (int i = 0; i < nguarded; ++i)
            if (P->guarded[i].map) munmap(P->guarded[i].map, P->guarded[i].map_bytes);
        release(P);
        return nullptr;
    }
    P->pid = pid;
    return P;
}

// The size of the counters' record (0 in a build without them).
GPULAB_EXPORT size_t gpulab_counts_bytes() {
#ifdef GPULAB_INSTRUMENTED
    return sizeof(gpulab::Counts);
#else
    return 0;
#endif
}

GPULAB_EXPORT int gpulab_launch_pid(void* handle) { return static_cast<gpulab::Pending*>(handle)->pid; }

// How many bytes the launch's kernel printed; its buffer and the buffer's size
// (the last 'capacity' bytes printed, circular: the next byte goes at total % capacity).
GPULAB_EXPORT unsigned long long gpulab_launch_printed(void* handle, const char** text, size_t* capacity) {
    gpulab::Printed* out = static_cast<gpulab::Pending*>(handle)->L.printed;
    *text = out ? out->text : nullptr;
    *capacity = gpulab::kPrintfBytes;
    return out ? out->total.load() : 0;
}

// CPU time the worker process spent running the blocks (0 until it has).
GPULAB_EXPORT long long gpulab_launch_run_cpu_ns(void* handle) {
    return static_cast<gpulab::Pending*>(handle)->shared->run_cpu_ns;
}

// Where the launch is: "block (x,y,z) (thread (x,y,z) running)" for each block
// still running, and how many blocks finished; for a stopped launch's message.
GPULAB_EXPORT void gpulab_launch_progress(void* handle, char* text, size_t size) {
    using namespace gpulab;
    Pending* P = static_cast<Pending*>(handle);
    const Launch& L = P->L;
    const Shared* S = P->shared;
    int used = 0, running = 0;
    text[0] = 0;
    const int nworkers = S->nworkers < kMaxWorkers ? S->nworkers : kMaxWorkers;
    for (int i = 0; i < nworkers; ++i) {
        const long b = S->running_block[i];
        if (b < 0) continue;
        const unsigned bx = (unsigned)(b % L.grid.x), by = (unsigned)(b / L.grid.x % L.grid.y),
                       bz = (unsigned)(b / ((long)L.grid.x * L.grid.y));
        used = append(text, size, used, "%sblock (%u,%u,%u)", running ? ", " : "still running: ", bx, by, bz);
        const int t = S->running_thread[i];
        if (t >= 0) {
            const unsigned tx = t % L.block.x, ty = t / L.block.x % L.block.y, tz = t / (L.block.x * L.block.y);
            used = append(text, size, used, " (thread (%u,%u,%u) running)", tx, ty, tz);
        }
        ++running;
    }
    const long done = S->blocks_done.load();
    append(text, size, used, "%s%ld of %ld blocks had finished", running ? "; " : "no block was running; ",
           done, L.nblocks);
}

// Finishes a launch whose worker process has ended: checks the canaries,
// copies the results back and frees everything.  'how': 0 the process ended
// by itself with 'wait_status' (-1 if unknown), 1 it was stopped (the caller
// words that message).  Returns 0; 1 with a message in 'error'; or 2 when the
// process died, with where it was in 'error'.
GPULAB_EXPORT int gpulab_launch_finish(void* handle, int how, int wait_status, char* error, size_t error_size,
                                       void* counts_out, size_t counts_bytes) {
    using namespace gpulab;
    Pending* P = static_cast<Pending*>(handle);
    Launch& L = P->L;
    Shared* S = P->shared;
#ifdef GPULAB_INSTRUMENTED
    if (L.counts && counts_out && counts_bytes == sizeof(Counts)) memcpy(counts_out, L.counts, sizeof(Counts));
#else
    (void)counts_out;
    (void)counts_bytes;
#endif
    L.failed.store(0);
    int status = 0;
    if (how == 0) {
        const bool exited = S->finished.load() ||
                            (wait_status >= 0 && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) <= 1);
        if (exited && S->exit_code) {
            snprintf(error, error_size, "%s", S->error);
            status = 1;
        } else if (!exited) {
            // Where it was; the Python side says how it died (gpulab/cpu/crashes.py).
            gpulab_launch_progress(P, error, error_size);
            status = 2;
        }
    }
    if (S->symbols_saved) {
        const char* area = symbol_area(S);
        for (int i = 0; i < P->nsymbols; ++i) {
            memcpy(P->symbol_address[i], area, P->symbol_bytes[i]);
            area += P->symbol_bytes[i];
        }
    }
    // Canary findings after a launch that already failed add nothing.
    L.error = error;
    L.error_size = error_size;
    L.failed.store(status || how ? 1 : 0);
    check_canaries_and_copy_back(&L);
    if (L.failed.load() && !status) status = 1;
    release(P);
    return status;
}

#pragma pop_macro("threadIdx")
#pragma pop_macro("blockIdx")
#pragma pop_macro("blockDim")
#pragma pop_macro("gridDim")
