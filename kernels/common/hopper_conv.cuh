// The hopper chapter's GEMM machinery turned into a convolution (issue 26): an implicit GEMM on
// wgmma, fed by the copy engine straight from the channels-last input, for the conv chapters'
// last steps (convpool step 9, alexnet step 25).
//
// The GEMM: rows are output pixels (n, e, f), columns are filters m, and k runs over the taps
// (r, s) and the channels c. A block tile is TH x TW = 128 pixels of one image times BN = 256
// or 128 filters (a template parameter: AlexNet's 384-filter layers fit 3 x 128, not 2 x 256).
// For one tap and 64 channels, its A slice is ONE box of a 4-D tensor map of the NHWC
// input, {64 channels, TW columns, TH rows, 1 image} at (c0, f0 + s - pad, e0 + r - pad, n):
// 128 box rows of 64 halves = 128 bytes, which is exactly the K-major tile, 128-byte swizzled,
// that a wgmma descriptor reads (the same layout as the hopper chapter's A slices), pixel p =
// TW * (row in the tile) + (column in the tile). Coordinates outside the input read as zeros,
// so the zero border of a padded convolution costs nothing, and channels past C too. Its B
// slice is a box {64, BN} of the filters laid out once as M x (taps x Cp) halves, k in
// (r, s, c) order with the channels padded to Cp, a multiple of 64, by zeros.
//
// The block: as kernels/hopper/persistent_gemm.cuh (steps 5-7 of the hopper chapter), one per
// SM walking over tiles; warpgroup 0 is the producer (one thread issues the two copies of each
// slice round a ring of STAGES slots, counted on full[] and released on empty[]), warpgroups 1
// and 2 the consumers, 64 pixels each (TH / 2 rows of the tile), each keeping one group of
// wgmma products in flight. Only the producer's addressing and the epilogue differ: the epilogue
// is the step's own (Epilogue::store, given the consumer's accumulators and where they belong).
#ifndef GPULAB_COMMON_HOPPER_CONV_CUH
#define GPULAB_COMMON_HOPPER_CONV_CUH
#include <cuda_fp16.h>
#include <common/hopper.h>
#include <hopper/cluster.cuh>       // the pairs of flat tiles (CLUSTER = 2) share B by multicast

#ifndef GPULAB_CPU_BACKEND
// The bulk tensor copy of one box of a 4-D tensor map (gpulab.tensormap.encode_4d); coordinates
// innermost first. The CPU backend's version is at the end of gpulab_hopper_cpu.h.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            unsigned long long* bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 :: "r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
                 : "memory");
}
#endif

#define CONV_BM 128               // pixels per tile (TH x TW)
#define CONV_BK 64                // channels per slice: one 128-byte row of halves ...
#define CONV_STAGES 4             // ... in a ring of 4 slots (8 slots of half the bytes for BK = 32)
#define CONV_THREADS 384
#define CONV_CONSUMER_WARPS 8
// Bytes of one slice (A and B) for BN filters per tile and BK channels per slice, and the slots
// of the ring: BK = 32 (64-byte rows, the 64-byte swizzle: a layer of 96 channels then takes 3
// slices per tap instead of 2 with 32 zero channels) keeps as many bytes in flight in 8 slots.
#define CONV_SLICE_BYTES(BN, BK) ((CONV_BM + (BN)) * (BK) * 2)
#define CONV_SLOTS(BK) (CONV_STAGES * CONV_BK / (BK))

// What the kernels need of the layer. Input N x Hin x Win x C (NHWC halves, as stored: the
// convpool input already carries its zero border, so pad = 0 there), R x S filters, stride 1,
// output E x F per filter; Cp = C rounded up to 64 (the filters' padded rows).
struct ConvShape {
    int N, C, Cp, M, E, F, R, S, pad;
};

