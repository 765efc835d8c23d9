/* attn_decode_g8.cu — the decode kernels of 8 query heads per block (attn_launch.cuh), in a translation unit of
 * their own so that nvcc compiles the head counts in parallel. */
#include "backend/cuda/attn_launch.cuh"

CMF_TPROF_BINDER(tprof_bind_attn_g8)

void attn_launch_g8(const AttnLaunch &l) { attn_launch_kv<8>(l); }
