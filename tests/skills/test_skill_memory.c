/* test_skill_memory.c — skills cost memory only when used (CMF_FORMAT.md §3.1: a skill replaces tensors; the
 * runtime maps the file and builds a skill's weight views on first use, include/cmf.h cmf_session_set_skill).
 *
 * A random llama-shaped f32 model (hidden 512, 8 layers, 8 heads of 64, FFN 1024, vocab 256) is written with the
 * format writer, with three skills s1, s2, s3 that each replace every FFN tensor (24 tensors, 48 MiB per skill),
 * laid out after the backbone as `cmf skill add` lays them out. The file's page cache is dropped
 * (posix_fadvise DONTNEED after the writer's fsync), a fresh model is loaded, a few tokens run on the backbone,
 * then a few with skill s2. Measured:
 *   - RSS (/proc/self/statm) grows by s2's bytes (within 5%) between the backbone run and the s2 run;
 *   - in the model's own mapping (found in /proc/self/maps), the pages of s2's tensors are present in this
 *     process (/proc/self/pagemap bit 63) and those of s1 and s3 are not: none inside them, and at their edges
 *     at most what the kernel maps along with pages that were read (one 2 MiB large folio + fault-around);
 *   - mincore: s2 is in the page cache; of s1 and s3 at most the kernel's readahead around the pages that were
 *     read (bounded by the device's read_ahead_kb), never the bulk. With read_ahead_kb 8192 (this machine) that
 *     is several MiB of page cache (reclaimable, not process memory); with the common 128 it is a few pages.
 * The page cache checks need a file system whose cache can be dropped: when it is not (e.g. tmpfs), the test
 * reports that and exits 77 (ctest SKIP). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cmf.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { HIDDEN = 512, LAYERS = 8, HEADS = 8, HEAD_DIM = 64, FFN = 1024, VOCAB = 256, N_SKILLS = 3 };
static const char *FFN_NAMES[3] = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float uniform(float a) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return a * ((float)((double)(rng >> 11) / 9007199254740992.0) * 2.0f - 1.0f);
}

static int add_random(cmf_writer *w, const char *name, uint32_t rows, uint32_t cols, int ones) {
    size_t n = (size_t)rows * (cols ? cols : 1);
    float *v = malloc(n * sizeof *v);
    if (!v) return -1;
    float a = cols ? 1.7320508f / 22.6f : 1.0f; /* ~sqrt(3/fan_in) for fan_in 512 */
    for (size_t i = 0; i < n; i++) v[i] = ones ? 1.0f : uniform(a);
    uint32_t shape[2] = {rows, cols};
    cmf_status st = cmf_writer_add(w, name, CMF_DT_F32, cols ? 2 : 1, shape, v, (uint64_t)n * 4);
    free(v);
    return st == CMF_OK ? 0 : -1;
}

