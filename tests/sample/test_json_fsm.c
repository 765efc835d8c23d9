/* test_json_fsm.c — the JSON-object recognizer (src/sample/json_fsm.c) against tests/data/json_fsm/cases.txt, whose
 * verdicts come from Python's json module and json_fsm.h's limits (make_cases.py there writes it).
 *
 * A line "V <hex>" is a text of the language: fed one byte at a time every feed returns 1 and the recognizer is done
 * after the last byte and not before; fed in random-sized chunks or in one call the same. A line "I <hex> <k>" is
 * not: the bytes are never all accepted with the recognizer done; the first k bytes (shown by Python to be a prefix
 * of a valid text) are accepted and byte k (where no completion that make_cases.py tries works) is rejected; when
 * k is the length, every byte is accepted and the recognizer is not done. For every case also: a copy of the state
 * taken part-way continues as the original does; at every position a probe byte fed to a copy leaves the original
 * alone, and when the probe is accepted the copy can still be completed (a greedy search with the recognizer itself
 * reaches done), as can the state before a rejected byte; after a rejected byte every feed fails; after done every
 * byte is rejected; a feed of 0 bytes returns !bad. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json_fsm.h"
#include "testutil.h"

#define NONE ((size_t)-1)
#define MAX_REPORTS 40

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng(void) { /* xorshift64*: fixed seed, so every run feeds the same chunks and probes */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* The case being checked, for the failure reports. */
static struct {
    int line;
    char kind;
    const uint8_t *b;
    size_t n;
    int failed;
} cur;
static int n_failed_cases, n_reports;

/* Which check failed, counted over all cases so that distinct failures stand out in the summary. */
enum {
    F_V_REJECT, F_V_DONE, F_I_DONE, F_I_EARLY, F_I_LATE, F_AFTER_BAD, F_AFTER_DONE, F_ZERO, F_MID_COPY, F_CHUNK,
    F_WHOLE, F_DEAD_END, F_COUNT
};
static const char *const f_names[F_COUNT] = {
    "valid text: a byte rejected", "valid text: done at the wrong byte", "invalid text: accepted as a whole text",
    "invalid text: a byte of a viable prefix rejected",
    "invalid text: the first byte that no completion fits accepted", "a feed after a rejected byte returned 1",
    "a byte after done accepted", "a feed of 0 bytes: wrong result", "a mid-way copy continued differently",
    "chunked feed differs from byte feed", "one-call feed differs from byte feed",
    "an accepted prefix that the greedy completion cannot finish"};
static int f_count[F_COUNT];

