/* One test per refusal of CMF_FORMAT.md §1.11: a good file written by our writer is patched, and open() must
 * fail with the expected status and a message naming the field. Plus integrity failures found by verify. */
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "quant/dtype.h"
#include "testutil.h"

static uint8_t *good;
static size_t good_len;
static cmf_envelope E;

static uint8_t *dup(void) {
    uint8_t *b = malloc(good_len);
    memcpy(b, good, good_len);
    return b;
}
static size_t rec(size_t i) { return (size_t)E.dir_off + 16 + 56 * i; }

/* Opens buf[0..len) (after saving it) and checks the status and that the message holds s1 and s2. */
static void expect(const char *what, uint8_t *buf, size_t len, cmf_status want, const char *s1, const char *s2) {
    const char *path = tmp_path("fmt_refusal.cmf");
    fx_save(path, buf, len);
    free(buf);
    cmf_file *f = (cmf_file *)1;
    cmf_status st = cmf_file_open(path, &f);
    const char *msg = cmf_last_error();
    CHECK_MSG(st == want, "%s: status %d (%s), want %d", what, st, msg, want);
    CHECK_MSG(f == NULL, "%s: *out not cleared", what);
    CHECK_MSG(!s1 || strstr(msg, s1), "%s: message \"%s\" lacks \"%s\"", what, msg, s1);
    CHECK_MSG(!s2 || strstr(msg, s2), "%s: message \"%s\" lacks \"%s\"", what, msg, s2);
    if (st == CMF_OK) cmf_file_close(f);
}

/* Replaces the first occurrence of `from` inside [off, off+len) of a copy of the good file by `to`, padded with
 * spaces to the same length (JSON whitespace), so no offset moves. */
static uint8_t *patch_in(uint64_t off, uint64_t len, const char *from, const char *to) {
    uint8_t *b = dup();
    size_t l = strlen(from), lt = strlen(to);
    if (lt > l) abort();
    for (size_t i = (size_t)off; i + l <= off + len; i++)
        if (memcmp(b + i, from, l) == 0) {
            memset(b + i, ' ', l);
            memcpy(b + i, to, lt);
            return b;
        }
    fprintf(stderr, "no \"%s\" in the section\n", from);
    abort();
}
static uint8_t *patch_header(const char *from, const char *to) {
    return patch_in(E.header_off, E.header_len, from, to);
}
static uint8_t *patch_masks(const char *from, const char *to) { return patch_in(E.masks_off, E.masks_len, from, to); }

static void envelope_refusals(void) {
    expect("short file", dup(), 100, CMF_E_FORMAT, "128-byte envelope", "100 bytes");
    expect("empty file", dup(), 0, CMF_E_FORMAT, "envelope", NULL);
    expect("cut mid-blob", dup(), (size_t)(E.data_off + E.data_len / 2), CMF_E_FORMAT, "data section",
           "past the end");
    uint8_t *b = dup();
    b[1] = 'X';
    expect("bad magic", b, good_len, CMF_E_FORMAT, "magic", NULL);
    b = dup();
    fx_put32(b + 4, 3);
    expect("version 3", b, good_len, CMF_E_UNSUPPORTED, "version 3", "envelope@0x4");
    b = dup();
    fx_put32(b + 12, E.features | 0x08);
    expect("feature 0x08", b, good_len, CMF_E_UNSUPPORTED, "required_features", "unknown bit(s) 0x8");
    b = dup();
    fx_put32(b + 12, E.features | 0x80);
    expect("feature 0x80", b, good_len, CMF_E_UNSUPPORTED, "required_features", "unknown bit(s) 0x80");
    b = dup();
    fx_put64(b + 0x18, 0);
    expect("header_len 0", b, good_len, CMF_E_FORMAT, "header_len is 0", NULL);
    b = dup();
    fx_put64(b + 0x28, 0);
    expect("dir_len 0", b, good_len, CMF_E_FORMAT, "dir_len is 0", NULL);
    b = dup();
    fx_put64(b + 0x30, E.data_off + 4);
    char want[96];
    snprintf(want, sizeof want, "data_off %llu is not a multiple of 4096", (unsigned long long)(E.data_off + 4));
    expect("misaligned data_off", b, good_len, CMF_E_FORMAT, "envelope@0x30", want);
    b = dup();
    fx_put64(b + 0x58, E.vocab_len + 1000000);
    expect("vocab past EOF", b, good_len, CMF_E_FORMAT, "vocab section", "past the end");
    b = dup();
    fx_put64(b + 0x40, UINT64_MAX - 4); /* masks_off + masks_len overflows */
    expect("masks offset overflow", b, good_len, CMF_E_FORMAT, "masks section", "past the end");
    b = dup();
    fx_put64(b + 0x60, 5);
    fx_put64(b + 0x68, 0); /* absent section: its offset is not looked at */
    free(b);
}