static cJSON *header(void) {
    cJSON *h = cJSON_CreateObject(), *a = cJSON_AddObjectToObject(h, "arch");
    cJSON_AddStringToObject(h, "format", "cmf");
    cJSON_AddNumberToObject(h, "version", 2);
    cJSON_AddStringToObject(a, "arch_name", "llama");
    cJSON_AddNumberToObject(a, "hidden_size", HIDDEN);
    cJSON_AddNumberToObject(a, "intermediate_size", FFN);
    cJSON_AddNumberToObject(a, "num_layers", LAYERS);
    cJSON_AddNumberToObject(a, "num_attention_heads", HEADS);
    cJSON_AddNumberToObject(a, "num_kv_heads", HEADS);
    cJSON_AddNumberToObject(a, "head_dim", HEAD_DIM);
    cJSON_AddNumberToObject(a, "vocab_size", VOCAB);
    cJSON *lt = cJSON_AddArrayToObject(a, "layer_types");
    for (int l = 0; l < LAYERS; l++) cJSON_AddItemToArray(lt, cJSON_CreateString("FullAttention"));
    cJSON_AddNumberToObject(a, "rms_norm_eps", 1e-5);
    cJSON_AddNumberToObject(a, "max_position_embeddings", 256);
    cJSON_AddStringToObject(a, "norm_style", "qwen");
    cJSON_AddNumberToObject(a, "rope_theta", 10000);
    cJSON_AddStringToObject(a, "rope_pairing", "half");
    cJSON_AddBoolToObject(a, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(a, "hidden_act", "silu");
    cJSON_AddStringToObject(h, "quant_type", "F32");
    cJSON *sk = cJSON_AddArrayToObject(h, "skills");
    for (int s = 1; s <= N_SKILLS; s++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", s);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "id", id);
        cJSON_AddItemToArray(sk, r);
    }
    return h;
}

static int write_model(const char *path) {
    cmf_writer *w = NULL;
    if (cmf_writer_new(path, &w) != CMF_OK) return -1;
    char name[160];
    int bad = add_random(w, "model.embed_tokens.weight", VOCAB, HIDDEN, 0);
    for (int l = 0; l < LAYERS && !bad; l++) {
        const struct {
            const char *n;
            uint32_t r, c;
            int ones;
        } L[] = {{"input_layernorm", HIDDEN, 0, 1},      {"self_attn.q_proj", HEADS * HEAD_DIM, HIDDEN, 0},
                 {"self_attn.k_proj", HEADS * HEAD_DIM, HIDDEN, 0}, {"self_attn.v_proj", HEADS * HEAD_DIM, HIDDEN, 0},
                 {"self_attn.o_proj", HIDDEN, HEADS * HEAD_DIM, 0}, {"post_attention_layernorm", HIDDEN, 0, 1},
                 {"mlp.gate_proj", FFN, HIDDEN, 0},        {"mlp.up_proj", FFN, HIDDEN, 0},
                 {"mlp.down_proj", HIDDEN, FFN, 0}};
        for (size_t i = 0; i < sizeof L / sizeof L[0] && !bad; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, L[i].n);
            bad = add_random(w, name, L[i].r, L[i].c, L[i].ones);
        }
    }
    if (!bad) bad = add_random(w, "model.norm.weight", HIDDEN, 0, 1);
    for (int s = 1; s <= N_SKILLS && !bad; s++)
        for (int l = 0; l < LAYERS && !bad; l++)
            for (int k = 0; k < 3 && !bad; k++) {
                snprintf(name, sizeof name, "skill.s%d.model.layers.%d.%s.weight", s, l, FFN_NAMES[k]);
                bad = add_random(w, name, k == 2 ? HIDDEN : FFN, k == 2 ? FFN : HIDDEN, 0);
            }
    if (bad) {
        fprintf(stderr, "writer: %s\n", cmf_last_error());
        cmf_writer_abort(w);
        return -1;
    }
    cmf_writer_set_header(w, header());
    if (cmf_writer_finish(w) != CMF_OK) {
        fprintf(stderr, "writer: %s\n", cmf_last_error());
        return -1;
    }
    return 0;
}

static long page_size;

/* Resident set in bytes (/proc/self/statm, second field). */
static uint64_t rss_bytes(void) {
    FILE *fp = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!fp || fscanf(fp, "%lu %lu", &size, &res) != 2) res = 0;
    if (fp) fclose(fp);
    return (uint64_t)res * (uint64_t)page_size;
}

/* Address range [lo, hi) of the pages of one skill's tensors in a mapping whose first byte is `base` (the tensors
 * of one skill are contiguous in this file: checked by the caller). */
typedef struct range {
    uintptr_t lo, hi;
    uint64_t payload; /* sum of the tensors' nbytes */
} range;

static range skill_range(const cmf_file *f, int s, const uint8_t *base) {
    range r = {UINTPTR_MAX, 0, 0};
    char prefix[16];
    snprintf(prefix, sizeof prefix, "skill.s%d.", s);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (strncmp(t->name, prefix, strlen(prefix))) continue;
        uintptr_t a = (uintptr_t)(base + (t->data - f->map.data)), b = a + (uintptr_t)t->nbytes;
        if (a < r.lo) r.lo = a;
        if (b > r.hi) r.hi = b;
        r.payload += t->nbytes;
    }
    r.lo = r.lo / (uintptr_t)page_size * (uintptr_t)page_size; /* whole pages; the writer 4096-aligns them */
    r.hi = (r.hi + (uintptr_t)page_size - 1) / (uintptr_t)page_size * (uintptr_t)page_size;
    return r;
}

/* Bytes of [r.lo, r.hi) in the page cache (mincore). */
static uint64_t cached_bytes(range r) {
    size_t n = (r.hi - r.lo) / (size_t)page_size;
    unsigned char *v = malloc(n);
    uint64_t c = 0;
    if (v && mincore((void *)r.lo, r.hi - r.lo, v) == 0)
        for (size_t i = 0; i < n; i++) c += v[i] & 1;
    else c = UINT64_MAX;
    free(v);
    return c == UINT64_MAX ? c : c * (uint64_t)page_size;
}

