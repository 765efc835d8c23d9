/* bench.c — `cmf bench model.cmf [-p 512] [-n 128] [-r 5] [-t THREADS] [--json]`: llama-bench's two tests with its
 * contract (llama.cpp tools/llama-bench), so the numbers line up with a llama-bench run on the same weights:
 *
 *  - ppP (prompt processing): P random tokens in one prefill batch from an empty KV cache; t/s = P / time;
 *  - tgN (text generation): N single-token decode steps starting from an empty KV cache (llama-bench's tg does
 *    not prefill a prompt first), the first fed a random token, each later one the greedy token of the step
 *    before (cmf_session_sample, as a greedy generation: the pick is part of the time; llama-bench feeds random
 *    tokens and samples nothing); t/s = N / time;
 *  - each test runs once as a warm-up (not timed; llama-bench warms up the same way), then r timed repetitions,
 *    each after clearing the KV cache; the table shows mean ± sample standard deviation of the per-repetition
 *    t/s, as llama-bench does.
 *
 * Token ids are uniform random in [0, vocab) from a seeded xorshift generator (--seed), so no tokenizer is needed.
 * The table columns follow llama-bench's markdown output: model, size, params, backend, threads, test, t/s.
 * --json gives llama-bench's JSON fields that have a value in cmf (tools/llama-bench/llama-bench.cpp, test's
 * fields): build_commit, cpu_info, model_filename/type/size/n_params, backends, n_threads, type_k/type_v, n_prompt,
 * n_gen, n_depth, test_time, avg_ns/stddev_ns, avg_ts/stddev_ts, samples_ns/samples_ts; and cmf's own tp,
 * cpu_path (the kernel path's name), cpu_features, test and repetitions. Not given: gpu_info, n_batch/n_ubatch (a prefill call takes the whole prompt and cuts it
 * into forwards inside the session), flash_attn, mmap and the other llama.cpp-only knobs. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "build_info.h"
#include "cli.h"
#include "format/format.h"

/* The kernels' CPU path line (src/backend/cpu). Declared weak so that the bench still builds and prints "CPU" with
 * a backend that does not provide it. */
extern const char *cmf_cpu_features_str(void) __attribute__((weak));
extern int cmf_cpu_path(void) __attribute__((weak));
extern const char *cmf_cpu_path_name(int path) __attribute__((weak));

static const char *USAGE =
    "usage: cmf bench MODEL.cmf [-p 512] [-n 128] [-r 5] [-t THREADS] [-c CTX] [--seed S] [--json]\n"
    "\n"
    "Measures prompt processing (ppP: P tokens in one prefill batch) and text generation (tgN: N single-token\n"
    "decode steps from an empty context) as llama-bench does: one warm-up run, then r repetitions each from an\n"
    "empty KV cache; prints mean +/- standard deviation of tokens/second. Prompt ids are random (seeded); tg\n"
    "starts from one random id and feeds each step's greedy token to the next step, as a greedy generation\n"
    "does (the pick is timed; on CUDA it runs on the device and only the id is copied back).\n"
    "\n"
    "  -p, --n-prompt P    prompt tokens of the pp test (default 512; 0 skips it)\n"
    "  -n, --n-gen N       generated tokens of the tg test (default 128; 0 skips it)\n"
    "  -r, --repetitions R timed repetitions of each test (default 5)\n"
    "  -t, --threads T     worker threads (default 0: all online CPUs)\n"
    "  -c, --ctx-size C    the largest P or N allowed (default 0: the model's trained context); a P or N past\n"
    "                      it is refused (exit 1); a C past the trained context warns\n"
    "  --seed S            seed of the random token ids (default 1234; -1: from the clock)\n"
    "  --json              print a JSON array (one object per test, llama-bench's fields: avg_ns, stddev_ns,\n"
    "                      samples_ns, avg_ts, ..., test_time, build_commit, cpu_info, type_k/type_v)\n"
    "%s";

typedef struct bench_result {
    char test[32];
    int n_prompt, n_gen;
    double *ts; /* t/s of each repetition */
    double *ns; /* nanoseconds of each repetition */
    double mean, sd;
    char test_time[32]; /* UTC start of the test, ISO-8601 as llama-bench's "%FT%TZ" */
} bench_result;

static uint64_t g_rng;
static int32_t rand_token(int vocab) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (int32_t)(g_rng % (uint64_t)vocab);
}

/* One pp run: P random tokens in one batch from an empty cache. Returns seconds, or -1 on error. */
static double run_pp(cmf_session *s, int32_t *buf, int p, int vocab) {
    for (int i = 0; i < p; i++) buf[i] = rand_token(vocab);
    cmf_session_reset(s);
    double t0 = cli_now();
    if (cmf_session_prefill(s, buf, p, NULL) != CMF_OK) return -1;
    if (!cmf_session_logits(s)) return -1; /* waits for a device (CUDA keeps the logits there until asked) */
    return cli_now() - t0;
}

