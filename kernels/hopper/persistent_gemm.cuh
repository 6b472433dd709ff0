// The persistent, warp-specialized GEMM of steps 5, 6 and 7: one block per SM walks over 128 x 256
// tiles in grouped order; warpgroup 0 copies slices with TMA round a ring of STAGES slots, warpgroups
// 1 and 2 multiply them with wgmma (64 rows each) and write C. Each step's file says what it is
// and launches it.
//
// The element type (template parameter T, half unless named) is that of A, B and C: __half
// (wgmma .f16), __nv_bfloat16 (.bf16, where the including file has <cuda_bf16.h>) or float (read
// as tf32, k8 per wgmma). A slice is one 128-byte swizzled row deep whatever the type: BK = 64
// halves or bfloat16s, 32 floats (slice_k<T>), so the ring, the descriptors' byte offsets and the
// copies' byte counts are the same for all three.
//
// FP8 (steps 9 and 10, where the including file has <cuda_fp8.h>): A and B of their own types TA
// and TB (__nv_fp8_e4m3 or __nv_fp8_e5m2, one byte: a slice is 128 k, four k32 wgmma), C of type T
// (bfloat16), and the products scaled by the tensors' scales before C is written. PROMOTE (step
// 10): each slice's products accumulate from zero and are then added into float registers.
#include <cuda_fp16.h>
#include <common/hopper.h>
#include "wgmma_store.cuh"

#define BM 128
#define BN 256
#define BK 64
#define STAGES 4
#define THREADS 384
#define CONSUMER_WARPS 8
#define SLICE_BYTES ((BM + BN) * BK * 2)
#define SWIZZLE_ATOM 1024
#define GROUP_M 8           // tile-rows per group of the tile order
#define STORE_BOX 64        // step 7: C leaves through shared memory in 64 x 64 boxes (8 KiB) ...
#define STORE_BOXES 2       // ... two at a time per consumer: 16 KiB of staging each, after the ring

// Tile number -> (tile-row, tile-column), grouped: GROUP_M tile-rows are walked column by
// column before the next group starts.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int per_group = GROUP_M * tiles_n, first = (tile / per_group) * GROUP_M;
    const int rows = min(tiles_m - first, GROUP_M);
    tm = first + (tile % per_group) % rows;
    tn = (tile % per_group) / rows;
}

// The persistent warp-specialized GEMM of steps 5, 6 and 7 (see their files). IN_FLIGHT: each
// consumer releases a slot one slice later, keeping a group of products queued (step 6).
// TMA_STORE: the epilogue stages C in shared memory and the copy engine writes it (map_c, boxes
// of STORE_BOX x STORE_BOX, 128-byte swizzle) while the consumer goes on to its next tile (step 7).
// k per slice: one 128-byte row of T.
template <typename T>
__host__ __device__ constexpr int slice_k() { return 128 / (int)sizeof(T); }