/* Bytes of [r.lo, r.hi) mapped in this process's page tables (/proc/self/pagemap bit 63 "present"). */
static uint64_t present_bytes(range r) {
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0) return UINT64_MAX;
    uint64_t c = 0, e;
    for (uintptr_t p = r.lo; p < r.hi; p += (uintptr_t)page_size) {
        if (pread(fd, &e, 8, (off_t)(p / (uintptr_t)page_size * 8)) != 8) {
            c = UINT64_MAX;
            break;
        }
        c += (e >> 63) & 1;
    }
    close(fd);
    return c == UINT64_MAX ? c : c * (uint64_t)page_size;
}

/* The start of the mapping of `path` (device+inode) in /proc/self/maps other than `not_this`; NULL if none. */
static const uint8_t *find_mapping(const char *path, const uint8_t *not_this) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    FILE *fp = fopen("/proc/self/maps", "r");
    if (!fp) return NULL;
    char line[4096];
    const uint8_t *found = NULL;
    while (!found && fgets(line, sizeof line, fp)) {
        unsigned long lo, hi, off, ino;
        unsigned maj, mnr;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &maj, &mnr, &ino) != 7) continue;
        if (ino == (unsigned long)st.st_ino && makedev(maj, mnr) == st.st_dev && off == 0 &&
            (const uint8_t *)lo != not_this)
            found = (const uint8_t *)lo;
    }
    fclose(fp);
    return found;
}

/* read_ahead_kb of the block device holding `path` (sysfs), or 0 when unknown. */
static uint64_t readahead_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    char p[128];
    unsigned long kb = 0;
    const char *tails[2] = {"queue/read_ahead_kb", "../queue/read_ahead_kb"}; /* whole disk or partition */
    for (int i = 0; i < 2 && !kb; i++) {
        snprintf(p, sizeof p, "/sys/dev/block/%u:%u/%s", major(st.st_dev), minor(st.st_dev), tails[i]);
        FILE *fp = fopen(p, "r");
        if (fp) {
            if (fscanf(fp, "%lu", &kb) != 1) kb = 0;
            fclose(fp);
        }
    }
    return (uint64_t)kb * 1024;
}

static void run_tokens(cmf_session *s, int n) {
    const int32_t ids[8] = {5, 77, 130, 9, 201, 42, 3, 255};
    CHECK_MSG(cmf_session_prefill(s, ids, n, NULL) == CMF_OK, "%s", cmf_last_error());
    for (int i = 0; i < 2; i++) CHECK(cmf_session_decode(s, ids[i]) == CMF_OK);
}

/* What the kernel may map or cache next to a page that was read without the runtime touching it: a PMD-sized
 * large folio of the page cache (2 MiB with 4 KiB pages) plus the fault-around window (64 KiB by default). */
#define EDGE ((uint64_t)(2u << 20) + 65536u)

/* r without EDGE bytes at each end. */
static range interior(range r) {
    range i = r;
    i.lo += EDGE;
    i.hi -= EDGE;
    return i;
}

#define MIB(x) ((double)(x) / 1048576.0)