static void header_refusals(void) {
    expect("missing arch.hidden_size", patch_header("\"hidden_size\"", "\"hidden_sizX\""), good_len, CMF_E_FORMAT,
           "arch.hidden_size", "missing required key");
    expect("missing version", patch_header("\"version\":2", "\"versiox\":2"), good_len, CMF_E_FORMAT, "version",
           "missing");
    expect("bad quant_type", patch_header("\"Q8_ROW\"", "\"Q9_ROW\""), good_len, CMF_E_FORMAT, "quant_type",
           "Q9_ROW");
    expect("bad layer type", patch_header("SlidingAttention", "SlidingAttentioX"), good_len, CMF_E_FORMAT,
           "arch.layer_types[1]", NULL);
    expect("wrong type", patch_header("\"vocab_size\":128", "\"vocab_size\":\"x\""), good_len, CMF_E_FORMAT,
           "arch.vocab_size", "got string");
    expect("negative size", patch_header("\"head_dim\":8", "\"head_dim\":-"), good_len, CMF_E_FORMAT,
           "malformed JSON", NULL);
    expect("malformed JSON", patch_header("\"arch\":{", "\"arch\":#"), good_len, CMF_E_FORMAT, "header@0x80",
           "malformed JSON");
    uint8_t *b = patch_header("\"vocab\":\"", "\"vocab\":\""); /* then the first hex digit -> 'z' */
    for (size_t i = (size_t)E.header_off; i + 9 < E.header_off + E.header_len; i++)
        if (memcmp(b + i, "\"vocab\":\"", 9) == 0) b[i + 9] = 'z';
    expect("bad section hash", b, good_len, CMF_E_FORMAT, "section_hashes.vocab", "16 hex digits");
    b = dup();
    b[E.header_off + 5] = 0xff;
    expect("header not UTF-8", b, good_len, CMF_E_FORMAT, "UTF-8", "header");
}

static void dir_refusals(void) {
    size_t n;
    const fx_tensor *t = fx_tensors(&n);
    uint8_t *b = dup();
    fx_put64(b + E.dir_off, UINT64_MAX);
    expect("hostile count", b, good_len, CMF_E_FORMAT, "count 18446744073709551615", "dir_len");
    b = dup();
    fx_put64(b + E.dir_off, (1ull << 58) + 1); /* count*56 wraps around */
    expect("wrapping count", b, good_len, CMF_E_FORMAT, "count", "do not fit");
    b = dup();
    fx_put64(b + E.dir_off + 8, 16);
    expect("pool overlaps records", b, good_len, CMF_E_FORMAT, "pool_off 16", "overlaps the records");
    b = dup();
    fx_put64(b + E.dir_off + 8, E.dir_len + 1);
    expect("pool past dir", b, good_len, CMF_E_FORMAT, "pool_off", "past dir_len");
    b = dup();
    fx_put32(b + rec(2), 0x7fffffff);
    expect("name outside pool", b, good_len, CMF_E_FORMAT, "record 2", "outside the name pool");
    /* duplicate: the first two names have equal length and differ in one byte ('a' vs 'b') */
    b = dup();
    size_t pool = (size_t)(E.dir_off + 16 + 56 * n);
    size_t l0 = strlen(t[0].name);
    memcpy(b + pool + l0, t[0].name, l0);
    expect("duplicate names", b, good_len, CMF_E_FORMAT, "duplicate name", t[0].name);
    b = dup();
    b[pool] = 0xC0; /* overlong lead byte */
    expect("name not UTF-8", b, good_len, CMF_E_FORMAT, "record 0", "UTF-8");
    b = dup();
    b[rec(1) + 6] = 17;
    expect("unknown dtype", b, good_len, CMF_E_FORMAT, "unknown dtype id 17", t[1].name);
    b = dup();
    b[rec(1) + 7] = 7;
    expect("ndim 7", b, good_len, CMF_E_FORMAT, "ndim 7", NULL);
    b = dup();
    fx_put32(b + rec(0) + 8, 5); /* f32 [5, 8] needs 160 bytes, record says 128 */
    expect("nbytes vs shape", b, good_len, CMF_E_FORMAT, "nbytes 128", "needs 160");
    b = dup();
    fx_put64(b + rec(3) + 32, (E.data_len + 64) / 64 * 64);
    expect("tensor past blob", b, good_len, CMF_E_FORMAT, t[3].name, "runs past the blob");
    b = dup();
    fx_put64(b + rec(3) + 32, fx_get64(b + rec(3) + 32) + 8);
    expect("tensor misaligned", b, good_len, CMF_E_FORMAT, "is not a multiple of 64", t[3].name);
    b = dup();
    fx_put64(b + rec(3) + 40, UINT64_MAX - 10);
    expect("nbytes overflow", b, good_len, CMF_E_FORMAT, "runs past the blob", NULL);
    b = dup();
    fx_put32(b + rec(0) + 8, 0x80000000u);
    fx_put32(b + rec(0) + 12, 0x80000000u);
    b[rec(0) + 7] = 6;
    for (int k = 2; k < 6; k++) fx_put32(b + rec(0) + 8 + 4 * k, 0xffffffffu);
    expect("shape overflow", b, good_len, CMF_E_FORMAT, "shape product overflows", NULL);
    /* vbit width 2 in the file: refused at open (§2.8 validation) */
    b = dup();
    size_t vb = (size_t)(E.data_off + fx_get64(good + rec(7) + 32));
    b[vb] = 2;
    expect("vbit width 2", b, good_len, CMF_E_FORMAT, t[7].name, "width 2");
    b = dup();
    fx_put32(b + rec(7) + 8, 3); /* 3 rows: nbytes no longer matches */
    expect("vbit nbytes", b, good_len, CMF_E_FORMAT, t[7].name, "nbytes");
}

