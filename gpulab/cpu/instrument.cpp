// Memory-access counters and race checking for the CPU backend.
//
// Included by runtime.cpp only in an instrumented build: the kernel's own
// source is then compiled with g++'s ThreadSanitizer instrumentation
// (-fsanitize=thread), which calls __tsan_read4(address) and the like before
// every load and store, and with -fsanitize-coverage=trace-pc, which calls
// __sanitizer_cov_trace_pc() at the start of every basic block.  The runtime
// (this file) is compiled without them and defines those hooks; nothing of
// this is linked into an ordinary build, which stays as fast as it was.
//
// A warp-level request, as the hardware sees it, is the 32 lanes' executions
// of one load or store instruction in the same order: here, for each lane, the
// k-th time it runs the instruction at one program counter.  The requests of
// a block are gathered until its next __syncthreads() (or its end), then
// counted: 32-byte sectors for global memory, wavefronts (passes through the
// 32 banks of 4 bytes, a word read by several lanes counting once) for shared.

namespace gpulab {
namespace {

constexpr int kMaxSites = 4096;
constexpr int kMaxRaces = 16;

enum Counter {
    GLD_REQ, GLD_SECT, GST_REQ, GST_SECT, SLD_REQ, SLD_WAVE, SLD_IDEAL, SST_REQ, SST_WAVE, SST_IDEAL,
    ATOM_REQ, BB_STEPS, BB_DIVERGENT, BB_LANES, CONST_REQ, CONST_ADDR, ATOM_UPD_REQ, ATOM_LANES, ATOM_MOST, NCOUNTERS
};

struct SiteRecord {                  // in the memory shared with the Python process
    unsigned long long pc;           // offset in the shared object, 0 for an empty slot
    unsigned long long count[NCOUNTERS];
};

struct RaceRecord {
    int space;                       // 0 global, 1 shared
    int argument;                    // global: the argument's index among the arrays, -1 a variable
    long long index;                 // element (global, in the array's items) or byte offset (shared)
    unsigned long long pc[2];        // the two accesses' sites (offsets), earlier first
    int write[2];
    unsigned block[2][3], thread[2][3];
};

struct Counts {                      // the instrumented launch's results, after Shared
    int enabled, races_enabled;
    std::atomic<int> nraces;
    int sites_overflowed;
    SiteRecord site[kMaxSites];
    RaceRecord race[kMaxRaces];
};

enum Space { NONE, GLOBAL, SHARED, CONSTANT };

// One lane's part of a warp-level request.
struct Request {
    int space, write, atomic;
    unsigned lanes;
    unsigned updated;                // atomics: the lanes whose update took effect
    unsigned long long address[32];
    unsigned size[32];
};

// The shadow of one 4-byte word for race checking: the last write and the
// last read, each with when it happened in the block's order of barriers.
struct Access {
    unsigned thread;                 // linear thread in the block + 1 (0: none)
    unsigned block;
    unsigned epoch, warp_epoch;
    unsigned site;
    unsigned char atomic;
    unsigned char bytes;             // which of the word's 4 bytes (a bit each)
};
struct Shadow { Access write, read; };

struct Instr {
    std::unordered_map<unsigned long long, int> site_of_pc;
    std::vector<unsigned long long> site_pc;
    std::vector<std::array<unsigned long long, NCOUNTERS>> counts;
    std::vector<std::vector<unsigned>> instance;    // [fiber][site]
    std::unordered_map<unsigned long long, Request> requests;
    std::unordered_map<unsigned long long, unsigned> steps;
    unsigned epoch;                                 // barriers the block has passed
    std::vector<unsigned> warp_epoch;               // warp-level syncs each warp has passed
    char* tls_begin;
    char* tls_end;
    std::vector<Shadow> shared_shadow;              // dynamic shared, then thread-local shared
    std::vector<Shadow> static_shadow[kMaxSharedArrays];   // static __shared__ arrays, by number
    // A cluster's other blocks' shadows and barrier counts, while the fields above are the
    // running block's (instr_select_rank swaps them), as the worker's shared memory is.
    std::vector<Shadow> parked_shared[kMaxCluster];
    std::vector<Shadow> parked_static[kMaxCluster][kMaxSharedArrays];
    unsigned parked_epoch[kMaxCluster];
};

uintptr_t module_base;
size_t tls_size;

Counts* counts_of(Launch* L) { return L->counts; }

int phdr_callback(struct dl_phdr_info* info, size_t, void* data) {
    const uintptr_t self = reinterpret_cast<uintptr_t>(data);
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
        if (self >= start && self < start + ph.p_memsz) {
            module_base = info->dlpi_addr;
            for (int j = 0; j < info->dlpi_phnum; ++j)
                if (info->dlpi_phdr[j].p_type == PT_TLS) tls_size = info->dlpi_phdr[j].p_memsz;
            return 1;
        }
    }
    return 0;
}

void instr_find_module() {
    if (!module_base) dl_iterate_phdr(phdr_callback, reinterpret_cast<void*>(&phdr_callback));
}

Instr* instr_setup(Worker* w) {
    instr_find_module();
    Instr* in = new Instr();
    in->instance.resize(w->nthreads);
    in->warp_epoch.assign(w->nwarps, 0);
    in->epoch = 0;
    // This thread's block of the module's thread-local variables, where the
    // __shared__ arrays (thread-local statics) live.
    Dl_info info;
    in->tls_begin = in->tls_end = nullptr;
    if (dladdr(reinterpret_cast<void*>(&phdr_callback), &info)) {
        void* handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        void* block = nullptr;
        (void)current_view;  // touch the module's TLS so that this thread's block exists
        if (handle && dlinfo(handle, RTLD_DI_TLS_DATA, &block) == 0 && block) {
            in->tls_begin = static_cast<char*>(block);
            in->tls_end = in->tls_begin + tls_size;
        }
        if (handle) dlclose(handle);
    }
    if (w->launch->counts->races_enabled)
        in->shared_shadow.assign(((w->launch->shared_bytes + 3) / 4 * 4 + (in->tls_end - in->tls_begin)) / 4 + 1, Shadow());
    for (int r = 0; r < w->cluster_size; ++r)
        if (r != w->rank) in->parked_shared[r] = in->shared_shadow;
    return in;
}

int site_index(Instr* in, unsigned long long pc) {
    auto found = in->site_of_pc.find(pc);
    if (found != in->site_of_pc.end()) return found->second;
    const int index = (int)in->site_pc.size();
    in->site_of_pc.emplace(pc, index);
    in->site_pc.push_back(pc);
    in->counts.push_back({});
    return index;
}

unsigned next_instance(Instr* in, int fiber, int site) {
    std::vector<unsigned>& v = in->instance[fiber];
    if ((int)v.size() <= site) v.resize(site + 64, 0);
    return v[site]++;
}

// The ideal number of wavefronts for one shared request, and its wavefronts:
// each phase (the whole warp for 4-byte accesses, half of it for 8 bytes, a
// quarter for 16) needs as many passes as the most distinct words any bank
// is asked for.
void shared_wavefronts(const Request& r, unsigned long long& waves, unsigned long long& ideal) {
    unsigned size = 4;
    for (int l = 0; l < 32; ++l) if (r.lanes >> l & 1u) { size = r.size[l]; break; }
    const int per_phase = size >= 16 ? 8 : size >= 8 ? 16 : 32;
    for (int phase = 0; phase < 32; phase += per_phase) {
        unsigned long long words[32 * 4];
        int nwords = 0;
        for (int l = phase; l < phase + per_phase; ++l) {
            if (!(r.lanes >> l & 1u)) continue;
            const unsigned long long first = r.address[l] / 4, last = (r.address[l] + r.size[l] - 1) / 4;
            for (unsigned long long word = first; word <= last && nwords < 32 * 4; ++word) {
                bool seen = false;
                for (int i = 0; i < nwords && !seen; ++i) seen = words[i] == word;
                if (!seen) words[nwords++] = word;
            }
        }
        if (!nwords) continue;
        int per_bank[32] = {0};
        int most = 0;
        for (int i = 0; i < nwords; ++i) {
            const int bank = (int)(words[i] % 32);
            if (++per_bank[bank] > most) most = per_bank[bank];
        }
        waves += most;
        ideal += 1;
    }
}

// The distinct addresses that the lanes in ``mask`` of one warp's request ask for,
// and (``most``) how many of those lanes asked for the busiest one.
int distinct_addresses(const Request& r, unsigned mask, int* most) {
    unsigned long long seen[32];
    int lanes_at[32] = {0};
    int n = 0, top = 0;
    for (int l = 0; l < 32; ++l) {
        if (!(mask >> l & 1u)) continue;
        int k = 0;
        while (k < n && seen[k] != r.address[l]) ++k;
        if (k == n) seen[n++] = r.address[l];
        if (++lanes_at[k] > top) top = lanes_at[k];
    }
    if (most) *most = top;
    return n;
}

// An atomic request; of the lanes whose update took effect, how many, and how many
// of them updated the busiest address (which atomicity makes happen one after another).
void count_atomic(std::array<unsigned long long, NCOUNTERS>& c, const Request& r) {
    c[ATOM_REQ] += 1;
    if (!r.updated) return;
    int most = 0;
    distinct_addresses(r, r.updated, &most);
    c[ATOM_UPD_REQ] += 1;
    c[ATOM_LANES] += __builtin_popcount(r.updated);
    c[ATOM_MOST] += most;
}

void count_request(Instr* in, int site, const Request& r) {
    std::array<unsigned long long, NCOUNTERS>& c = in->counts[site];
    if (r.space == GLOBAL) {
        unsigned long long sectors[64];
        int nsectors = 0;
        for (int l = 0; l < 32; ++l) {
            if (!(r.lanes >> l & 1u)) continue;
            for (unsigned long long s = r.address[l] / 32; s <= (r.address[l] + r.size[l] - 1) / 32; ++s) {
                bool seen = false;
                for (int i = 0; i < nsectors && !seen; ++i) seen = sectors[i] == s;
                if (!seen && nsectors < 64) sectors[nsectors++] = s;
            }
        }
        if (r.atomic) { count_atomic(c, r); return; }
        c[r.write ? GST_REQ : GLD_REQ] += 1;
        c[r.write ? GST_SECT : GLD_SECT] += nsectors;
    } else if (r.space == SHARED) {
        if (r.atomic) { count_atomic(c, r); return; }
        unsigned long long waves = 0, ideal = 0;
        shared_wavefronts(r, waves, ideal);
        c[r.write ? SST_REQ : SLD_REQ] += 1;
        c[r.write ? SST_WAVE : SLD_WAVE] += waves;
        c[r.write ? SST_IDEAL : SLD_IDEAL] += ideal;
    } else if (r.space == CONSTANT && !r.write) {
        // The constant cache serves one address per pass: a request takes as many
        // passes as the warp asks for distinct addresses.
        c[CONST_REQ] += 1;
        c[CONST_ADDR] += distinct_addresses(r, r.lanes, nullptr);
    }
}

// Counts the requests and steps gathered since the last flush: at every
// __syncthreads() and at the end of the block.
void instr_flush(Worker* w) {
    Instr* in = w->instr;
    if (!in) return;
    for (auto& entry : in->requests) count_request(in, (int)(entry.first >> 8 & 0xfff), entry.second);
    in->requests.clear();
    for (auto& entry : in->steps) {
        const int warp = (int)(entry.first & 255), site = (int)(entry.first >> 8 & 0xfff);
        const unsigned lanes = entry.second, present = w->existing_lanes[warp];
        std::array<unsigned long long, NCOUNTERS>& c = in->counts[site];
        c[BB_STEPS] += 1;
        c[BB_LANES] += __builtin_popcount(lanes);
        if (lanes != present) c[BB_DIVERGENT] += 1;
    }
    in->steps.clear();
}

void instr_block_start(Worker* w) {
    Instr* in = w->instr;
    if (!in) return;
    for (auto& v : in->instance) std::fill(v.begin(), v.end(), 0u);
    in->epoch = 0;
    std::fill(in->warp_epoch.begin(), in->warp_epoch.end(), 0u);
    if (!in->shared_shadow.empty()) std::fill(in->shared_shadow.begin(), in->shared_shadow.end(), Shadow());
    for (auto& v : in->static_shadow) std::fill(v.begin(), v.end(), Shadow());
    for (int r = 0; r < w->cluster_size; ++r) {
        in->parked_epoch[r] = 0;
        std::fill(in->parked_shared[r].begin(), in->parked_shared[r].end(), Shadow());
        for (auto& v : in->parked_static[r]) std::fill(v.begin(), v.end(), Shadow());
    }
}

// The running block of a cluster changes from `from` to `to`: their shadows of shared memory
// (each block has its own) and their counts of barriers passed change places.
void instr_select_rank(Worker* w, int from, int to) {
    Instr* in = w->instr;
    if (!in) return;
    std::swap(in->shared_shadow, in->parked_shared[from]);
    std::swap(in->shared_shadow, in->parked_shared[to]);
    for (int k = 0; k < kMaxSharedArrays; ++k) {
        std::swap(in->static_shadow[k], in->parked_static[from][k]);
        std::swap(in->static_shadow[k], in->parked_static[to][k]);
    }
    in->parked_epoch[from] = in->epoch;
    in->epoch = in->parked_epoch[to];
}

void instr_barrier(Worker* w) {
    if (!w->instr) return;
    instr_flush(w);
    w->instr->epoch++;
}

void instr_warp_sync(Worker* w, int warp) {
    if (w->instr) w->instr->warp_epoch[warp]++;
}

// Adds this worker's counts to the launch's table, by program counter.
void instr_merge(Worker* w) {
    Instr* in = w->instr;
    if (!in) return;
    instr_flush(w);
    Counts* C = counts_of(w->launch);
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    for (size_t s = 0; s < in->site_pc.size(); ++s) {
        const unsigned long long pc = in->site_pc[s];
        unsigned long long h = (pc * 0x9E3779B97F4A7C15ull) % kMaxSites;
        int slot = -1;
        for (int probe = 0; probe < kMaxSites && slot < 0; ++probe, h = (h + 1) % kMaxSites)
            if (C->site[h].pc == pc || C->site[h].pc == 0) slot = (int)h;
        if (slot < 0) { C->sites_overflowed = 1; continue; }
        C->site[slot].pc = pc;
        for (int k = 0; k < NCOUNTERS; ++k) C->site[slot].count[k] += in->counts[s][k];
    }
    pthread_mutex_unlock(&lock);
    delete in;
    w->instr = nullptr;
}

Space classify(Worker* w, uintptr_t a, Guarded const** array, Shadow** shadow) {
    Launch* L = w->launch;
    *array = nullptr;
    *shadow = nullptr;
    for (int i = 0; i < L->nguarded; ++i) {
        const Guarded& g = L->guarded[i];
        const uintptr_t d = reinterpret_cast<uintptr_t>(g.data);
        if (a >= d && a < d + (g.bytes + 15) / 16 * 16) { *array = &g; return GLOBAL; }
    }
    Instr* in = w->instr;
    const uintptr_t dyn = reinterpret_cast<uintptr_t>(w->dynamic_shared);
    if (a >= dyn && a < dyn + L->shared_bytes) {
        if (!in->shared_shadow.empty()) *shadow = &in->shared_shadow[(a - dyn) / 4];
        return SHARED;
    }
    for (int k = 0; k < w->nshared_in_use; ++k) {
        const int id = w->shared_in_use[k];
        if (id == kDynamicShared) continue;
        const SharedArray& s = w->shared_arrays[id];
        const uintptr_t d = reinterpret_cast<uintptr_t>(s.data);
        if (a >= d && a < d + s.bytes) {
            if (counts_of(L)->races_enabled) {
                std::vector<Shadow>& v = in->static_shadow[id];
                if (v.empty()) v.assign((s.bytes + 3) / 4 + 1, Shadow());
                *shadow = &v[(a - d) / 4];
            }
            return SHARED;
        }
    }
    if (a >= reinterpret_cast<uintptr_t>(in->tls_begin) && a < reinterpret_cast<uintptr_t>(in->tls_end)) {
        if (a >= reinterpret_cast<uintptr_t>(&current_view) && a < reinterpret_cast<uintptr_t>(&current_view + 1))
            return NONE;
        if (!in->shared_shadow.empty())
            *shadow = &in->shared_shadow[((L->shared_bytes + 3) / 4 * 4 + (a - reinterpret_cast<uintptr_t>(in->tls_begin))) / 4];
        return SHARED;
    }
    for (int i = 0; i < L->nsymbols; ++i) {
        const uintptr_t s = reinterpret_cast<uintptr_t>(L->symbol_address[i]);
        if (a >= s && a < s + L->symbol_bytes[i]) return L->symbol_constant[i] ? CONSTANT : GLOBAL;
    }
    return NONE;  // the thread's own stack, the runtime's memory
}

// ------------------------------------------------------------------ races

void record_race(Worker* w, int space, const Guarded* array, long long index, const Access& earlier,
                 int earlier_write, unsigned site, int write) {
    Launch* L = w->launch;
    Counts* C = counts_of(L);
    Instr* in = w->instr;
    const unsigned long long pc_now = in->site_pc[site], pc_then = in->site_pc[earlier.site];
    const int n = C->nraces.load();
    for (int i = 0; i < n && i < kMaxRaces; ++i)
        if (C->race[i].pc[0] == pc_then && C->race[i].pc[1] == pc_now) return;  // one report per pair of lines
    const int k = C->nraces.fetch_add(1);
    if (k >= kMaxRaces) return;
    RaceRecord& r = C->race[k];
    r.space = space;
    r.argument = array ? (int)(array - L->guarded) : -1;
    r.index = index;
    r.pc[0] = pc_then;
    r.pc[1] = pc_now;
    r.write[0] = earlier_write;
    r.write[1] = write;
    const Fiber* f = w->running;
    const unsigned bx = L->grid.x, by = L->grid.y, tx = L->block.x, ty = L->block.y;
    const unsigned eb = earlier.block, et = earlier.thread - 1;
    r.block[0][0] = eb % bx; r.block[0][1] = eb / bx % by; r.block[0][2] = eb / (bx * by);
    r.thread[0][0] = et % tx; r.thread[0][1] = et / tx % ty; r.thread[0][2] = et / (tx * ty);
    r.block[1][0] = f->view.blockIdx.x; r.block[1][1] = f->view.blockIdx.y; r.block[1][2] = f->view.blockIdx.z;
    r.thread[1][0] = f->view.threadIdx.x; r.thread[1][1] = f->view.threadIdx.y; r.thread[1][2] = f->view.threadIdx.z;
}

// Whether 'a' (earlier) and the access now, by different threads, are ordered:
// by a __syncthreads() between them in the same block, or by a __syncwarp()
// (or another warp-level sync) between them in the same warp.
bool ordered(const Access& a, unsigned block, unsigned thread, unsigned epoch, unsigned warp_epoch) {
    if (a.block != block) return false;
    if (a.epoch != epoch) return true;
    return (a.thread - 1) / 32 == (thread - 1) / 32 && a.warp_epoch != warp_epoch;
}

void check_race(Worker* w, Shadow* s, int space, const Guarded* array, long long index, unsigned site,
                int write, int atomic, unsigned bytes) {
    Instr* in = w->instr;
    const Fiber* f = w->running;
    const unsigned thread = (unsigned)((f - w->fibers) % w->block_threads) + 1;   // in its block
    const unsigned block = f->view.blockIdx.x + w->launch->grid.x * (f->view.blockIdx.y +
                           w->launch->grid.y * f->view.blockIdx.z);
    const unsigned epoch = in->epoch, wepoch = in->warp_epoch[f->warp];
    const Access& last_write = s->write;
    if (last_write.thread && (last_write.bytes & bytes) && !(last_write.thread == thread && last_write.block == block) &&
        !(atomic && last_write.atomic) && !ordered(last_write, block, thread, epoch, wepoch))
        record_race(w, space, array, index, last_write, 1, site, write);
    if (write) {
        const Access& last_read = s->read;
        if (last_read.thread && (last_read.bytes & bytes) && !(last_read.thread == thread && last_read.block == block) &&
            !(atomic && last_read.atomic) && !ordered(last_read, block, thread, epoch, wepoch))
            record_race(w, space, array, index, last_read, 0, site, write);
        s->write = Access{thread, block, epoch, wepoch, site, (unsigned char)atomic, (unsigned char)bytes};
    } else {
        s->read = Access{thread, block, epoch, wepoch, site, (unsigned char)atomic, (unsigned char)bytes};
    }
}

Shadow* global_shadow(Worker* w, const Guarded* g, uintptr_t a) {
    Launch* L = w->launch;
    const int i = (int)(g - L->guarded);
    if (!L->global_shadow[i]) {
        // One OS thread runs the blocks when races are checked: no lock needed.
        L->global_shadow[i] = static_cast<Shadow*>(calloc((g->bytes + 15) / 4 + 1, sizeof(Shadow)));
        if (!L->global_shadow[i]) return nullptr;
    }
    return &L->global_shadow[i][(a - reinterpret_cast<uintptr_t>(g->data)) / 4];
}

// ------------------------------------------------------------------ hooks

void on_access(uintptr_t address, unsigned size, int write, int atomic, uintptr_t pc) {
    Worker* w = current_worker;
    if (!w || !w->running || !w->instr) return;
    Fiber* f = w->running;
    const Guarded* array;
    Shadow* shadow;
    const Space space = classify(w, address, &array, &shadow);
    if (space == NONE) return;
    Instr* in = w->instr;
    const int site = site_index(in, pc - module_base);
    if (site >= kMaxSites) return;
    if (counts_of(w->launch)->enabled) {
        const int fiber = (int)(f - w->fibers);
        const unsigned instance = next_instance(in, fiber, site);
        const unsigned long long key = ((unsigned long long)instance << 20) | ((unsigned long long)site << 8) |
                                       (unsigned)(f->warp & 255);
        Request& r = in->requests[key];
        if (!r.lanes) { r.space = space; r.write = write; r.atomic = atomic != 0; }
        r.lanes |= 1u << f->lane;
        if (atomic == 2) r.updated |= 1u << f->lane;
        r.address[f->lane] = address;
        r.size[f->lane] = size;
    }
    if (counts_of(w->launch)->races_enabled) {
        // One shadow per aligned 4-byte word, with the bytes each access touched.
        const uintptr_t first = address & ~uintptr_t(3);
        for (uintptr_t word = first; word < address + size; word += 4) {
            const unsigned off = (unsigned)(word - first);
            unsigned bytes = 0;
            for (unsigned b = 0; b < 4; ++b)
                if (word + b >= address && word + b < address + size) bytes |= 1u << b;
            Shadow* s = shadow ? shadow + off / 4 : space == GLOBAL && array ? global_shadow(w, array, word)
                                                                             : nullptr;
            if (!s) break;
            const uintptr_t dyn = reinterpret_cast<uintptr_t>(w->dynamic_shared);
            const uintptr_t at = word < address ? address : word;
            const long long index =
                array ? (long long)((at - reinterpret_cast<uintptr_t>(array->data)) / array->itemsize)
                : space == SHARED && at >= dyn && at < dyn + w->launch->shared_bytes ? (long long)(at - dyn)
                : -1;
            check_race(w, s, space, array, index, site, write, atomic, bytes);
        }
    }
}

void on_step(uintptr_t pc) {
    Worker* w = current_worker;
    // Steps are counted only for the counters: a race check alone would spend most of its time
    // here (a kernel synchronised by mbarriers gathers every step of the launch until its end).
    if (!w || !w->running || !w->instr || !counts_of(w->launch)->enabled) return;
    Instr* in = w->instr;
    const int site = site_index(in, pc - module_base);
    if (site >= kMaxSites) return;
    Fiber* f = w->running;
    const unsigned instance = next_instance(in, (int)(f - w->fibers), site);
    const unsigned long long key = ((unsigned long long)instance << 20) | ((unsigned long long)site << 8) |
                                   (unsigned)(f->warp & 255);
    in->steps[key] |= 1u << f->lane;
}

}  // namespace
}  // namespace gpulab