// Tile number -> (image, first output row, first output column, first filter). Filters vary
// fastest, then columns, rows and images: the SMs work together on neighbouring tiles, whose
// input rows overlap (a tap's box is the next one's shifted by a pixel) and stay in L2.
template <int TW, int BN>
__device__ __forceinline__ void conv_tile(const ConvShape& s, int tile, int& n, int& e0, int& f0, int& m0)
{
    constexpr int TH = CONV_BM / TW;
    const int tiles_m = (s.M + BN - 1) / BN, tiles_f = (s.F + TW - 1) / TW,
              tiles_e = (s.E + TH - 1) / TH;
    m0 = (tile % tiles_m) * BN;
    tile /= tiles_m;
    f0 = (tile % tiles_f) * TW;
    tile /= tiles_f;
    e0 = (tile % tiles_e) * TH;
    n = tile / tiles_e;
}

template <int TW, int BN>
__device__ __forceinline__ int conv_tiles(const ConvShape& s)
{
    constexpr int TH = CONV_BM / TW;
    return s.N * ((s.E + TH - 1) / TH) * ((s.F + TW - 1) / TW) * ((s.M + BN - 1) / BN);
}

// One k16 step of a consumer's products: m64nBNk16 (hopper.h has BN = 256 and 128).
template <int BN>
__device__ __forceinline__ void conv_mma(float* acc, unsigned long long desc_a, unsigned long long desc_b)
{
    static_assert(BN == 256 || BN == 128, "BN is 256 or 128 filters");
    if constexpr (BN == 256) wgmma_m64n256k16(acc, desc_a, desc_b, 1);
    else wgmma_m64n128k16(acc, desc_a, desc_b, 1);
}

// The persistent warp-specialized convolution. Epilogue::store(acc, consumer, n, e0, f0, m0) is
// called by each consumer warpgroup with its 64 x BN accumulators (pixels 64 c .. 64 c + 63 of
// the tile, in the layout of hopper.h's wgmma_m64nBNk16) once the tile's products are done.
template <int TW, int BN, class Epilogue, int BK = CONV_BK>
__device__ __forceinline__ void conv_wgmma(const CUtensorMap& map_x, const CUtensorMap& map_w, const ConvShape& s,
                                           const Epilogue& epilogue, unsigned char* smem_raw)
{
    static_assert(CONV_BM % TW == 0 && (CONV_BM / TW) % 2 == 0, "TW must divide 128 into an even number of rows");
    static_assert(BK == 64 || BK == 32, "slices of 64 (128-byte swizzle) or 32 channels (64-byte swizzle)");
    constexpr int SLOTS = CONV_SLOTS(BK);
    constexpr int SWIZZLE = BK == 64 ? SMEM_SWIZZLE_128B : SMEM_SWIZZLE_64B;
    constexpr unsigned ATOM = 8 * BK * 2;            // 8 rows of the swizzle's width: the descriptor's stride
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    __shared__ __align__(8) unsigned long long full[SLOTS];
    __shared__ __align__(8) unsigned long long empty[SLOTS];
    const int tid = threadIdx.x, wg = tid / 128;
    const int tiles = conv_tiles<TW, BN>(s);
    const int chunks = s.Cp / BK, KT = s.R * s.S * chunks;
    if (tid == 0) {
        for (int i = 0; i < SLOTS; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], CONV_CONSUMER_WARPS);   // one arrival per consumer warp
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {                                  // the producer
        setmaxnreg_dec<40>();
        if (tid == 0) {
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int n, e0, f0, m0;
                conv_tile<TW, BN>(s, tile, n, e0, f0, m0);
                for (int t = 0; t < KT; ++t, ++it) {
                    const int slot = it % SLOTS, tap = t / chunks, c0 = (t % chunks) * BK;
                    const int r = tap / s.S, sc = tap % s.S;
                    mbar_wait(&empty[slot], ((it / SLOTS) % 2) ^ 1);
                    __half* As = ring + (size_t)slot * (CONV_BM + BN) * BK;
                    mbar_arrive_expect_tx(&full[slot], CONV_SLICE_BYTES(BN, BK));
                    tma_load_4d(As, &map_x, c0, f0 + sc - s.pad, e0 + r - s.pad, n, &full[slot]);
                    tma_load_2d(As + CONV_BM * BK, &map_w, tap * s.Cp + c0, m0, &full[slot]);
                }
            }
        }
    } else {                                        // the consumers
        setmaxnreg_inc<232>();
        const int c = wg - 1;
        int it = 0;
        float acc[BN / 2];
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int n, e0, f0, m0;
            conv_tile<TW, BN>(s, tile, n, e0, f0, m0);
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
            for (int t = 0; t < KT; ++t, ++it) {
                const int slot = it % SLOTS;
                mbar_wait(&full[slot], (it / SLOTS) % 2);
                const __half* As = ring + (size_t)slot * (CONV_BM + BN) * BK + 64 * c * BK;
                const __half* Bs = ring + (size_t)slot * (CONV_BM + BN) * BK + CONV_BM * BK;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    conv_mma<BN>(acc, smem_desc(As + 16 * kk, 1, ATOM, SWIZZLE), smem_desc(Bs + 16 * kk, 1, ATOM, SWIZZLE));
                wgmma_commit();
                wgmma_wait<1>();                    // slice it - 1's products are done: its slot goes back
                if (t > 0 && tid % 32 == 0) mbar_arrive(&empty[(it - 1) % SLOTS]);
            }
            wgmma_wait<0>();
            if (tid % 32 == 0) mbar_arrive(&empty[(it - 1) % SLOTS]);
            epilogue.store(acc, c, n, e0, f0, m0);
        }
    }
}

