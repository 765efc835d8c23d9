/* o1_mem.h — measuring a session's memory at a given context length, for bench/o1/memory.c and
 * tests/o1/test_o1_memory.c (acceptance line 2 of the O(1) far field, DORY.md §3.1 "state does not grow").
 *
 * One measurement runs in a forked child process so that every configuration starts from the same heap (a freed
 * session's pages would otherwise be reused by the next one and hide its growth): the child loads the model,
 * warms it up with a throwaway 8-token session (faulting in the weights, the thread pool and lazily allocated
 * scratch), reads its anonymous resident memory (RssAnon in /proc/self/status: malloc'd pages actually touched;
 * file-backed weight pages excluded), creates the measured session, feeds n_tokens synthetic tokens, and reads
 * RssAnon again. Tokens are fed as prefill chunks of at most `chunk` tokens, split at the seal length of an O(1)
 * session (the runtime requires it); after the seal every position of a far-field layer is read out from the
 * constant-size state. Linux only (fork, /proc). */
#ifndef CMF_BENCH_O1_MEM_H
#define CMF_BENCH_O1_MEM_H

#include <stddef.h>

#include "cmf.h"

typedef struct o1_mem_result {
    size_t state_bytes;       /* cmf_session_state_bytes after the last token: KV cache + far-field state, bytes */
    size_t state_bytes_new;   /* the same right after cmf_session_new_ex (before any token) */
    long rss_growth_kb;       /* RssAnon after the last token minus RssAnon before the session was created, KiB */
    int pos;                  /* cmf_session_pos at the end (== n_tokens on success) */
    int o1_layers;            /* cmf_session_o1_layers */
    double seconds;           /* wall time of feeding the tokens */
    char error[256];          /* "" on success, else what failed (the library's message) */
} o1_mem_result;

/* Measures one configuration as described above: model at `path` loaded with n_threads (0 = all CPUs), a
 * session with params *sp whose n_ctx is set to n_tokens, fed n_tokens tokens (ids (37·i + 11) mod vocab) in
 * chunks of `chunk` (>= 1). *r receives the figures. Returns 0 on success, -1 when the child failed or could not
 * run (r->error says why). */
int o1_mem_measure(const char *path, int n_threads, const cmf_session_params *sp, int n_tokens, int chunk,
                   o1_mem_result *r);

#endif