#define GPULAB_PC reinterpret_cast<uintptr_t>(__builtin_return_address(0))
#define GPULAB_HOOK extern "C" __attribute__((visibility("hidden")))
GPULAB_HOOK void __tsan_init() {}
GPULAB_HOOK void __tsan_func_entry(void*) {}
GPULAB_HOOK void __tsan_func_exit() {}
GPULAB_HOOK void __tsan_vptr_update(void**, void*) {}
GPULAB_HOOK void __tsan_vptr_read(void**) {}
GPULAB_HOOK void __sanitizer_cov_trace_pc() { gpulab::on_step(GPULAB_PC); }
#define GPULAB_RW(N) \
    GPULAB_HOOK void __tsan_read##N(void* a) { gpulab::on_access((uintptr_t)a, N, 0, 0, GPULAB_PC); } \
    GPULAB_HOOK void __tsan_write##N(void* a) { gpulab::on_access((uintptr_t)a, N, 1, 0, GPULAB_PC); } \
    GPULAB_HOOK void __tsan_volatile_read##N(void* a) { gpulab::on_access((uintptr_t)a, N, 0, 0, GPULAB_PC); } \
    GPULAB_HOOK void __tsan_volatile_write##N(void* a) { gpulab::on_access((uintptr_t)a, N, 1, 0, GPULAB_PC); } \
    GPULAB_HOOK void __tsan_unaligned_read##N(void* a) { gpulab::on_access((uintptr_t)a, N, 0, 0, GPULAB_PC); } \
    GPULAB_HOOK void __tsan_unaligned_write##N(void* a) { gpulab::on_access((uintptr_t)a, N, 1, 0, GPULAB_PC); }