static void section_refusals(void) {
    uint8_t *b = dup();
    fx_put32(b + E.masks_off, 2);
    expect("n_masks mismatch", b, good_len, CMF_E_FORMAT, "n_masks 2", "masks@0x");
    b = dup();
    fx_put32(b + E.masks_off + 4, (uint32_t)E.masks_len);
    expect("meta_len past section", b, good_len, CMF_E_FORMAT, "meta_len", NULL);
    expect("blob_len layout", patch_masks("\"blob_len\":19", "\"blob_len\":18"), good_len, CMF_E_FORMAT,
           "blob_len 18", "legacy layout (19)");
    expect("blob past section", patch_masks("\"blob_off\":1", "\"blob_off\":9"), good_len, CMF_E_FORMAT,
           "runs past the section", NULL);
    expect("expert fields without moe",
           patch_masks("\"name\":\"general-purpose-fallback-task\",\"sparsity\":0.0",
                       "\"name\":\"g\",\"sparsity\":0,\"has_expert_fields\":true"),
           good_len, CMF_E_FORMAT, "has_expert_fields", "arch.moe");
    expect("bad priority", patch_masks("Fallback", "Fallbacc"), good_len, CMF_E_FORMAT, "priority", NULL);
    expect("masks meta not JSON", patch_masks("{\"default_task\"", "[\"default_task\""), good_len, CMF_E_FORMAT,
           "masks@0x", "malformed");
    /* index section pointed at the vocab bytes: n_entries = "{\"ve" is huge, entries run past the section */
    b = dup();
    fx_put64(b + 0x60, E.vocab_off);
    fx_put64(b + 0x68, 24);
    expect("malformed index", b, good_len, CMF_E_FORMAT, "index@0x", "past index_len");
    b = dup();
    fx_put64(b + 0x60, E.vocab_off);
    fx_put64(b + 0x68, 4);
    expect("short index", b, good_len, CMF_E_FORMAT, "index@0x", "shorter");
}

/* Payload/header/vocab byte flips: open succeeds (hashes are lazy), verify fails and names the culprit. */
static void integrity(void) {
    size_t n;
    const fx_tensor *t = fx_tensors(&n);
    struct {
        const char *what;
        size_t at;
        const char *s1;
    } cases[] = {
        {"payload", (size_t)(E.data_off + fx_get64(good + rec(3) + 32) + 5), t[3].name},
        {"header", 0, "header: hash64"}, /* at: inside the value "tiny-test", set below */
        {"dir", (size_t)E.dir_off + 16 + 56 * n + 3, "dir: hash64"},
        {"vocab", (size_t)E.vocab_off + 3, "vocab section"},
        {"masks", (size_t)E.masks_off + E.masks_len - 1, "masks section"},
    };
    for (size_t i = (size_t)E.header_off; i < E.header_off + E.header_len; i++)
        if (memcmp(good + i, "tiny-test", 9) == 0) cases[1].at = i + 8;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *b = dup();
        b[cases[c].at] ^= 0x01;
        const char *path = tmp_path("fmt_integrity.cmf");
        fx_save(path, b, good_len);
        free(b);
        cmf_file *f = NULL;
        cmf_status st = cmf_file_open(path, &f);
        CHECK_MSG(st == CMF_OK, "%s flip: open failed: %s", cases[c].what, cmf_last_error());
        if (!f) continue;
        char *rep = NULL;
        st = cmf_file_verify(f, &rep);
        CHECK_MSG(st == CMF_E_INTEGRITY, "%s flip: verify status %d", cases[c].what, st);
        CHECK_MSG(rep && strstr(rep, cases[c].s1), "%s flip: report \"%s\" lacks \"%s\"", cases[c].what,
                  rep ? rep : "(null)", cases[c].s1);
        CHECK_MSG(rep && strchr(rep, '\n') == rep + strlen(rep) - 1, "%s flip: one problem expected: %s",
                  cases[c].what, rep ? rep : "");
        CHECK(strstr(cmf_last_error(), "1 problem") != NULL);
        free(rep);
        cmf_file_close(f);
    }
}

int main(void) {
    const char *path = tmp_path("fmt_good.cmf");
    CHECK_MSG(fx_write(path) == CMF_OK, "%s", cmf_last_error());
    good = fx_read(path, &good_len);
    cmf_envelope_decode(good, &E);
    envelope_refusals();
    header_refusals();
    dir_refusals();
    section_refusals();
    integrity();
    free(good);
    CMF_TEST_END();
}