/* One tg run: n decode steps from an empty cache, as a greedy generation runs them: the first token random, each
 * step's greedy token (cmf_session_sample; on CUDA the argmax runs on the device and only the id comes back) fed
 * to the next step. Returns seconds, or -1 on error. */
static double run_tg(cmf_session *s, cmf_sampler *greedy, int n, int vocab) {
    cmf_session_reset(s);
    int32_t tok = rand_token(vocab);
    double t0 = cli_now();
    for (int i = 0; i < n; i++)
        if (cmf_session_decode(s, tok) != CMF_OK || cmf_session_sample(s, greedy, &tok) != CMF_OK) return -1;
    return cli_now() - t0;
}

static void stats(bench_result *r, int reps) {
    double sum = 0, ss = 0;
    for (int i = 0; i < reps; i++) sum += r->ts[i];
    r->mean = sum / reps;
    for (int i = 0; i < reps; i++) ss += (r->ts[i] - r->mean) * (r->ts[i] - r->mean);
    r->sd = reps > 1 ? sqrt(ss / (reps - 1)) : 0.0;
}

/* llama-bench's avg_ns / stddev_ns: over the whole-nanosecond samples, in integer arithmetic as its avg() and
 * stdev() on uint64_t (mean = sum / n truncated; stddev = sqrt(sum_sq / (n-1) - mean^2 * n / (n-1)) truncated,
 * 0 for one sample). The samples are whole nanoseconds well below 2^53, so doubles hold them exactly. */
static void ns_stats(const double *ns, int n, double *avg, double *sd) {
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) {
        double v = floor(ns[i] + 0.5);
        sum += v;
        sq += v * v;
    }
    double mean = floor(sum / n);
    *avg = mean;
    *sd = 0;
    if (n > 1) {
        double var = sq / (n - 1) - mean * mean * n / (n - 1);
        *sd = var > 0 ? floor(sqrt(var)) : 0;
    }
}

/* The first "model name" of /proc/cpuinfo (llama-bench's cpu_info is the CPU's description), or "unknown" when
 * there is none (arm64 kernels do not print one). */
static void cpu_model_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t len = strcspn(c, "\n");
        if (len) snprintf(out, cap, "%.*s", (int)len, c);
        break;
    }
    fclose(f);
}