// Dynamic shared memory of conv_wgmma: the ring, plus 1 KiB to align it to the swizzle's period.
#define CONV_SHARED_BYTES(BN) (CONV_STAGES * CONV_SLICE_BYTES(BN, CONV_BK) + 1024)
// ---- hconv32: float operands on the tf32 tensor cores (convpool steps 10 and 11, alexnet steps 26 and 27) ----
// Additive: everything above, and so step 9's and alexnet's fp16 instantiations, is unchanged.
//
// conv_wgmma_tf32: the same persistent warp-specialized loop over float NHWC input and float
// filters, read by wgmma as tf32 (hopper.h's wgmma_m64n256k8_tf32; the tensor cores keep the
// upper 19 bits of each float -- sign, exponent, 10 mantissa bits -- and drop the rest). A slice
// is still one 128-byte swizzled row per tile row, now 32 channels: a box of the input is {32,
// TW, TH, 1} floats, and a slice holds 4 k8 steps where step 9's held 4 k16 steps.
//
// conv_wgmma_3xtf32: fp32 accuracy from the same tensor cores. x = xb + xs and w = wb + ws, each
// split beforehand into a tf32 "big" part and the float remainder; each k8 step issues xb ws, xs wb
// and xb wb (xs ws, ~2^-22 of the product, is left out). The tensor cores appear to add into their
// float accumulators by truncation, not rounding: Hopper's rounding there is undocumented, earlier
// tensor cores were measured to truncate (Fasi et al. 2021), and one trial here fits it (3 wgmma per
// k8 step summed straight into one accumulator over K = 6,400 gave 4e-5 against the float64
// reference, far over float's ~1e-6). So a slice's products go into a fresh accumulator (scale_d
// = 0 on its first wgmma) that the threads then add into their own float sums with ordinary,
// rounded adds. Two such partial accumulators
// alternate, so that slice t's wgmma run while slice t - 1's are added: 3 x 64 floats per thread,
// hence BN = 128 filters per tile (3 x 128 would not fit the 232 registers a consumer may hold).
// A slot holds xb, xs, wb, ws tiles (64 KiB): 3 slots.
#define CONV32_BK 32              // floats per slice: one 128-byte row

