/* memory.c — `o1_memory MODEL.cmf [--ctx 4096,16384,65536] [--seal 1024] [--m 32] [--window 128] [--sink 4]
 *            [--chunk 256] [-t THREADS] [--skip-exact-above N]`
 * Prints a table of a session's memory at each context length, exact attention vs the O(1) far field on all
 * full-attention layers (DORY.md §3.1): cmf_session_state_bytes (KV cache + far-field state + query trace) and
 * the measured growth of touched anonymous memory (RssAnon) while n tokens are fed; each figure comes from a
 * fresh child process (o1_mem.h says exactly how). The far-field session keeps exact KV only for the first
 * `seal` positions, so its figures do not depend on the context; the exact cache grows linearly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o1_mem.h"

static int parse_list(const char *s, int *v, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > (1 << 24)) return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int ctx[16], n_ctx = 3, threads = 0, chunk = 256;
    long skip_exact = 0;
    ctx[0] = 4096, ctx[1] = 16384, ctx[2] = 65536;
    cmf_session_params o1 = {0};
    o1.o1 = "all", o1.o1_seal = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ctx") && v) n_ctx = parse_list(argv[++i], ctx, 16);
        else if (!strcmp(a, "--seal") && v) o1.o1_seal = atoi(argv[++i]);
        else if (!strcmp(a, "--m") && v) o1.o1_m = atoi(argv[++i]);
        else if (!strcmp(a, "--window") && v) o1.o1_window = atoi(argv[++i]);
        else if (!strcmp(a, "--sink") && v) o1.o1_sink = atoi(argv[++i]), o1.o1_sink_set = 1;
        else if (!strcmp(a, "--chunk") && v) chunk = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--skip-exact-above") && v) skip_exact = atol(argv[++i]);
        else if (a[0] != '-' && !model) model = a;
        else {
            fprintf(stderr, "usage: o1_memory MODEL.cmf [--ctx 4096,16384,65536] [--seal 1024] [--m M] [--window W]"
                            " [--sink S] [--chunk 256] [-t THREADS] [--skip-exact-above N]\n");
            return 2;
        }
    }
    if (!model || n_ctx < 1 || chunk < 1 || o1.o1_seal < 1) {
        fprintf(stderr, "o1_memory: need MODEL.cmf, a --ctx list of positive lengths, --chunk >= 1, --seal >= 1\n");
        return 2;
    }
    cmf_session_params exact = {0};
    printf("model %s; o1: all layers, seal %d, m %d, window %d, sink %d; tokens fed in chunks of %d\n\n", model,
           o1.o1_seal, o1.o1_m ? o1.o1_m : 32, o1.o1_window ? o1.o1_window : 128,
           o1.o1_sink_set ? o1.o1_sink : 4, chunk);
    printf("| context | mode | o1 layers | KV + state bytes | RssAnon growth (KiB) | feed time (s) |\n");
    printf("|--------:|------|----------:|-----------------:|---------------------:|--------------:|\n");
    int rc = 0;
    for (int i = 0; i < n_ctx; i++)
        for (int k = 0; k < 2; k++) {
            if (k == 0 && skip_exact && ctx[i] > skip_exact) {
                printf("| %d | exact | - | (skipped) | | |\n", ctx[i]);
                continue;
            }
            o1_mem_result r;
            if (o1_mem_measure(model, threads, k ? &o1 : &exact, ctx[i], chunk, &r) != 0) {
                printf("| %d | %s | error: %s | | | |\n", ctx[i], k ? "o1" : "exact", r.error);
                rc = 1;
                continue;
            }
            printf("| %d | %s | %d | %zu | %ld | %.2f |\n", ctx[i], k ? "o1 all" : "exact", r.o1_layers, r.state_bytes,
                   r.rss_growth_kb, r.seconds);
            fflush(stdout);
        }
    return rc;
}