GPULAB_RW(1)
GPULAB_RW(2)
GPULAB_RW(4)
GPULAB_RW(8)
GPULAB_RW(16)
#undef GPULAB_RW
GPULAB_HOOK void __tsan_read_range(void* a, size_t n) {
    for (size_t off = 0; off < n; off += 4) gpulab::on_access((uintptr_t)a + off, n - off < 4 ? n - off : 4, 0, 0, GPULAB_PC);
}
GPULAB_HOOK void __tsan_write_range(void* a, size_t n) {
    for (size_t off = 0; off < n; off += 4) gpulab::on_access((uintptr_t)a + off, n - off < 4 ? n - off : 4, 1, 0, GPULAB_PC);
}

// The C library's memory functions, as the kernel's own code calls them in an instrumented build:
// the module's object has its calls of memcpy, memmove, memset, mempcpy, memcmp (and _chk forms)
// renamed to these (compiler.CHECKED_CALLS, objcopy --redefine-sym), and is compiled with
// -fno-builtin-memcpy and the like, so that g++ neither expands them inline nor leaves them to the
// uninstrumented C library: each byte they read and write is an access the race checker sees, in
// 4-byte pieces, at the call's site, as ThreadSanitizer's own interceptors would make it.
namespace gpulab {
namespace {
inline void on_range(const void* a, size_t n, int write, uintptr_t pc) {
    if (!current_worker) return;
    for (size_t off = 0; off < n; off += 4)
        on_access(reinterpret_cast<uintptr_t>(a) + off, n - off < 4 ? (unsigned)(n - off) : 4u, write, 0, pc);
}
}  // namespace
}  // namespace gpulab
extern "C" void* __memcpy_chk(void*, const void*, size_t, size_t);
extern "C" void* __memmove_chk(void*, const void*, size_t, size_t);
extern "C" void* __memset_chk(void*, int, size_t, size_t);
GPULAB_HOOK void* gpulab_checked_memcpy(void* d, const void* s, size_t n) {
    gpulab::on_range(s, n, 0, GPULAB_PC); gpulab::on_range(d, n, 1, GPULAB_PC); return memcpy(d, s, n); }
