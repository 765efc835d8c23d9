/* persist.h — C entry points of the cuda backend's persistent decode kernel (persist.cu, CMF_CUDA_PERSIST=1). */
#ifndef CMF_BACKEND_CUDA_PERSIST_H
#define CMF_BACKEND_CUDA_PERSIST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cmf_backend;

/* One-token decode steps that ran through the persistent kernel on this cuda backend since it was made (0 for any
 * other backend). For tests and benchmarks. */
uint64_t cmf_backend_cuda_persist_steps(struct cmf_backend *be);
/* Turns the persistent kernel on (on != 0) or off for this cuda backend's next forwards (the default is
 * CMF_CUDA_PERSIST=1 at creation); ignored for other backends. Thread-safe against a forward in progress (the
 * backend's mutex). A step the kernel does not take (see persist.cu: q8_row Llama / Qwen3 layers, one token of one
 * session, f16 KV cache, no tensor parallelism) runs the graph / eager path either way. */
void cmf_backend_cuda_set_persist(struct cmf_backend *be, int on);

/* With CMF_CUDA_PERSIST_PROF=1 at the step's table build: where the last persistent step spent its time, from each
 * block's %globaltimer stamps, in us, means over the layers, for the stages s = 0..4 (A q/k/v, B attention, C o,
 * D gate/up, E down): out[4s] = a block's work in the stage (mean over blocks), out[4s + 1] = the slowest block's,
 * out[4s + 2] = the barrier before it (the first block to start minus the last block to finish the stage before),
 * out[4s + 3] = the spread of the blocks' starts; out[20] = block 0's whole layer stack. Returns 1, or 0 when no
 * profile is kept (out untouched). out: 21 doubles. */
int cmf_backend_cuda_persist_profile(struct cmf_backend *be, double *us);

#ifdef __cplusplus
}
#endif

#endif
