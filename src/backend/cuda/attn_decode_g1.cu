/* attn_decode_g1.cu — the decode kernels of 1 query head per block (attn_launch.cuh), in a translation unit of
 * their own so that nvcc compiles the head counts in parallel. */
#include "backend/cuda/attn_launch.cuh"

CMF_TPROF_BINDER(tprof_bind_attn_g1)

void attn_launch_g1(const AttnLaunch &l) { attn_launch_kv<1>(l); }