GPULAB_HOOK void* gpulab_checked_memmove(void* d, const void* s, size_t n) {
    gpulab::on_range(s, n, 0, GPULAB_PC); gpulab::on_range(d, n, 1, GPULAB_PC); return memmove(d, s, n); }
GPULAB_HOOK void* gpulab_checked_mempcpy(void* d, const void* s, size_t n) {
    gpulab::on_range(s, n, 0, GPULAB_PC); gpulab::on_range(d, n, 1, GPULAB_PC);
    return static_cast<char*>(memcpy(d, s, n)) + n; }
GPULAB_HOOK int gpulab_checked_memcmp(const void* a, const void* b, size_t n) {
    gpulab::on_range(a, n, 0, GPULAB_PC); gpulab::on_range(b, n, 0, GPULAB_PC); return memcmp(a, b, n); }
GPULAB_HOOK void* gpulab_checked_memset(void* d, int c, size_t n) {
    gpulab::on_range(d, n, 1, GPULAB_PC); return memset(d, c, n); }
GPULAB_HOOK void* gpulab_checked___memcpy_chk(void* d, const void* s, size_t n, size_t room) {
    gpulab::on_range(s, n, 0, GPULAB_PC); gpulab::on_range(d, n, 1, GPULAB_PC); return __memcpy_chk(d, s, n, room); }