int main(void) {
    page_size = sysconf(_SC_PAGESIZE);
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp_path("skills-memory.cmf"));
    if (write_model(path) != 0) return 1;

    /* drop the file's page cache (the writer fsync'ed it: the pages are clean) */
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    if (fd >= 0) close(fd);

    cmf_file *f = NULL;
    CHECK_MSG(cmf_file_open(path, &f) == CMF_OK, "%s", cmf_last_error());
    if (!f) CMF_TEST_END();
    range own[N_SKILLS + 1];
    for (int s = 1; s <= N_SKILLS; s++) {
        own[s] = skill_range(f, s, f->map.data);
        /* contiguous: the range holds the payload plus at most one alignment gap per tensor */
        CHECK(own[s].payload == (uint64_t)LAYERS * 3 * FFN * HIDDEN * 4);
        CHECK(own[s].hi - own[s].lo < own[s].payload + (uint64_t)LAYERS * 3 * 4096);
    }
    if (cached_bytes(own[2]) > own[2].payload / 2) {
        fprintf(stderr, "SKIP: the page cache of %s could not be dropped (file system without posix_fadvise "
                        "DONTNEED, e.g. tmpfs): the residency checks would prove nothing\n", path);
        cmf_file_close(f);
        remove(path);
        return 77;
    }

    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    const uint8_t *mbase = m ? find_mapping(path, f->map.data) : NULL;
    CHECK_MSG(mbase != NULL, "the model's mapping of %s is not in /proc/self/maps", path);
    if (!m || !mbase) {
        cmf_model_free(m);
        cmf_file_close(f);
        CMF_TEST_END();
    }
    range r[N_SKILLS + 1];
    for (int s = 1; s <= N_SKILLS; s++) r[s] = skill_range(f, s, mbase);

    cmf_session *sess = NULL;
    CHECK(cmf_session_new(m, 32, &sess) == CMF_OK);
    run_tokens(sess, 4); /* the backbone: its pages fault in */
    uint64_t rss0 = rss_bytes();
    /* nothing of the skills is mapped yet, except (s1, which follows the backbone's last tensor in the file) what
     * shares a page-cache folio with the backbone's last pages */
    CHECK_MSG(present_bytes(r[2]) == 0 && present_bytes(r[3]) == 0, "s2/s3 pages present before any skill ran");
    CHECK_MSG(present_bytes(interior(r[1])) == 0 && present_bytes(r[1]) <= EDGE, "s1: %.3f MiB present",
              MIB(present_bytes(r[1])));

    CHECK_MSG(cmf_session_set_skill(sess, "s2") == CMF_OK, "%s", cmf_last_error());
    cmf_session_reset(sess);
    run_tokens(sess, 4);
    uint64_t rss1 = rss_bytes();
    double grow = (double)rss1 - (double)rss0, want = (double)r[2].payload;
    printf("RSS %.2f -> %.2f MiB: +%.2f MiB for skill s2 of %.2f MiB (%+.2f%%)\n", MIB(rss0), MIB(rss1), MIB(grow),
           MIB(want), 100.0 * (grow - want) / want);
    CHECK_MSG(grow >= 0.95 * want && grow <= 1.05 * want, "RSS grew by %.2f MiB, skill s2 is %.2f MiB", MIB(grow),
              MIB(want));

    /* this process: s2's pages are mapped; of s1 and s3 nothing is, except at the edges next to pages that were
     * read, where the kernel maps what shares a large folio with them or lies in the fault-around window (EDGE) */
    uint64_t p2 = present_bytes(r[2]), p1 = present_bytes(r[1]), p3 = present_bytes(r[3]);
    printf("present in this process: s1 %.3f MiB, s2 %.2f MiB of %.2f, s3 %.3f MiB\n", MIB(p1), MIB(p2),
           MIB(r[2].hi - r[2].lo), MIB(p3));
    CHECK_MSG(p2 >= (uint64_t)(0.99 * (double)r[2].payload), "s2: only %.2f MiB present", MIB(p2));
    CHECK_MSG(p1 <= 2 * EDGE && p3 <= 2 * EDGE, "other skills mapped: s1 %.3f MiB, s3 %.3f MiB", MIB(p1), MIB(p3));
    CHECK_MSG(present_bytes(interior(r[1])) == 0 && present_bytes(interior(r[3])) == 0,
              "pages inside s1/s3 (away from their edges) are mapped");

    /* the page cache (mincore over the mapping): s2 resident; of s1 and s3 only what the kernel's readahead pulled
     * in around the pages that were read (read_ahead_kb per window; an async window can run ahead of the current
     * one), never the bulk */
    uint64_t c1 = cached_bytes(r[1]), c2 = cached_bytes(r[2]), c3 = cached_bytes(r[3]), ra = readahead_bytes(path);
    printf("page cache (mincore): s1 %.2f MiB, s2 %.2f MiB, s3 %.2f MiB of %.2f MiB each; read_ahead_kb %llu\n",
           MIB(c1), MIB(c2), MIB(c3), MIB(r[2].hi - r[2].lo), (unsigned long long)(ra / 1024));
    CHECK_MSG(c2 >= (uint64_t)(0.99 * (double)r[2].payload), "s2: only %.2f MiB cached", MIB(c2));
    uint64_t ra_bound = 2 * (ra ? ra : 128 * 1024) + EDGE;
    CHECK_MSG(c1 <= ra_bound && c3 <= ra_bound, "s1 %.2f MiB / s3 %.2f MiB cached (bound %.2f MiB)", MIB(c1),
              MIB(c3), MIB(ra_bound));
    CHECK_MSG(c1 < r[1].payload / 2 && c3 < r[3].payload / 2, "most of s1/s3 is cached: %.2f / %.2f MiB", MIB(c1),
              MIB(c3));

    cmf_session_free(sess);
    cmf_model_free(m);
    cmf_file_close(f);
    remove(path);
    CMF_TEST_END();
}