#ifndef GPULAB_CPU_BACKEND
// m64n128k8 in tf32 (A, B K-major in shared memory): what hopper.h's wgmma_m64n256k8_tf32 is,
// for 128 filters; the CPU backend's is in gpulab_hopper_cpu.h (hconv32 region).
__device__ __forceinline__ void wgmma_m64n128k8_tf32(float d[64], unsigned long long desc_a, unsigned long long desc_b,
                                                     int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
// m64n192k8 in tf32: 384 filters in two tiles of 192 (alexnet step 26 on layers 3 and 4).
__device__ __forceinline__ void wgmma_m64n192k8_tf32(float d[96], unsigned long long desc_a, unsigned long long desc_b,
                                                     int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
        "}, %96, %97, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
#endif

// One k8 step of tf32 products: m64nBNk8 (BN = 256: hopper.h's; 192 and 128: the ones above).
template <int BN>
__device__ __forceinline__ void conv32_mma(float* acc, unsigned long long desc_a, unsigned long long desc_b, int scale_d)
{
    static_assert(BN == 256 || BN == 192 || BN == 128, "BN is 256, 192 or 128 filters");
    if constexpr (BN == 256) wgmma_m64n256k8_tf32(acc, desc_a, desc_b, scale_d);
    else if constexpr (BN == 192) wgmma_m64n192k8_tf32(acc, desc_a, desc_b, scale_d);
    else wgmma_m64n128k8_tf32(acc, desc_a, desc_b, scale_d);
}

// a rounded to the nearest tf32, ties away from zero (as cvt.rna.tf32.f32): add half of the 13
// dropped bits' weight, then drop them. The 3xTF32 steps' split of x into tf32_big(x) and the
// remainder; the filters' split on the host (gpulab.workloads.convpool.steps.tf32_split) is the
// same bit arithmetic.
__device__ __forceinline__ float tf32_big(float a)
{
    return __uint_as_float((__float_as_uint(a) + 0x1000u) & 0xFFFFE000u);
}

// Flat tiles (TW = 0; alexnet steps 26 and 27 on the 13 x 13 and 27 x 27 layers): a tile is 128
// consecutive pixels of a "flat" copy of the input, the images one after another, each row
// followed by P zero columns and each image by P zero rows (Wp = W + P columns, Hp = H + P rows a
// picture; the copy writes the pixels, the zeros are written once). Output pixel (n, e, f) sits
// at q = (n Hp + e) Wp + f, and its tap (r, s) reads the input at q + (r - P) Wp + (s - P): left of
// column 0 lands in the previous row's zero columns, above row 0 in the previous image's zero
// rows, before the first image at negative q, which the copy engine reads as zeros. So a tap's
// A slice for 128 consecutive q is ONE box {32 channels, 128 pixels} of a 2-D tensor map of the
// copy, for any position of the tile: tiles run across rows and images, and only the q that
// fall on zero columns and rows are wasted -- 169 of 14 x 14 = 196 for 13 x 13 (86%), 729 of 29
// x 29 for 27 x 27 (87%), where a 128-pixel rectangle keeps 169 of 256 (66%) and 729 of 896.
// Wp = F + S - 1 - P and Hp = E + R - 1 - P for a stride-1 layer (W = F + S - 1 - 2P).
__device__ __forceinline__ int conv_flat_wp(const ConvShape& s) { return s.F + s.S - 1 - s.pad; }
__device__ __forceinline__ int conv_flat_hp(const ConvShape& s) { return s.E + s.R - 1 - s.pad; }

// Pairs of flat tiles (CLUSTER = 2, the hopper chapter's step 8 on the convolution): the two
// blocks of a cluster take the tiles at slots 256 p and 256 p + 128 with the same filters m0, so
// they need the same B slices; each block's producer loads its own A and HALF of B (BN / 2
// filters) with one multicast copy that lands in both blocks' slots. From L2 a block then reads
// 16 + 16 KiB a slice instead of 16 + 32 (tf32, BN = 256), 32 + 16 instead of 32 + 32 (3xTF32).
// A slot is refilled only when the consumers of BOTH blocks are done with it (empty counts 2 x 8
// warps, each consumer warp arrives in both blocks). A "unit" of work is a flat tile (CLUSTER = 1)
// or a pair of them, filters fastest; rank = the block's place in its cluster. A pair's second
// tile past the last slot reads zeros and writes nothing.
template <int BN, int CLUSTER>
__device__ __forceinline__ int conv_flat_units(const ConvShape& s)
{
    const int tiles_q = (s.N * conv_flat_hp(s) * conv_flat_wp(s) + CONV_BM - 1) / CONV_BM;
    return (tiles_q + CLUSTER - 1) / CLUSTER * ((s.M + BN - 1) / BN);
}

template <int BN, int CLUSTER>
__device__ __forceinline__ void conv_flat_unit(const ConvShape& s, int unit, unsigned rank, int& q0, int& m0)
{
    const int tiles_m = (s.M + BN - 1) / BN;
    m0 = (unit % tiles_m) * BN;
    q0 = ((unit / tiles_m) * CLUSTER + (int)rank) * CONV_BM;
}

// A consumer warp's release of a slot: to its own block's producer, or (pairs) to both blocks'.
template <int CLUSTER>
__device__ __forceinline__ void conv_release(unsigned long long* bar)
{
    if constexpr (CLUSTER == 1) mbar_arrive(bar);
    else
        for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(bar, r);
}

// The ring of the float steps: TENSORS tiles of A (128 x 32) and of B (BN x 32) per slot.
template <int BN, int TENSORS, int STAGES>
struct Conv32Ring {
    static constexpr int A_FLOATS = CONV_BM * CONV32_BK, B_FLOATS = BN * CONV32_BK;
    static constexpr int SLICE_FLOATS = TENSORS * (A_FLOATS + B_FLOATS);
    static constexpr int SLICE_BYTES = SLICE_FLOATS * 4;
    static constexpr int SHARED_BYTES = STAGES * SLICE_BYTES + 1024;
};
// tf32: xb, wb; 4 slots (48 KiB each for BN = 256, 32 KiB for 128).
template <int BN>
using Conv32Tf32 = Conv32Ring<BN, 1, 4>;
using Conv32Split = Conv32Ring<128, 2, 3>;    // 3xTF32: xb, xs, wb, ws; 3 slots of 64 KiB

// Units of work of a float step's block: rectangles (TW > 0) or flat tiles, one or (CLUSTER = 2)
// a pair of them; the block walks units blockIdx.x / CLUSTER, + gridDim.x / CLUSTER, ...
template <int TW, int BN, int CLUSTER>
__device__ __forceinline__ int conv32_units(const ConvShape& s)
{
    static_assert(CLUSTER == 1 || TW == 0, "pairs of blocks share B on flat tiles only");
    if constexpr (TW == 0) return conv_flat_units<BN, CLUSTER>(s);
    else return conv_tiles<TW, BN>(s);
}

// The producer of both float steps: one thread walks the tiles and slices, the copy engine
// fills slot it % STAGES with the slice's A tile(s) then B tile(s) (map_xs / map_ws only when
// TENSORS = 2; with CLUSTER = 2 this block's half of each B tile, into both blocks).
template <int TW, int BN, int TENSORS, int STAGES, int CLUSTER>
__device__ __forceinline__ void conv32_produce(const CUtensorMap& map_x, const CUtensorMap& map_xs,
                                               const CUtensorMap& map_w, const CUtensorMap& map_ws,
                                               const ConvShape& s, float* ring, unsigned long long* full,
                                               unsigned long long* empty, unsigned rank)
{
    using P = Conv32Ring<BN, TENSORS, STAGES>;
    constexpr int B_PART = BN / CLUSTER;            // filters of B this block's copy brings
    const int units = conv32_units<TW, BN, CLUSTER>(s), chunks = s.Cp / CONV32_BK, KT = s.R * s.S * chunks;
    int it = 0;
    for (int unit = blockIdx.x / CLUSTER; unit < units; unit += gridDim.x / CLUSTER) {
        int n = 0, e0 = 0, f0 = 0, m0;               // flat tiles: e0 holds q0, the tile's first slot
        if constexpr (TW == 0) conv_flat_unit<BN, CLUSTER>(s, unit, rank, e0, m0);
        else conv_tile<TW, BN>(s, unit, n, e0, f0, m0);
        for (int t = 0; t < KT; ++t, ++it) {
            const int slot = it % STAGES, tap = t / chunks, c0 = (t % chunks) * CONV32_BK;
            const int col = f0 + tap % s.S - s.pad, row = e0 + tap / s.S - s.pad;
            mbar_wait(&empty[slot], ((it / STAGES) % 2) ^ 1);
            float* As = ring + (size_t)slot * P::SLICE_FLOATS;
            float* Bs = As + TENSORS * P::A_FLOATS;
            mbar_arrive_expect_tx(&full[slot], P::SLICE_BYTES);    // with CLUSTER = 2, half of B from the peer
            if constexpr (TW == 0) {                // the tap's 128 slots: q0 shifted by (r - P) Wp + s - P
                const int q = e0 + (tap / s.S - s.pad) * conv_flat_wp(s) + tap % s.S - s.pad;
                tma_load_2d(As, &map_x, c0, q, &full[slot]);
                if constexpr (TENSORS == 2) tma_load_2d(As + P::A_FLOATS, &map_xs, c0, q, &full[slot]);
            } else {
                tma_load_4d(As, &map_x, c0, col, row, n, &full[slot]);
                if constexpr (TENSORS == 2) tma_load_4d(As + P::A_FLOATS, &map_xs, c0, col, row, n, &full[slot]);
            }
            if constexpr (CLUSTER == 1) {
                tma_load_2d(Bs, &map_w, tap * s.Cp + c0, m0, &full[slot]);
                if constexpr (TENSORS == 2) tma_load_2d(Bs + P::B_FLOATS, &map_ws, tap * s.Cp + c0, m0, &full[slot]);
            } else {
                const int part = (int)rank * B_PART;
                tma_load_2d_multicast(Bs + part * CONV32_BK, &map_w, tap * s.Cp + c0, m0 + part, &full[slot],
                                      (1u << CLUSTER) - 1);
                if constexpr (TENSORS == 2)
                    tma_load_2d_multicast(Bs + P::B_FLOATS + part * CONV32_BK, &map_ws, tap * s.Cp + c0, m0 + part,
                                          &full[slot], (1u << CLUSTER) - 1);
            }
        }
    }
}

// The persistent warp-specialized loop of both float steps: the ring's barriers (full: the copy
// engine's bytes; empty: one arrival per consumer warp, of both blocks for CLUSTER = 2),
// warpgroup 0's producer, and each consumer warpgroup's walk over its tiles: zero the sums, have
// slices(acc, c, it, KT, ring, full, empty) run the tile's KT slices into them (it counts the
// slices over all tiles, so the ring's phases carry on from tile to tile), then Epilogue::store
// as conv_wgmma's (flat tiles, TW = 0: Epilogue::store_flat(acc, consumer, q0, m0)).
template <int TW, int BN, int TENSORS, int STAGES, int CLUSTER, class Epilogue, class Slices>
__device__ __forceinline__ void conv32_persistent(const CUtensorMap& map_x, const CUtensorMap& map_xs,
                                                  const CUtensorMap& map_w, const CUtensorMap& map_ws,
                                                  const ConvShape& s, const Epilogue& epilogue,
                                                  unsigned char* smem_raw, const Slices& slices)
{
    static_assert(TW == 0 || (CONV_BM % TW == 0 && (CONV_BM / TW) % 2 == 0),
                  "TW must divide 128 into an even number of rows (or be 0: flat tiles)");
    // The barriers: static shared memory for one block; for pairs after the ring in the dynamic
    // shared memory (2 x STAGES x 8 bytes more), where mapa finds the peer's at the same offset.
    __shared__ __align__(8) unsigned long long full_here[CLUSTER == 1 ? STAGES : 1];
    __shared__ __align__(8) unsigned long long empty_here[CLUSTER == 1 ? STAGES : 1];
    float* ring = (float*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    unsigned long long* full = full_here;
    unsigned long long* empty = empty_here;
    if constexpr (CLUSTER > 1) {
        full = (unsigned long long*)(ring + (size_t)STAGES * Conv32Ring<BN, TENSORS, STAGES>::SLICE_FLOATS);
        empty = full + STAGES;
    }
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], CLUSTER * CONV_CONSUMER_WARPS);
        }
        mbar_fence_init();
    }
    unsigned rank = 0;
    if constexpr (CLUSTER == 1) __syncthreads();
    else {
        rank = cluster_ctarank();
        __syncwarp();
        cluster_arrive();                           // both blocks' barriers exist before any copy or arrival
        cluster_wait();
    }
    const int wg = threadIdx.x / 128;
    const int units = conv32_units<TW, BN, CLUSTER>(s), KT = s.R * s.S * (s.Cp / CONV32_BK);
    if (wg == 0) {                                  // the producer
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0)
            conv32_produce<TW, BN, TENSORS, STAGES, CLUSTER>(map_x, map_xs, map_w, map_ws, s, ring, full, empty,
                                                              rank);
    } else {                                        // the consumers
        setmaxnreg_inc<232>();
        const int c = wg - 1;
        int it = 0;
        float acc[BN / 2];
        for (int unit = blockIdx.x / CLUSTER; unit < units; unit += gridDim.x / CLUSTER) {
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
            slices(acc, c, it, KT, ring, full, empty);
            if constexpr (TW == 0) {
                int q0, m0;
                conv_flat_unit<BN, CLUSTER>(s, unit, rank, q0, m0);
                epilogue.store_flat(acc, c, q0, m0);
            } else {
                int n, e0, f0, m0;
                conv_tile<TW, BN>(s, unit, n, e0, f0, m0);
                epilogue.store(acc, c, n, e0, f0, m0);
            }
        }
    }
    if constexpr (CLUSTER > 1) {
        __syncwarp();
        cluster_arrive();                           // the peer may still arrive on or copy into us
        cluster_wait();
    }
}