GPULAB_HOOK void* gpulab_checked___memmove_chk(void* d, const void* s, size_t n, size_t room) {
    gpulab::on_range(s, n, 0, GPULAB_PC); gpulab::on_range(d, n, 1, GPULAB_PC); return __memmove_chk(d, s, n, room); }
GPULAB_HOOK void* gpulab_checked___memset_chk(void* d, int c, size_t n, size_t room) {
    gpulab::on_range(d, n, 1, GPULAB_PC); return __memset_chk(d, c, n, room); }
// snprintf formats into a buffer of the runtime's own, then writes what the call would write (the
// text and its terminating zero, at most n bytes) as a checked write: a kernel that put bytes into
// shared memory with it was unseen (its %s arguments' reads still are: the formatting is the C
// library's).
GPULAB_HOOK int gpulab_checked_snprintf(char* d, size_t n, const char* format, ...) {
    va_list args, again;
    va_start(args, format);
    va_copy(again, args);
    char local[256];
    int length = vsnprintf(local, sizeof local, format, args);
    va_end(args);
    std::vector<char> big;
    const char* text = local;
    if (length >= (int)sizeof local) {
        big.resize((size_t)length + 1);
        vsnprintf(big.data(), big.size(), format, again);
        text = big.data();
    }
    va_end(again);
    if (length >= 0 && n > 0) {
        size_t written = (size_t)length + 1 < n ? (size_t)length + 1 : n;
        gpulab::on_range(d, written, 1, GPULAB_PC);
        memcpy(d, text, written - 1);
        d[written - 1] = '\0';
    }
    return length;
}

