/* open() of a file with 100k tensors must be fast (hash-table name lookup and duplicate check, no quadratic
 * pass): written once by our writer, then opened and every name looked up. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
    enum { N = 100000 };
    const char *path = tmp_path("fmt_100k.cmf");
    cmf_writer *w;
    CHECK(cmf_writer_new(path, &w) == CMF_OK);
    char name[64];
    const uint32_t shape[1] = {4};
    for (int i = 0; i < N; i++) {
        float v[4] = {(float)i, 1, 2, 3};
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.weight", i / 1000, i % 1000);
        if (cmf_writer_add(w, name, CMF_DT_F32, 1, shape, v, sizeof v) != CMF_OK) {
            CHECK_MSG(0, "%s", cmf_last_error());
            break;
        }
    }
    cmf_writer_set_header(w, cJSON_Parse("{\"version\":2,\"quant_type\":\"F32\",\"arch\":{\"arch_name\":\"x\","
                                         "\"hidden_size\":4,\"intermediate_size\":4,\"num_layers\":1,"
                                         "\"num_attention_heads\":1,\"num_kv_heads\":1,\"head_dim\":4,"
                                         "\"vocab_size\":4,\"layer_types\":[\"FullAttention\"],"
                                         "\"rms_norm_eps\":1e-5,\"max_position_embeddings\":8}}"));
    CHECK_MSG(cmf_writer_finish(w) == CMF_OK, "%s", cmf_last_error());
    double t0 = now();
    cmf_file *f = NULL;
    CHECK_MSG(cmf_file_open(path, &f) == CMF_OK, "%s", cmf_last_error());
    double t1 = now();
    if (f) {
        CHECK(f->n_tensors == N);
        int miss = 0;
        for (int i = 0; i < N; i++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.weight", i / 1000, i % 1000);
            const cmf_tensor *t = cmf_file_find(f, name);
            if (!t || t != &f->tensors[i]) miss++;
        }
        CHECK(miss == 0);
        cmf_file_close(f);
    }
    double t2 = now();
    fprintf(stderr, "open of %d tensors: %.3f s; %d lookups: %.3f s\n", N, t1 - t0, N, t2 - t1);
    /* "well under a second" in a plain build; sanitizer builds get more room */
    CHECK(t1 - t0 < (SANITIZED ? 3.0 : 1.0));
    remove(path);
    CMF_TEST_END();
}