static void fail(int what, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(int what, size_t at, const char *fmt, ...) {
    f_count[what]++;
    cmf_test_failures++;
    if (!cur.failed) n_failed_cases++;
    cur.failed = 1;
    if (n_reports++ >= MAX_REPORTS) return;
    fprintf(stderr, "cases.txt:%d (%c, %zu bytes): %s at byte %zu", cur.line, cur.kind, cur.n, f_names[what], at);
    if (at < cur.n) fprintf(stderr, " (0x%02x)", cur.b[at]);
    fputs(": ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n  hex: ", stderr);
    for (size_t i = 0; i < cur.n; i++) fprintf(stderr, "%02x", cur.b[i]);
    fputc('\n', stderr);
}

static int feed1(cmf_json_fsm *f, uint8_t c) { return cmf_json_fsm_feed(f, &c, 1); }

/* Finishes the text from f greedily with the recognizer's own answers: each step feeds the first byte of a fixed
 * list that is accepted (closing quote or bracket first, then ':' and what finishes a number, literal, \u escape or
 * UTF-8 character). The list never opens a container or adds whitespace, so from any prefix of a valid text it
 * reaches done in a few bytes per open container. Returns 1 when it does. */
static int completes(cmf_json_fsm f) {
    static const uint8_t pri[] = {'"', '}', ']', ':', '0', 'r', 'u', 'e', 'a', 'l', 's', '{', 0x80, 0x90, 0xA0};
    for (int step = 0; step < 8 * CMF_JSON_MAX_DEPTH + 64; step++) {
        if (cmf_json_fsm_done(&f)) return 1;
        size_t j = 0;
        for (; j < sizeof pri; j++) {
            cmf_json_fsm g = f;
            if (feed1(&g, pri[j])) {
                f = g;
                break;
            }
        }
        if (j == sizeof pri) return 0;
    }
    return 0;
}

static const uint8_t probes[] = {'{', '}', '[', ']', ',', ':', '"', '\\', ' ', '\t', '\n', '\r', '0', '1', '9', '-',
                                 '+', '.', 'e', 'E', 't', 'f', 'n', 'u', 'a', 'l', 's', 'r', 'x', 'A', 'F', '/',
                                 0x00, 0x1F, 0x7F, 0x80, 0xBF, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF};
static long n_probes;

static void check_case(const uint8_t *b, size_t n, size_t k) {
    int valid = cur.kind == 'V';
    size_t mid = rng() % (n + 1);

    /* one byte at a time, with a probe on a copy before each byte */
    cmf_json_fsm f, at_mid, before = {0};
    cmf_json_fsm_init(&f);
    at_mid = f;
    size_t rej = n, done_at = NONE;
    for (size_t i = 0; i < n; i++) {
        if (i == mid) at_mid = f;
        cmf_json_fsm g = f; /* the original goes on with the case's byte below */
        uint8_t p = probes[rng() % sizeof probes];
        n_probes++;
        if (feed1(&g, p) && !completes(g)) {
            fail(F_DEAD_END, i, "probe byte 0x%02x accepted in place of this byte, then no completion", p);
            return;
        }
        before = f;
        if (!feed1(&f, b[i])) {
            rej = i;
            break;
        }
        if (done_at == NONE && cmf_json_fsm_done(&f)) done_at = i;
    }
    if (mid == n && rej == n) at_mid = f;
    int done_end = rej == n && cmf_json_fsm_done(&f);

    if (valid) {
        if (rej != n) {
            fail(F_V_REJECT, rej, "expected 1, got 0");
            return;
        }
        if (done_at != n - 1) {
            if (done_at == NONE)
                fail(F_V_DONE, n - 1, "expected done after the last byte, got 0");
            else
                fail(F_V_DONE, done_at, "done already here, expected only after byte %zu", n - 1);
            return;
        }
    } else {
        if (rej == n && done_end) {
            fail(F_I_DONE, n - 1, "expected a byte rejected or not done, got every byte accepted and done");
            return;
        }
        if (rej < k) {
            fail(F_I_EARLY, rej, "expected 1 (the first %zu bytes are a prefix of a valid text), got 0", k);
            return;
        }
        if (rej > k) {
            fail(F_I_LATE, k, "expected 0 (no completion make_cases.py tries fits the first %zu bytes), got 1",
                 k + 1);
            return;
        }
    }

    /* the state before a rejected byte, or after an accepted prefix, can still be finished */
    if (rej < n && !completes(before)) {
        fail(F_DEAD_END, rej, "the state before this rejected byte cannot be completed");
        return;
    }
    if (rej == n && !done_end && !completes(f)) {
        fail(F_DEAD_END, n, "every byte accepted, not done, and no completion");
        return;
    }

    /* after the last feed: a rejected byte sticks, done takes nothing more, 0 bytes give !bad */
    uint8_t dummy = 0;
    if (rej < n) {
        if (cmf_json_fsm_feed(&f, &dummy, 0) != 0) {
            fail(F_ZERO, rej, "feed of 0 bytes after a rejected byte: expected 0, got 1");
            return;
        }
        static const uint8_t more[] = {'}', ' ', '"', '0', '{', ']', ','};
        for (size_t i = 0; i < sizeof more; i++)
            if (feed1(&f, more[i])) {
                fail(F_AFTER_BAD, rej, "byte 0x%02x fed after it: expected 0, got 1", more[i]);
                return;
            }
        for (size_t i = rej + 1; i < n; i++)
            if (feed1(&f, b[i])) {
                fail(F_AFTER_BAD, i, "the case's own byte fed after the rejected byte %zu: expected 0, got 1", rej);
                return;
            }
    } else {
        if (cmf_json_fsm_feed(&f, &dummy, 0) != 1 || cmf_json_fsm_done(&f) != done_end) {
            fail(F_ZERO, n, "feed of 0 bytes on a good state: expected 1 and done unchanged");
            return;
        }
        if (done_end)
            for (int c = 0; c < 256; c++) {
                cmf_json_fsm g = f;
                if (feed1(&g, (uint8_t)c)) {
                    fail(F_AFTER_DONE, n, "byte 0x%02x accepted after the closing brace", c);
                    return;
                }
            }
    }

    /* a copy taken mid-way continues as the original did */
    if (mid <= rej) {
        size_t rej2 = n, done2 = NONE;
        for (size_t i = mid; i < n; i++) {
            if (!feed1(&at_mid, b[i])) {
                rej2 = i;
                break;
            }
            if (done2 == NONE && cmf_json_fsm_done(&at_mid)) done2 = i;
        }
        if (rej2 != rej || (done_at >= mid && done_at != NONE && done2 != done_at) ||
            (rej == n && cmf_json_fsm_done(&at_mid) != done_end)) {
            fail(F_MID_COPY, mid, "copy taken before this byte: rejected at %zu (original %zu), done at %td (%td)",
                 rej2, rej, (ptrdiff_t)done2, (ptrdiff_t)done_at);
            return;
        }
    }

    /* random-sized chunks: a chunk returns 1 when it ends at or before the rejected byte */
    cmf_json_fsm c;
    cmf_json_fsm_init(&c);
    for (size_t pos = 0; pos < n;) {
        size_t len = rng() % 8 == 0 ? 1 + rng() % 64 : 1 + rng() % 6;
        size_t end = pos + len < n ? pos + len : n;
        int want = end <= rej, got = cmf_json_fsm_feed(&c, b + pos, end - pos);
        if (got != want) {
            fail(F_CHUNK, want ? pos : rej, "chunk [%zu, %zu): expected %d, got %d", pos, end, want, got);
            return;
        }
        if (got && cmf_json_fsm_done(&c) != (done_at != NONE && done_at < end)) {
            fail(F_CHUNK, end - 1, "chunk [%zu, %zu): done %d, byte feed says %d", pos, end, cmf_json_fsm_done(&c),
                 done_at != NONE && done_at < end);
            return;
        }
        if (rng() % 4 == 0 && cmf_json_fsm_feed(&c, &dummy, 0) != want) {
            fail(F_ZERO, end, "feed of 0 bytes between chunks: expected %d", want);
            return;
        }
        pos = end;
    }

    /* all at once */
    cmf_json_fsm w;
    cmf_json_fsm_init(&w);
    int want = rej == n, got = cmf_json_fsm_feed(&w, n ? b : &dummy, n);
    if (got != want || (got && cmf_json_fsm_done(&w) != done_end)) {
        fail(F_WHOLE, rej, "expected %d (done %d), got %d (done %d)", want, done_end, got,
             got ? cmf_json_fsm_done(&w) : -1);
        return;
    }
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A few checks that need no case file. */
static void check_basics(void) {
    cmf_json_fsm f;
    uint8_t z = 0;
    cmf_json_fsm_init(&f);
    CHECK(cmf_json_fsm_done(&f) == 0);
    CHECK(cmf_json_fsm_feed(&f, &z, 0) == 1);
    CHECK(cmf_json_fsm_feed(&f, "{", 1) == 1);
    CHECK(cmf_json_fsm_done(&f) == 0);
    cmf_json_fsm bad = f;
    CHECK(cmf_json_fsm_feed(&bad, "x", 1) == 0);
    cmf_json_fsm bad2 = bad; /* a copy of a bad state stays bad */
    CHECK(cmf_json_fsm_feed(&bad2, &z, 0) == 0);
    CHECK(cmf_json_fsm_feed(&bad2, "}", 1) == 0);
    CHECK(cmf_json_fsm_feed(&f, "}", 1) == 1); /* the original is untouched by its copies */
    CHECK(cmf_json_fsm_done(&f) == 1);
    cmf_json_fsm_init(&bad); /* init starts over from any state */
    const char *t = "{\"a\":[1,\"\\u00e9\xc3\xa9\",true]}";
    CHECK(cmf_json_fsm_feed(&bad, t, strlen(t)) == 1);
    CHECK(cmf_json_fsm_done(&bad) == 1);
}

int main(void) {
    check_basics();

    const char *path = testdata_path("json_fsm/cases.txt");
    FILE *fp = fopen(path, "r");
    CHECK_MSG(fp != NULL, "cannot open %s (run tests/data/json_fsm/make_cases.py)", path);
    int n_cases = 0, n_valid = 0, n_invalid = 0, line = 0;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    while (fp && (len = getline(&buf, &cap, fp)) > 0) {
        line++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = 0;
        if (len == 0) continue;
        char kind = buf[0];
        int ok = (kind == 'V' || kind == 'I') && len >= 2 && buf[1] == ' ';
        const char *hex = ok ? buf + 2 : "";
        size_t hl = strcspn(hex, " "), k = 0;
        ok = ok && hl % 2 == 0;
        if (ok && kind == 'I') ok = hex[hl] == ' ' && sscanf(hex + hl + 1, "%zu", &k) == 1;
        if (ok && kind == 'V') ok = hex[hl] == 0;
        uint8_t *b = malloc(hl / 2 + 1);
        for (size_t i = 0; ok && i < hl / 2; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            ok = hi >= 0 && lo >= 0;
            b[i] = (uint8_t)(hi << 4 | lo);
        }
        ok = ok && k <= hl / 2;
        CHECK_MSG(ok, "cases.txt:%d: malformed line", line);
        if (ok) {
            cur.line = line;
            cur.kind = kind;
            cur.b = b;
            cur.n = hl / 2;
            cur.failed = 0;
            check_case(b, hl / 2, k);
            n_cases++;
            if (kind == 'V')
                n_valid++;
            else
                n_invalid++;
        }
        free(b);
    }
    free(buf);
    if (fp) fclose(fp);

    /* a missing, empty or cut-short case file fails here */
    CHECK_MSG(n_cases >= 5000 && n_valid >= 1000 && n_invalid >= 1000, "%d cases read (%d valid, %d invalid)",
              n_cases, n_valid, n_invalid);
    printf("test_json_fsm: %d cases read, %d valid, %d invalid; %ld probes; %d cases failed\n", n_cases, n_valid,
           n_invalid, n_probes, n_failed_cases);
    if (n_reports > MAX_REPORTS) fprintf(stderr, "(%d more failure reports not shown)\n", n_reports - MAX_REPORTS);
    for (int i = 0; i < F_COUNT; i++)
        if (f_count[i]) fprintf(stderr, "  %5d  %s\n", f_count[i], f_names[i]);
    CMF_TEST_END();
}