// Atomics: the instrumented code calls these instead of the instructions, so
// they do the operation (sequentially consistent) and count it: atomic = 2 for an
// update, 1 for an atomic read. A compare-and-swap counts only when it succeeds: a
// float atomicAdd is a loop of them here, one instruction on a GPU, and a CAS that
// failed because another worker thread got in between is an artefact of running the
// blocks on CPU threads (its retry is counted, as the same request, when it succeeds).
#define GPULAB_ATOMICS(N, T) \
    GPULAB_HOOK T __tsan_atomic##N##_load(const volatile T* a, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 0, 1, GPULAB_PC); return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK void __tsan_atomic##N##_store(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { \
        gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
    GPULAB_HOOK int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) { \
        const int ok = __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        if (ok) gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return ok; } \
    GPULAB_HOOK int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) { \
        const int ok = __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        if (ok) gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return ok; } \
    GPULAB_HOOK T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) { \
        const T expected = c; \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        if (c == expected) gpulab::on_access((uintptr_t)a, sizeof(T), 1, 2, GPULAB_PC); return c; }
GPULAB_ATOMICS(8, unsigned char)
GPULAB_ATOMICS(16, unsigned short)
GPULAB_ATOMICS(32, unsigned int)
GPULAB_ATOMICS(64, unsigned long long)
#undef GPULAB_ATOMICS
GPULAB_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
GPULAB_HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#undef GPULAB_HOOK
