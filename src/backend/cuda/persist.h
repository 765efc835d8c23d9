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

/* With CMF_CUDA_PERSIST_PROF=1 at the step's table build: where block 0 of the last persistent step spent its time
 * (waits for the device; %globaltimer stamps), in us per layer, means over the layers: us[2k] = the wait before
 * stage k (its grid barrier; for A of layer 0 the kernel's start), us[2k + 1] = stage k's own work, for the stages
 * A (q/k/v), B (attention), C (o), D (gate/up), E (down); us[10] = the whole layer stack. Returns 1, or 0 when no
 * profile is kept (us untouched). */
int cmf_backend_cuda_persist_profile(struct cmf_backend *be, double *us);

#ifdef __cplusplus
}
#endif

#endif
