/* constrain.c — the JSON-mode constraint (cmf.h, "Constrained sampling"): the bytes of every token, built once, and
 * the test of a token against a sampler's recognizer state (json_fsm.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

struct cmf_constraint {
    int vocab;     /* the logits rows' length */
    int n;         /* ids with bytes: min(vocab, the tokenizer's size); ids n..vocab-1 have none */
    uint32_t *off; /* [n + 1]: token v's bytes are bytes[off[v] .. off[v + 1]) */
    char *bytes;
    uint8_t *first; /* [n] the first byte of token v (0 when it has none) */
    uint8_t *plain; /* [n] 1: the token fits anywhere between a string's characters and stays there (no '"', no '\\',
                       no control byte, whole UTF-8 characters): cmf_constraint_mask's shortcut */
    int32_t *eos; /* [n_eos] the end-of-text ids */
    int n_eos;
};

static int is_eos(const cmf_constraint *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] == id) return 1;
    return 0;
}

void cmf_constraint_free(cmf_constraint *c) {
    if (!c) return;
    free(c->off);
    free(c->bytes);
    free(c->first);
    free(c->plain);
    free(c->eos);
    free(c);
}

cmf_status cmf_constraint_new_json(const cmf_tokenizer *tok, int vocab, const int32_t *eos, int n_eos,
                                   cmf_constraint **out) {
    if (out) *out = NULL;
    if (!tok || !eos || !out) return cmf_err(CMF_E_ARG, "cmf_constraint_new_json: NULL argument");
    if (vocab <= 0 || n_eos < 1)
        return cmf_err(CMF_E_ARG, "cmf_constraint_new_json: vocab %d and %d eos ids (want both >= 1)", vocab, n_eos);
    for (int i = 0; i < n_eos; i++)
        if (eos[i] < 0 || eos[i] >= vocab)
            return cmf_err(CMF_E_ARG, "cmf_constraint_new_json: eos id %d is outside [0, %d)", (int)eos[i], vocab);
    cmf_constraint *c = calloc(1, sizeof *c);
    if (!c) return cmf_err(CMF_E_NOMEM, "cmf_constraint_new_json: out of memory");
    const int n_tok = cmf_tokenizer_vocab_size(tok);
    c->vocab = vocab;
    c->n = n_tok < vocab ? n_tok : vocab;
    c->n_eos = n_eos;
    c->off = malloc(((size_t)c->n + 1) * sizeof *c->off);
    c->eos = malloc((size_t)n_eos * sizeof *c->eos);
    c->first = calloc((size_t)c->n + 1, 1);
    c->plain = calloc((size_t)c->n + 1, 1);
    tok_buf all = {0}, pre = {0}, one = {0};
    cmf_status st = c->off && c->eos && c->first && c->plain
                        ? CMF_OK
                        : cmf_err(CMF_E_NOMEM, "cmf_constraint_new_json: out of memory");
    cmf_json_fsm in_str; /* inside a string: the state every plain token is checked from */
    cmf_json_fsm_init(&in_str);
    cmf_json_fsm_feed(&in_str, "{\"", 2);
    const int32_t anchor = tok_anchor_id(tok);
    for (int v = 0; v < c->n && st == CMF_OK; v++) {
        c->off[v] = (uint32_t)all.n;
        if (anchor < 0) continue; /* no ordinary token: nothing fits (every draw fails, with a message) */
        if ((st = tok_piece_bytes(tok, anchor, v, &pre, &one)) != CMF_OK) break;
        if (all.n + one.n > UINT32_MAX)
            st = cmf_err(CMF_E_NOMEM, "cmf_constraint_new_json: the vocabulary's bytes exceed 4 GiB");
        else if (one.n && tok_buf_put(&all, one.p, one.n))
            st = cmf_err(CMF_E_NOMEM, "cmf_constraint_new_json: out of memory");
        if (st != CMF_OK || !one.n) continue;
        c->first[v] = (uint8_t)one.p[0];
        /* without '"' or '\' a string cannot end or start an escape: a token that a string takes and leaves the
         * string between characters does so from any point between characters */
        cmf_json_fsm t = in_str;
        c->plain[v] = !memchr(one.p, '"', one.n) && !memchr(one.p, '\\', one.n) && cmf_json_fsm_feed(&t, one.p, one.n) &&
                      cmf_json_fsm_in_string(&t);
    }
    if (st == CMF_OK) {
        c->off[c->n] = (uint32_t)all.n;
        memcpy(c->eos, eos, (size_t)n_eos * sizeof *eos);
        c->bytes = all.p, all.p = NULL;
    }
    tok_buf_free(&all);
    tok_buf_free(&pre);
    tok_buf_free(&one);
    if (st != CMF_OK) {
        cmf_constraint_free(c);
        return st;
    }
    *out = c;
    return CMF_OK;
}

int cmf_constraint_vocab(const cmf_constraint *c) { return c->vocab; }

int cmf_constraint_fits(const cmf_constraint *c, const cmf_json_fsm *f, int32_t id) {
    if (id < 0 || id >= c->vocab || f->bad) return 0;
    if (cmf_json_fsm_done(f)) return is_eos(c, id);
    if (id >= c->n || is_eos(c, id)) return 0;
    const uint32_t a = c->off[id], b = c->off[id + 1];
    if (a == b) return 0;
    cmf_json_fsm t = *f;
    return cmf_json_fsm_feed(&t, c->bytes + a, b - a);
}

int cmf_constraint_mask(const cmf_constraint *c, const cmf_json_fsm *f, const float *logits, float *out) {
    int any = 0;
    if (f->bad || cmf_json_fsm_done(f)) {
        for (int v = 0; v < c->vocab; v++) {
            const int ok = !f->bad && is_eos(c, v);
            out[v] = ok ? logits[v] : -INFINITY;
            any |= ok;
        }
        return any;
    }
    uint8_t lead[256]; /* the bytes the text takes next: a token starting with another one cannot fit */
    for (int b = 0; b < 256; b++) {
        cmf_json_fsm t = *f;
        const uint8_t byte = (uint8_t)b;
        lead[b] = (uint8_t)cmf_json_fsm_feed(&t, &byte, 1);
    }
    const int in_str = cmf_json_fsm_in_string(f);
    for (int v = 0; v < c->vocab; v++) {
        int ok = 0;
        if (v < c->n && c->off[v] != c->off[v + 1] && lead[c->first[v]] && !is_eos(c, v)) {
            if (in_str && c->plain[v]) {
                ok = 1;
            } else {
                cmf_json_fsm t = *f;
                ok = cmf_json_fsm_feed(&t, c->bytes + c->off[v], c->off[v + 1] - c->off[v]);
            }
        }
        out[v] = ok ? logits[v] : -INFINITY;
        any |= ok;
    }
    return any;
}

void cmf_constraint_advance(const cmf_constraint *c, cmf_json_fsm *f, int32_t id) {
    if (!cmf_constraint_fits(c, f, id)) {
        f->bad = 1;
        return;
    }
    if (!cmf_json_fsm_done(f)) cmf_json_fsm_feed(f, c->bytes + c->off[id], c->off[id + 1] - c->off[id]);
}