/* "1.23 GiB" / "4.56 MiB" / "789.00 KiB" (llama-bench prints GiB/MiB). */
static void human_size(char *out, size_t cap, uint64_t bytes) {
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(out, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(out, cap, "%.2f MiB", b / (1024.0 * 1024));
    else snprintf(out, cap, "%.2f KiB", b / 1024.0);
}

/* "6.74 B" / "303.10 M" / "260.00 K" as llama-bench's params column. */
static void human_count(char *out, size_t cap, uint64_t n) {
    double x = (double)n;
    if (x >= 1e9) snprintf(out, cap, "%.2f B", x / 1e9);
    else if (x >= 1e6) snprintf(out, cap, "%.2f M", x / 1e6);
    else snprintf(out, cap, "%.2f K", x / 1e3);
}

int cmd_bench(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "bench", argc, argv);
    const char *path = NULL;
    long p = 512, n = 128, reps = 5, threads = 0, ctx = 0;
    uint64_t seed = 1234;
    int json = 0, rc = 0;
    cli_model_opts mo;
    memset(&mo, 0, sizeof mo);
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            printf(USAGE, CLI_MODEL_USAGE);
            return CLI_OK;
        } else if (cli_model_opt(&a, &mo, &rc)) {
        } else if (cli_is(&a, "--n-prompt", "-p")) {
            rc = cli_int(&a, 0, 1 << 20, &p);
        } else if (cli_is(&a, "--n-gen", "-n")) {
            rc = cli_int(&a, 0, 1 << 20, &n);
        } else if (cli_is(&a, "--repetitions", "-r")) {
            rc = cli_int(&a, 1, 100000, &reps);
        } else if (cli_is(&a, "--threads", "-t")) {
            rc = cli_int(&a, 0, 4096, &threads);
        } else if (cli_is(&a, "--ctx-size", "-c")) {
            rc = cli_int(&a, 0, 1 << 20, &ctx);
        } else if (cli_is(&a, "--seed", NULL)) {
            int random = 0;
            if (!(rc = cli_seed(&a, &seed, &random)) && random) seed = (uint64_t)time(NULL);
        } else if (cli_is(&a, "--json", NULL)) {
            json = 1;
        } else if (!cli_is_flag(&a) && !path) {
            path = a.arg;
        } else {
            return cli_unknown(&a);
        }
        if (rc) return rc;
    }
    if (!path) return cli_usage_error("bench", "missing MODEL.cmf (see cmf bench --help)");
    if (!p && !n) return cli_usage_error("bench", "-p 0 and -n 0: nothing to measure");
    g_rng = seed ? seed : 0x9e3779b97f4a7c15ull;

    /* size and params from the directory: bytes and elements of every tensor */
    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(path, &f);
    if (st) return cli_lib_error("bench", st);
    uint64_t size = 0, params = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        size += f->tensors[i].nbytes;
        params += cmf_tensor_numel(&f->tensors[i]);
    }
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(f->header, "quant_type");
    char quant[32];
    snprintf(quant, sizeof quant, "%s", cJSON_IsString(qt) ? qt->valuestring : "?");
    cmf_file_close(f);

    int nthreads = threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nthreads < 1) nthreads = 1;
    cmf_model_params mp = {.n_threads = nthreads, .cache_type = mo.cache_type};
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    int32_t *buf = NULL;
    cmf_sampler *greedy = NULL;
    bench_result res[2];
    memset(res, 0, sizeof res);
    int n_res = 0;
    if ((st = cmf_model_load(path, &mp, &m)) != CMF_OK) {
        rc = cli_lib_error("bench", st);
        goto done;
    }
    /* the context: -c, else the trained context. A test longer than it is refused before anything runs (as
     * llama-bench fails a test whose tokens do not fit its n_ctx), instead of minutes of quadratic attention. */
    const int n_train = cmf_model_n_ctx_train(m);
    if (ctx > 0 && n_train > 0 && ctx > n_train)
        cli_warn("bench", "-c %ld is larger than the trained context %d; attention cost grows with the square", ctx,
                 n_train);
    const long limit = ctx > 0 ? ctx : n_train;
    if (limit > 0 && (p > limit || n > limit)) {
        rc = cli_fail("bench", "%s %ld exceeds the context of %ld tokens (%s; -c sets another)",
                      p > limit ? "-p" : "-n",
                      p > limit ? p : n, limit, ctx > 0 ? "-c" : "the model's trained context");
        goto done;
    }
    if ((rc = cli_session_new("bench", m, (int)(p > n ? p : n), &mo, &s)) != 0) goto done;
    int vocab = cmf_model_vocab_size(m);
    cmf_sampler_params gp = cmf_sampler_default_params();
    gp.temperature = 0.0f; /* greedy, no penalties: the tg test's pick */
    gp.penalty_last_n = 0;
    if ((st = cmf_sampler_new(vocab, &gp, &greedy)) != CMF_OK) {
        rc = cli_lib_error("bench", st);
        goto done;
    }
    if (!(buf = malloc((size_t)(p ? p : 1) * sizeof *buf))) {
        rc = cli_fail("bench", "out of memory");
        goto done;
    }
    for (int kind = 0; kind < 2; kind++) {
        long cnt = kind == 0 ? p : n;
        if (!cnt) continue;
        bench_result *r = &res[n_res++];
        snprintf(r->test, sizeof r->test, "%s%ld", kind == 0 ? "pp" : "tg", cnt);
        r->n_prompt = kind == 0 ? (int)cnt : 0;
        r->n_gen = kind == 1 ? (int)cnt : 0;
        r->ts = calloc((size_t)reps, sizeof *r->ts);
        r->ns = calloc((size_t)reps, sizeof *r->ns);
        if (!r->ts || !r->ns) {
            rc = cli_fail("bench", "out of memory");
            goto done;
        }
        time_t now = time(NULL);
        struct tm tmv;
        if (!gmtime_r(&now, &tmv) || !strftime(r->test_time, sizeof r->test_time, "%Y-%m-%dT%H:%M:%SZ", &tmv))
            snprintf(r->test_time, sizeof r->test_time, "unknown");
        for (long i = -1; i < reps; i++) { /* i = -1: the warm-up */
            double t = kind == 0 ? run_pp(s, buf, (int)cnt, vocab) : run_tg(s, greedy, (int)cnt, vocab);
            if (t < 0) {
                rc = cli_lib_error("bench", CMF_E_ARG);
                goto done;
            }
            if (i < 0) continue;
            r->ns[i] = t * 1e9;
            r->ts[i] = (double)cnt / (t > 0 ? t : 1e-12);
        }
        stats(r, (int)reps);
    }

    const char *slash = strrchr(path, '/');
    const char *arch = cmf_model_arch(m);
    char model_desc[128], size_s[32], params_s[32];
    human_count(params_s, sizeof params_s, params);
    snprintf(model_desc, sizeof model_desc, "%s %s %s", arch, params_s, quant);
    human_size(size_s, sizeof size_s, size);
    const char *cpu = cmf_cpu_features_str ? cmf_cpu_features_str() : "CPU";
    const int tp = cmf_model_tp(m);
    char backend[32];
    snprintf(backend, sizeof backend, "%s", !strcmp(cmf_model_backend(m), "cuda") ? "CUDA" : "CPU");
    if (tp > 1) snprintf(backend + strlen(backend), sizeof backend - strlen(backend), " tp%d", tp);
    if (json) {
        char cpu_info[256];
        cpu_model_name(cpu_info, sizeof cpu_info);
        /* the KV cache's element type: f32 on the CPU backend and for Dory models; on CUDA f16 unless
         * --cache-type f32 (cmf_model_params.cache_type) */
        const int f16_cache = !strcmp(cmf_model_backend(m), "cuda") && strcmp(arch, "dory") != 0 &&
                              mo.cache_type != CMF_CACHE_F32;
        const char *kv_type = f16_cache ? "f16" : "f32";
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < n_res; i++) {
            cJSON *o = cJSON_CreateObject();
            double avg_ns, sd_ns;
            ns_stats(res[i].ns, (int)reps, &avg_ns, &sd_ns);
            cJSON_AddStringToObject(o, "build_commit", CMF_BUILD_COMMIT);
            cJSON_AddStringToObject(o, "cpu_info", cpu_info);
            cJSON_AddStringToObject(o, "model_filename", slash ? slash + 1 : path);
            cJSON_AddStringToObject(o, "model_type", model_desc);
            cJSON_AddNumberToObject(o, "model_size", (double)size);
            cJSON_AddNumberToObject(o, "model_n_params", (double)params);
            cJSON_AddStringToObject(o, "backends", backend);
            cJSON_AddNumberToObject(o, "tp", tp);
            /* the path's name alone, and the CPU's features (the text line's parenthesis) as their own field */
            const char *pn = cmf_cpu_path && cmf_cpu_path_name ? cmf_cpu_path_name(cmf_cpu_path()) : NULL;
            const char *feats = strstr(cpu, "(cpu: ");
            cJSON_AddStringToObject(o, "cpu_path", pn ? pn : cpu);
            if (feats) {
                char fb[192];
                snprintf(fb, sizeof fb, "%.*s", (int)strcspn(feats + 6, ")"), feats + 6);
                cJSON_AddStringToObject(o, "cpu_features", fb);
            }
            cJSON_AddNumberToObject(o, "n_threads", nthreads);
            cJSON_AddStringToObject(o, "type_k", kv_type);
            cJSON_AddStringToObject(o, "type_v", kv_type);
            cJSON_AddNumberToObject(o, "n_prompt", res[i].n_prompt);
            cJSON_AddNumberToObject(o, "n_gen", res[i].n_gen);
            cJSON_AddNumberToObject(o, "n_depth", 0); /* no depth option: every test starts from an empty cache */
            cJSON_AddStringToObject(o, "test_time", res[i].test_time);
            cJSON_AddStringToObject(o, "test", res[i].test);
            cJSON_AddNumberToObject(o, "repetitions", (double)reps);
            cJSON_AddNumberToObject(o, "avg_ns", avg_ns);
            cJSON_AddNumberToObject(o, "stddev_ns", sd_ns);
            cJSON_AddNumberToObject(o, "avg_ts", res[i].mean);
            cJSON_AddNumberToObject(o, "stddev_ts", res[i].sd);
            cJSON *ns = cJSON_AddArrayToObject(o, "samples_ns"); /* whole nanoseconds, as llama-bench */
            for (long r = 0; ns && r < (long)reps; r++)
                cJSON_AddItemToArray(ns, cJSON_CreateNumber(floor(res[i].ns[r] + 0.5)));
            cJSON_AddItemToObject(o, "samples_ts", cJSON_CreateDoubleArray(res[i].ts, (int)reps));
            cJSON_AddItemToArray(arr, o);
        }
        char *txt = cJSON_Print(arr);
        if (txt) puts(txt);
        free(txt);
        cJSON_Delete(arr);
    } else {
        printf("cpu path: %s\n\n", cpu);
        printf("| %-30s | %10s | %10s | %-7s | %7s | %13s | %20s |\n", "model", "size", "params", "backend", "threads",
               "test", "t/s");
        printf("| ------------------------------ | ---------: | ---------: | ------- | ------: | ------------: | "
               "-------------------: |\n");
        for (int i = 0; i < n_res; i++) {
            char tps[48];
            snprintf(tps, sizeof tps, "%.2f ± %.2f", res[i].mean, res[i].sd);
            printf("| %-30s | %10s | %10s | %-7s | %7d | %13s | %20s |\n", model_desc, size_s, params_s, backend,
                   nthreads, res[i].test, tps);
        }
    }

done:
    for (int i = 0; i < 2; i++) {
        free(res[i].ts);
        free(res[i].ns);
    }
    free(buf);
    cmf_sampler_free(greedy);
    cmf_session_free(s);
    cmf_model_free(m);
    return rc;
}