// One slice's k16 (k8 for tf32) products: 4 wgmma, each 32 bytes further along the rows.
__device__ __forceinline__ void slice_products(float* acc, const __half* As, const __half* Bs)
{
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n256k16(acc, smem_desc(As + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                         smem_desc(Bs + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B), 1);
}
__device__ __forceinline__ void slice_products(float* acc, const float* As, const float* Bs)
{
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n256k8_tf32(acc, smem_desc(As + 8 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                             smem_desc(Bs + 8 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B), 1);
}
#ifdef __CUDA_BF16_TYPES_EXIST__
__device__ __forceinline__ void slice_products(float* acc, const __nv_bfloat16* As, const __nv_bfloat16* Bs)
{
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n256k16_bf16(acc, smem_desc(As + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                              smem_desc(Bs + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B), 1);
}
#endif
#ifdef __CUDA_FP8_TYPES_EXIST__
// The FP8 instructions by the kinds of A and B (hopper.h names them by their PTX types).
template <typename TA, typename TB> struct Fp8Wgmma;
#define GPULAB_FP8_PAIR(TA, TB, KINDS)                                                                   \
    template <> struct Fp8Wgmma<TA, TB> {                                                                \
        static __device__ __forceinline__ void n256(float* d, unsigned long long a, unsigned long long b, int s) \
        {                                                                                                \
            wgmma_m64n256k32_##KINDS(d, a, b, s);                                                        \
        }                                                                                                \
        static __device__ __forceinline__ void n128(float* d, unsigned long long a, unsigned long long b, int s) \
        {                                                                                                \
            wgmma_m64n128k32_##KINDS(d, a, b, s);                                                        \
        }                                                                                                \
    };
GPULAB_FP8_PAIR(__nv_fp8_e4m3, __nv_fp8_e4m3, e4m3_e4m3)
GPULAB_FP8_PAIR(__nv_fp8_e4m3, __nv_fp8_e5m2, e4m3_e5m2)
GPULAB_FP8_PAIR(__nv_fp8_e5m2, __nv_fp8_e4m3, e5m2_e4m3)
GPULAB_FP8_PAIR(__nv_fp8_e5m2, __nv_fp8_e5m2, e5m2_e5m2)
#undef GPULAB_FP8_PAIR

// Step 9: one slice's k32 products of FP8 A and B, 4 wgmma, each 32 bytes further along the rows,
// all into acc (the tensor cores' reduced-precision adder, slice after slice).
template <typename TA, typename TB>
__device__ __forceinline__ void fp8_slice_products(float* acc, const TA* As, const TB* Bs)
{
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        Fp8Wgmma<TA, TB>::n256(acc, smem_desc(As + 32 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                               smem_desc(Bs + 32 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B), 1);
}

// Step 10: the same products in two halves of 128 columns (B's rows 0-127, then 128-255: 16 KiB
// further, still 1024-byte aligned), each half's four accumulating from zero in `partial` (64
// floats: there is no room for a second set of 128 beside acc), then added into acc with float
// adds once they are done. The warpgroup waits for each half; the other consumer's products keep
// the tensor cores busy meanwhile.
template <typename TA, typename TB>
__device__ __forceinline__ void fp8_promoted_slice_products(float* acc, const TA* As, const TB* Bs)
{
    float partial[64];                              // no value needed: the first wgmma ignores it
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            Fp8Wgmma<TA, TB>::n128(partial, smem_desc(As + 32 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                                   smem_desc(Bs + 128 * 128 * h + 32 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                                   kk > 0);         // the first starts the partial sum from zero
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[64 * h + i] += partial[i];
    }
}
#endif

// The body of persistent_gemm and persistent_gemm_fp8 (below), which own the ring's barriers.
// TA, TB: the types of A and B (T, C's type, unless FP8). scale: the FP8 steps' scale_a scale_b.
template <bool IN_FLIGHT, bool TMA_STORE, typename T, typename TA, typename TB, bool PROMOTE>
__device__ __forceinline__ void persistent_gemm_tiles(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                                      const CUtensorMap* map_c, T* C, int M, int N, int K,
                                                      unsigned char* smem_raw, float scale,
                                                      unsigned long long* full, unsigned long long* empty)
{
    constexpr bool FP8 = sizeof(TA) == 1;
    static_assert(sizeof(TA) == sizeof(TB), "A and B have elements of one size");
    static_assert(FP8 || !PROMOTE, "promotion is for the FP8 accumulation");
    static_assert(!(PROMOTE && IN_FLIGHT), "a promoting consumer waits for each slice's products");
    constexpr int SK = slice_k<TA>();               // BK for halves and bfloat16s, 32 for floats, 128 for FP8
    static_assert((BM + BN) * SK * sizeof(TA) == SLICE_BYTES, "a slice is one 128-byte row of each tile row");
    TA* ring = (TA*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    const int tid = threadIdx.x, wg = tid / 128;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int KT = (K + SK - 1) / SK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CONSUMER_WARPS);   // one arrival per consumer warp
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {                                  // the producer
        setmaxnreg_dec<40>();
        // region: producer
        if (tid == 0) {
            int it = 0;                                 // slices issued over all this block's tiles
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tm, tn;
                tile_coords(tile, tiles_m, tiles_n, tm, tn);
                for (int t = 0; t < KT; ++t, ++it) {
                    const int slot = it % STAGES;
                    mbar_wait(&empty[slot], ((it / STAGES) % 2) ^ 1);   // as in step 4, counted by it
                    TA* As = ring + (size_t)slot * (BM + BN) * SK;
                    mbar_arrive_expect_tx(&full[slot], SLICE_BYTES);
                    tma_load_2d(As, &map_a, t * SK, tm * BM, &full[slot]);
                    tma_load_2d(As + BM * SK, &map_b, t * SK, tn * BN, &full[slot]);
                }
            }
        }
        // endregion
    } else {                                        // the consumers: rows 64 c .. 64 c + 63 of each tile
        setmaxnreg_inc<232>();
        const int c = wg - 1;
        int it = 0;
        float acc[128];
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int tm, tn;
            tile_coords(tile, tiles_m, tiles_n, tm, tn);
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
            // region: consumer
            for (int t = 0; t < KT; ++t, ++it) {
                const int slot = it % STAGES;
                mbar_wait(&full[slot], (it / STAGES) % 2);
                const TA* As = ring + (size_t)slot * (BM + BN) * SK + 64 * c * SK;
                const TB* Bs = (const TB*)(ring + (size_t)slot * (BM + BN) * SK + BM * SK);
#ifdef __CUDA_FP8_TYPES_EXIST__
                if constexpr (PROMOTE) {
                    fp8_promoted_slice_products(acc, As, Bs);   // done when it returns
                    if (tid % 32 == 0) mbar_arrive(&empty[slot]);
                    continue;
                }
#endif
                wgmma_fence();
                if constexpr (FP8) {
#ifdef __CUDA_FP8_TYPES_EXIST__
                    fp8_slice_products(acc, As, Bs);
#endif
                } else {
                    slice_products(acc, As, Bs);
                }
                wgmma_commit();
                if (IN_FLIGHT) {
                    wgmma_wait<1>();                // slice it - 1's products are done
                    if (t > 0 && tid % 32 == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
                } else {
                    wgmma_wait<0>();
                    if (tid % 32 == 0) mbar_arrive(&empty[slot]);
                }
            }
            if (IN_FLIGHT) {                        // the tile's last slice: then its slot goes back
                wgmma_wait<0>();
                if (tid % 32 == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
            }
            // endregion

            // region: epilogue
            if (FP8) {                              // D = scale_a scale_b (A B^T)
#pragma unroll
                for (int i = 0; i < 128; ++i) acc[i] *= scale;
            }
            if (TMA_STORE) {
                // STORE_BOXES boxes of 64 rows x 128 bytes (64 halves or 32 floats wide) each
                constexpr int BOX_COLS = 128 / (int)sizeof(T);
                T* stage = (T*)((char*)ring + (size_t)STAGES * SLICE_BYTES + (size_t)c * STORE_BOXES * STORE_BOX * 128);
                const bool issuer = tid % 128 == 0;
#pragma unroll
                for (int part = 0; part < BN / (STORE_BOXES * BOX_COLS); ++part) {
                    if (issuer) bulk_wait_read<0>();        // the last store has read the staging
                    named_barrier_sync(1 + c, 128);         // ... before anyone overwrites it
                    stage_accumulators<STORE_BOXES>(stage, acc, part);
                    fence_proxy_async();                    // the staged C, visible to the copy engine
                    named_barrier_sync(1 + c, 128);
                    if (issuer) {
                        for (int b = 0; b < STORE_BOXES; ++b)
                            tma_store_2d(map_c, (char*)stage + b * STORE_BOX * 128,
                                         tn * BN + (part * STORE_BOXES + b) * BOX_COLS, tm * BM + 64 * c);
                        bulk_commit();
                    }
                }
            } else {
                store_accumulators<BN>(C, acc, tm * BM + 64 * c, tn * BN, M, N);
            }
            // endregion
        }
        if (TMA_STORE && tid % 128 == 0) bulk_wait<0>();    // C written before the block's end
    }
}

template <bool IN_FLIGHT, bool TMA_STORE = false, typename T = __half>
__device__ __forceinline__ void persistent_gemm(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                                const CUtensorMap* map_c, T* C,
                                                int M, int N, int K, unsigned char* smem_raw)
{
    __shared__ __align__(8) unsigned long long full[STAGES];
    __shared__ __align__(8) unsigned long long empty[STAGES];
    persistent_gemm_tiles<IN_FLIGHT, TMA_STORE, T, T, T, false>(map_a, map_b, map_c, C, M, N, K, smem_raw, 1.0f,
                                                                full, empty);
}

#ifdef __CUDA_FP8_TYPES_EXIST__
// Steps 9 and 10: A of type TA and B of type TB (FP8), C in bfloat16 through the TMA store,
// C = scale (A B^T); PROMOTE: step 10's accumulation.
template <bool IN_FLIGHT, bool PROMOTE, typename TA, typename TB>
__device__ __forceinline__ void persistent_gemm_fp8(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                                    const CUtensorMap* map_c, __nv_bfloat16* C, int M, int N,
                                                    int K, unsigned char* smem_raw, float scale)
{
    __shared__ __align__(8) unsigned long long full[STAGES];
    __shared__ __align__(8) unsigned long long empty[STAGES];
    persistent_gemm_tiles<IN_FLIGHT, true, __nv_bfloat16, TA, TB, PROMOTE>(map_a, map_b, map_c, C, M, N, K,
                                                                           smem_raw, scale, full, empty);
}
#endif