// tf32: float operands read as tf32, BN = 256 (convpool step 10) or 128 filters per tile; Epilogue
// as conv_wgmma's. Filters as M x (taps x Cp) floats, Cp = C rounded up to 32. CLUSTER = 2: pairs
// of flat tiles sharing B (the kernel must be declared __cluster_dims__(2, 1, 1)).
template <int TW, class Epilogue, int BN = 256, int CLUSTER = 1>
__device__ __forceinline__ void conv_wgmma_tf32(const CUtensorMap& map_x, const CUtensorMap& map_w, const ConvShape& s,
                                                const Epilogue& epilogue, unsigned char* smem_raw)
{
    using P = Conv32Tf32<BN>;
    constexpr int STAGES = 4;
    // One wgmma group per slice in flight: slice it - 1's slot goes back once slice it is issued.
    auto slices = [](float* acc, int c, int& it, int KT, const float* ring, unsigned long long* full,
                     unsigned long long* empty) {
        for (int t = 0; t < KT; ++t, ++it) {
            const int slot = it % STAGES;
            mbar_wait(&full[slot], (it / STAGES) % 2);
            const float* As = ring + (size_t)slot * P::SLICE_FLOATS + 64 * c * CONV32_BK;
            const float* Bs = ring + (size_t)slot * P::SLICE_FLOATS + P::A_FLOATS;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < CONV32_BK / 8; ++kk)
                conv32_mma<BN>(acc, smem_desc(As + 8 * kk, 1, 1024, SMEM_SWIZZLE_128B),
                               smem_desc(Bs + 8 * kk, 1, 1024, SMEM_SWIZZLE_128B), 1);
            wgmma_commit();
            wgmma_wait<1>();                        // slice it - 1's products are done: its slot goes back
            if (t > 0 && threadIdx.x % 32 == 0) conv_release<CLUSTER>(&empty[(it - 1) % STAGES]);
        }
        wgmma_wait<0>();
        if (threadIdx.x % 32 == 0) conv_release<CLUSTER>(&empty[(it - 1) % STAGES]);
    };
    conv32_persistent<TW, BN, 1, STAGES, CLUSTER>(map_x, map_x, map_w, map_w, s, epilogue, smem_raw, slices);
}

