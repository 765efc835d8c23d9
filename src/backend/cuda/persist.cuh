/* persist.cuh — internal to the persistent decode kernel: the types its device code (persist.cu) and its host side
 * (persist_host.cu: eligibility, the layer table, the launch, the profile) share. Not part of any API. */
#ifndef CMF_BACKEND_CUDA_PERSIST_CUH
#define CMF_BACKEND_CUDA_PERSIST_CUH

#include "backend/cuda/attn_decode.cuh"
#include "backend/cuda/backend_cuda.cuh"

namespace cmf_cuda_be {

enum { PK_THREADS = 256, PK_WARPS = PK_THREADS / 32, PK_PRE = 4 /* tasks per warp with preloaded row scales */ };

/* One layer's device pointers. */
struct PLayer {
    const uint8_t *w[7]; /* q, k, v, o, gate, up, down: q8_row payloads ([rows][cols] int8, then [rows] f16 scales) */
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    int64_t kv_off; /* the layer's first element in the session's K / V cache */
};

/* The launch's arguments. */
struct PArgs {
    const PLayer *layers;
    int n_layers, D, QD, KVD, F;
    int ks_qkv, ks_gu, ks_qd, ks_f; /* warps per row in matvec_i8.cu (its split-column segments) of the q/k/v, gate/up
                                     * (D columns), o (QD) and down (F) products */
    cmf_cuda_attn a;
    float eps, rope_eps;
    int gemma, gelu, rot, interleaved;
    const float *inv_freq;
    float *x, *q, *k, *v, *att, *hb;
    uint16_t *kc, *vc;
    const int32_t *dpos;
    int nsplit, mk; /* attention: splits of the scratch layout, least keys per split (ad_split_keys) */
    float *work;
    int *done;
    unsigned *bar; /* [0]: arrivals, [32]: the last released barrier (both zero at launch) */
    int kv_pf;     /* the attention's cache rows prefetched into L2 at the layer's start (CMF_CUDA_PERSIST_KVPF) */
    unsigned cap;  /* bytes of each of the two weight buffers in shared memory */
    unsigned xs_off; /* activation scales' offset in the activation area */
    unsigned long long *prof; /* CMF_CUDA_PERSIST_PROF=1: each block's %globaltimer at the kernel's start and at each
                                 stage's start (after its barrier) and end, [grid][1 + 10 * n_layers]; NULL: off */
    int bar_mode;             /* p_arrive / p_wait (CMF_CUDA_PERSIST_BAR, 1 unless =0) */
    int tma;                  /* weights by bulk copies (p_prefetch_tma; CMF_CUDA_PERSIST_TMA=1), else cp.async */
};

/* The backend's persistent-kernel state (cuda_impl.ps; persist_host.cu). */
struct persist_state {
    const cmf_weights *w; /* the weight set the table was built for (with weight_gen, kv_off hash) */
    uint64_t gen, kvh;
    int eligible;          /* of that weight set */
    PLayer *d_layers;
    unsigned *d_bar;
    int grid, threads;
    size_t smem;
    unsigned cap, xs_off;
    void (*fn)(PArgs);
    uint64_t steps;
    int kv_pf;                 /* CMF_CUDA_PERSIST_KVPF (1 unless =0) */
    int bar_mode;              /* CMF_CUDA_PERSIST_BAR (1 unless =0) */
    int tma;                   /* CMF_CUDA_PERSIST_TMA=1 */
    unsigned long long *d_prof; /* CMF_CUDA_PERSIST_PROF=1: the stamps (PArgs.prof) of the last step */
    int prof_n;
};

/* The kernel instance for GH query heads per item and L lanes per key row (persist.cu), and the shared memory of its
 * two attention halves. */
void persist_kernel(int GH, int L, void (**fn)(PArgs), size_t *attn_smem);

} // namespace cmf_cuda_be

#endif