// 3xTF32's products of one slice into the fresh partial accumulator d: per k8 step, xb ws, xs wb,
// xb wb, the first with scale_d = 0 (d's old contents dropped).
__device__ __forceinline__ void conv32_split_slice(float* d, const float* As, const float* Bs)
{
    using P = Conv32Split;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < CONV32_BK / 8; ++kk) {
        const unsigned long long ab = smem_desc(As + 8 * kk, 1, 1024, SMEM_SWIZZLE_128B),
                                 as = smem_desc(As + P::A_FLOATS + 8 * kk, 1, 1024, SMEM_SWIZZLE_128B),
                                 bb = smem_desc(Bs + 8 * kk, 1, 1024, SMEM_SWIZZLE_128B),
                                 bs = smem_desc(Bs + P::B_FLOATS + 8 * kk, 1, 1024, SMEM_SWIZZLE_128B);
        wgmma_m64n128k8_tf32(d, ab, bs, kk > 0);
        wgmma_m64n128k8_tf32(d, as, bb, 1);
        wgmma_m64n128k8_tf32(d, ab, bb, 1);
    }
    wgmma_commit();
}

// 3xTF32 (convpool step 11): each slice's products summed apart and added to acc with rounded adds.
// CLUSTER as conv_wgmma_tf32's.
template <int TW, class Epilogue, int CLUSTER = 1>
__device__ __forceinline__ void conv_wgmma_3xtf32(const CUtensorMap& map_xb, const CUtensorMap& map_xs,
                                                  const CUtensorMap& map_wb, const CUtensorMap& map_ws,
                                                  const ConvShape& s, const Epilogue& epilogue, unsigned char* smem_raw)
{
    using P = Conv32Split;
    constexpr int BN = 128, STAGES = 3;
    auto slices = [](float* acc, int c, int& it, int KT, const float* ring, unsigned long long* full,
                     unsigned long long* empty) {
        float part0[BN / 2], part1[BN / 2];
        // Slice i's tiles (this consumer's 64 pixels of A), once its copies have landed.
        auto tiles_of = [&](int i, const float*& As, const float*& Bs) {
            const int slot = i % STAGES;
            mbar_wait(&full[slot], (i / STAGES) % 2);
            As = ring + (size_t)slot * P::SLICE_FLOATS + 64 * c * CONV32_BK;
            Bs = ring + (size_t)slot * P::SLICE_FLOATS + 2 * P::A_FLOATS;
        };
        // Slice i's products (in part) are done: its slot goes back, part is added to acc.
        auto retire = [&](int i, const float* part) {
            if (threadIdx.x % 32 == 0) conv_release<CLUSTER>(&empty[i % STAGES]);
#pragma unroll
            for (int j = 0; j < BN / 2; ++j) acc[j] += part[j];
        };
        const float *As, *Bs;
        // Two slices per turn, into part0 then part1, each retired while the next one runs.
        for (int t = 0; t < KT; t += 2, it += 2) {
            tiles_of(it, As, Bs);
            conv32_split_slice(part0, As, Bs);
            if (t > 0) {
                wgmma_wait<1>();
                retire(it - 1, part1);
            }
            if (t + 1 < KT) {
                tiles_of(it + 1, As, Bs);
                conv32_split_slice(part1, As, Bs);
                wgmma_wait<1>();
                retire(it, part0);
            } else {                                // KT odd: the tile's last slice
                wgmma_wait<0>();
                retire(it, part0);
                it -= 1;                            // it + 2 below counts one slice too many
            }
        }
        if (KT % 2 == 0) {
            wgmma_wait<0>();
            retire(it - 1, part1);
        }
    };
    conv32_persistent<TW, BN, 2, STAGES, CLUSTER>(map_xb, map_xs, map_wb, map_ws, s, epilogue, smem_raw, slices);
}
// ---- end hconv32 ----
#endif  // GPULAB_COMMON_HOPPER_CONV_CUH
