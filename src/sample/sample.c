/* sample.c — token sampling (see sample.h for the order of operations and its sources). */
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* ---------------------------------------------------------------------------------------------------------------
 * PCG32 (XSH-RR): 64-bit LCG state, output = rotate(((s >> 18) ^ s) >> 27, s >> 59).
 * ------------------------------------------------------------------------------------------------------------- */
#define PCG_MULT 6364136223846793005ULL
#define PCG_STREAM 1442695040888963407ULL

void cmf_rng_seed(cmf_rng *r, uint64_t seed) {
    r->state = 0;
    r->inc = PCG_STREAM | 1u;
    (void)cmf_rng_u32(r);
    r->state += seed;
    (void)cmf_rng_u32(r);
}

uint32_t cmf_rng_u32(cmf_rng *r) {
    uint64_t old = r->state;
    r->state = old * PCG_MULT + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
    uint32_t rot = (uint32_t)(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

double cmf_rng_uniform(cmf_rng *r) {
    uint64_t hi = cmf_rng_u32(r) >> 5; /* 27 bits */
    uint64_t lo = cmf_rng_u32(r) >> 6; /* 26 bits */
    return (double)((hi << 26) | lo) * (1.0 / 9007199254740992.0); /* / 2^53 */
}

/* ---------------------------------------------------------------------------------------------------------------
 * Sampler state.
 * ------------------------------------------------------------------------------------------------------------- */
typedef cmf_sample_cand cand;

struct cmf_sampler {
    cmf_sampler_params p;
    int vocab;
    cmf_rng rng;
    float *work;     /* [vocab] penalized logits */
    cand *cands;     /* [vocab] candidates */
    double *w;       /* [vocab] exp(z - max) of the candidates, parallel to cands */
    int32_t *counts; /* [vocab] scratch, all zero between calls */
    int32_t *recent; /* ring buffer of the last penalty_last_n accepted tokens */
    int n_recent, recent_head;
    int32_t *pen_ids, *pen_counts; /* [penalty_last_n] the window's distinct tokens (cmf_sampler_penalty_window) */
    const cmf_constraint *con; /* NULL: none (cmf_sampler_set_constraint) */
    cmf_json_fsm fsm;          /* the constrained text so far */
    float *masked;             /* [vocab] the row with the tokens that do not fit at -inf (allocated with con) */
};

cmf_sampler_params cmf_sampler_default_params(void) {
    cmf_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    return p;
}

cmf_status cmf_sampler_new(int vocab, const cmf_sampler_params *p, cmf_sampler **out) {
    if (!out) return cmf_err(CMF_E_ARG, "sampler: NULL output pointer");
    *out = NULL;
    if (vocab <= 0) return cmf_err(CMF_E_ARG, "sampler: vocab size %d must be > 0", vocab);
    if (!p) return cmf_err(CMF_E_ARG, "sampler: params is NULL");
    if (isnan(p->temperature)) return cmf_err(CMF_E_ARG, "sampler: temperature is NaN");
    if (p->top_k < 0) return cmf_err(CMF_E_ARG, "sampler: top_k %d must be >= 0", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return cmf_err(CMF_E_ARG, "sampler: top_p %g must be in (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return cmf_err(CMF_E_ARG, "sampler: min_p %g must be in [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return cmf_err(CMF_E_ARG, "sampler: repeat_penalty %g must be > 0", (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return cmf_err(CMF_E_ARG, "sampler: presence/frequency penalties must be finite");
    if (p->penalty_last_n < 0)
        return cmf_err(CMF_E_ARG, "sampler: penalty_last_n %d must be >= 0", p->penalty_last_n);

    cmf_sampler *s = calloc(1, sizeof *s);
    if (!s) return cmf_err(CMF_E_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->vocab = vocab;
    s->work = malloc((size_t)vocab * sizeof *s->work);
    s->cands = malloc((size_t)vocab * sizeof *s->cands);
    s->w = malloc((size_t)vocab * sizeof *s->w);
    s->counts = calloc((size_t)vocab, sizeof *s->counts);
    const size_t cap = (size_t)(p->penalty_last_n > 0 ? p->penalty_last_n : 1);
    s->recent = malloc(cap * sizeof *s->recent);
    s->pen_ids = malloc(cap * sizeof *s->pen_ids);
    s->pen_counts = malloc(cap * sizeof *s->pen_counts);
    if (!s->work || !s->cands || !s->w || !s->counts || !s->recent || !s->pen_ids || !s->pen_counts) {
        cmf_sampler_free(s);
        return cmf_err(CMF_E_NOMEM, "sampler: out of memory for a vocabulary of %d", vocab);
    }
    cmf_sampler_reset(s);
    *out = s;
    return CMF_OK;
}

void cmf_sampler_free(cmf_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->cands);
    free(s->w);
    free(s->counts);
    free(s->recent);
    free(s->pen_ids);
    free(s->pen_counts);
    free(s->masked);
    free(s);
}

void cmf_sampler_reset(cmf_sampler *s) {
    if (!s) return;
    s->n_recent = 0;
    s->recent_head = 0;
    cmf_rng_seed(&s->rng, s->p.seed);
    cmf_json_fsm_init(&s->fsm);
}

void cmf_sampler_accept(cmf_sampler *s, int32_t token) {
    if (!s) return;
    if (s->con) cmf_constraint_advance(s->con, &s->fsm, token);
    int cap = s->p.penalty_last_n;
    if (cap <= 0 || token < 0 || token >= s->vocab) return;
    s->recent[s->recent_head] = token;
    s->recent_head = (s->recent_head + 1) % cap;
    if (s->n_recent < cap) s->n_recent++;
}

/* Two passes: the largest non-NaN value over 8 independent lanes (NaN compares false, so it never enters a lane;
 * gcc -O2 keeps the lanes scalar, but they are no longer one dependent chain), then the first index holding it
 * (-0.0 == 0.0, so ties between the zeros keep the lowest index as a single strict-greater scan would). No non-NaN
 * value: no index equals the -inf start unless a -inf is present, so all-NaN gives -1. */
int32_t cmf_argmax(const float *v, int n) {
    if (n <= 0) return -1;
    float lane[8];
    for (int j = 0; j < 8; j++) lane[j] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] = v[i + j] > lane[j] ? v[i + j] : lane[j];
    float best = -INFINITY;
    for (; i < n; i++) best = v[i] > best ? v[i] : best;
    for (int j = 0; j < 8; j++) best = lane[j] > best ? lane[j] : best;
    for (i = 0; i < n; i++)
        if (v[i] == best) return i;
    return -1;
}

/* Whether the penalties change any logit now (a token in the window and a penalty that is not neutral). */
static int penalties_active(const cmf_sampler *s) {
    const cmf_sampler_params *p = &s->p;
    return s->n_recent > 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

/* Penalties over the recent window, each distinct token once with its count (O(window)). */
static void apply_penalties(cmf_sampler *s, float *l) {
    const cmf_sampler_params *p = &s->p;
    if (!penalties_active(s)) return;
    for (int i = 0; i < s->n_recent; i++) s->counts[s->recent[i]]++;
    for (int i = 0; i < s->n_recent; i++) {
        int32_t t = s->recent[i];
        int32_t c = s->counts[t];
        if (!c) continue; /* already handled */
        s->counts[t] = 0;
        l[t] = cmf_sample_penalize(l[t], c, p->repeat_penalty, p->presence_penalty, p->frequency_penalty);
    }
}

const cmf_sampler_params *cmf_sampler_params_of(const cmf_sampler *s) { return &s->p; }
int cmf_sampler_vocab(const cmf_sampler *s) { return s->vocab; }

int cmf_sampler_penalty_window(cmf_sampler *s, const int32_t **ids, const int32_t **counts) {
    *ids = s->pen_ids;
    *counts = s->pen_counts;
    if (!penalties_active(s)) return 0;
    for (int i = 0; i < s->n_recent; i++) s->counts[s->recent[i]]++;
    int m = 0;
    for (int i = 0; i < s->n_recent; i++) { /* each distinct token once, at its first place in the ring */
        int32_t t = s->recent[i];
        if (!s->counts[t]) continue;
        s->pen_ids[m] = t;
        s->pen_counts[m] = s->counts[t];
        s->counts[t] = 0;
        m++;
    }
    return m;
}

/* The total order of candidates: larger z first, then the lower id. */
static int before(const cand *a, const cand *b) { return a->z > b->z || (a->z == b->z && a->id < b->id); }

static void swap_c(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Quickselect: rearranges c[0..n) so that c[0..k) are the k first candidates in the total order (in no particular
 * order among themselves). Deterministic (median-of-three pivots), O(n) on average. Requires 0 < k < n. */
static void select_top(cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        /* median of three into c[hi] */
        if (before(&c[mid], &c[lo])) swap_c(&c[mid], &c[lo]);
        if (before(&c[hi], &c[lo])) swap_c(&c[hi], &c[lo]);
        if (before(&c[mid], &c[hi])) swap_c(&c[mid], &c[hi]);
        cand pivot = c[hi];
        int store = lo;
        for (int i = lo; i < hi; i++)
            if (before(&c[i], &pivot)) swap_c(&c[i], &c[store++]);
        swap_c(&c[store], &c[hi]);
        if (store == k - 1) return;
        if (store > k - 1)
            hi = store - 1;
        else
            lo = store + 1;
    }
}

/* Sorts c[0..n) in the total order (quicksort with median-of-three pivots, insertion sort below 16 elements; the
 * smaller side recursed, the larger one looped, so the depth stays O(log n)). The order is strict (ids differ),
 * so every correct sort gives this same sequence. */
static void sort_cands(cand *c, int n) {
    while (n > 16) {
        int mid = n / 2, hi = n - 1;
        if (before(&c[mid], &c[0])) swap_c(&c[mid], &c[0]);
        if (before(&c[hi], &c[0])) swap_c(&c[hi], &c[0]);
        if (before(&c[mid], &c[hi])) swap_c(&c[mid], &c[hi]);
        cand pivot = c[hi];
        int store = 0;
        for (int i = 0; i < hi; i++)
            if (before(&c[i], &pivot)) swap_c(&c[i], &c[store++]);
        swap_c(&c[store], &c[hi]);
        const int left = store, right = n - store - 1;
        if (left < right) {
            sort_cands(c, left);
            c += store + 1;
            n = right;
        } else {
            sort_cands(c + store + 1, right);
            n = left;
        }
    }
    for (int i = 1; i < n; i++) {
        cand x = c[i];
        int j = i;
        while (j > 0 && before(&x, &c[j - 1])) c[j] = c[j - 1], j--;
        c[j] = x;
    }
}

/* Extends the sorted prefix c[0..sorted) of c[0..n) by the next `take` candidates in the total order: a
 * quickselect of the rest, then a sort of the part taken. Returns the new prefix length. */
static cmf_status finish(cmf_sampler *s, int n, float zmax, int32_t *token);

static int extend_sorted(cand *c, int n, int sorted, int take) {
    if (take >= n - sorted) take = n - sorted;
    else select_top(c + sorted, n - sorted, take);
    sort_cands(c + sorted, take);
    return sorted + take;
}

/* The draw of sample.h's steps 1-7 on the row, without the constraint. */
static cmf_status sample_row(cmf_sampler *s, const float *logits, int32_t *token) {
    const cmf_sampler_params *p = &s->p;
    int V = s->vocab;
    const float *l = logits;
    if (penalties_active(s)) { /* the caller's row is not modified: penalize a copy */
        memcpy(s->work, logits, (size_t)V * sizeof *s->work);
        apply_penalties(s, s->work);
        l = s->work;
    }

    if (p->temperature <= 0.0f) {
        int32_t best = cmf_argmax(l, V);
        if (best < 0) return cmf_err(CMF_E_ARG, "sampler: every logit is NaN");
        if (l[best] == -INFINITY) /* as the draw below: a -inf logit (a masked token) is never chosen */
            return cmf_err(CMF_E_ARG, "sampler: no token has a finite logit (every one is -inf)");
        *token = best;
        return CMF_OK;
    }

    /* Candidates: every token with a finite scaled logit (NaN and -inf can never be drawn). */
    cand *c = s->cands;
    int n = 0;
    float zmax = -INFINITY;
    for (int i = 0; i < V; i++) {
        float z = l[i] / p->temperature;
        if (isnan(z) || z == -INFINITY) continue;
        if (z == INFINITY) z = 3.0e38f; /* +inf beats everything; keep arithmetic finite */
        c[n].z = z;
        c[n].id = i;
        n++;
        if (z > zmax) zmax = z;
    }
    if (n == 0) return cmf_err(CMF_E_ARG, "sampler: no token has a finite logit");

    /* top-k: the k first candidates, sorted in the total order (so that cmf_sampler_finish_topk, given the same
     * sorted list by a device, sums and draws in the same order) */
    if (p->top_k > 0) {
        if (p->top_k < n) {
            select_top(c, n, p->top_k);
            n = p->top_k;
        }
        sort_cands(c, n);
    }
    return finish(s, n, zmax, token);
}

/* Steps 5-7 of sample.h on the n >= 1 candidates in s->cands (what top-k kept; zmax their largest z): the weights,
 * their normalizer, min-p, top-p and the draw (one uniform number from s->rng). */
static cmf_status finish(cmf_sampler *s, int n, float zmax, int32_t *token) {
    const cmf_sampler_params *p = &s->p;
    cand *c = s->cands;
    /* weights relative to the max (which is always kept), and the normalizer of what top-k kept */
    double *w = s->w;
    double Z = 0.0;
    for (int i = 0; i < n; i++) {
        w[i] = exp((double)c[i].z - (double)zmax);
        Z += w[i];
    }

    /* the draw's total: the sum of the kept w in their order (Z itself while nothing more is dropped) */
    double total = Z;

    /* min-p: p_i >= min_p * p_max  <=>  w_i >= min_p (a prefix of the order, kept in place) */
    if (p->min_p > 0.0f) {
        int m = 0;
        total = 0.0;
        for (int i = 0; i < n; i++) {
            if (w[i] >= (double)p->min_p) {
                c[m] = c[i];
                w[m] = w[i];
                total += w[m];
                m++;
            }
        }
        n = m; /* >= 1: the max has w = 1 */
    }

    /* top-p: the smallest prefix (in order) whose probability under the top-k distribution reaches top_p. Only
     * that prefix needs an order: it is sorted in growing pieces (64 candidates, then 4x more each time), each the
     * next ones in the total order by quickselect, so a peaked distribution sorts a few dozen candidates instead
     * of the vocabulary; a flat one ends in one sort of the rest. */
    if (p->top_p < 1.0f && n > 1) {
        double cum = 0.0, target = (double)p->top_p * Z;
        int m = 0, sorted = 0, piece = 64;
        while (m < n) {
            if (m == sorted) {
                sorted = extend_sorted(c, n, sorted, piece >= (n - sorted) / 2 ? n - sorted : piece);
                piece *= 4;
            }
            w[m] = exp((double)c[m].z - (double)zmax);
            cum += w[m];
            m++;
            if (cum >= target) break;
        }
        n = m;
        total = cum;
    }

    /* draw */
    double r = cmf_rng_uniform(&s->rng) * total;
    double acc = 0.0;
    int32_t pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += w[i];
        if (r < acc) {
            pick = c[i].id;
            break;
        }
    }
    *token = pick;
    return CMF_OK;
}

cmf_status cmf_sampler_sample(cmf_sampler *s, const float *logits, int32_t *token) {
    if (!s || !logits || !token) return cmf_err(CMF_E_ARG, "sampler: NULL argument");
    cmf_status st = sample_row(s, logits, token);
    if (st != CMF_OK || cmf_sampler_fits(s, *token)) return st;
    return cmf_sampler_sample_masked(s, logits, token);
}

/* ---------------------------------------------------------------------------------------------------------------
 * The constraint (constrain.c; cmf.h "Constrained sampling").
 * ------------------------------------------------------------------------------------------------------------- */
cmf_status cmf_sampler_set_constraint(cmf_sampler *s, const cmf_constraint *c) {
    if (!s) return cmf_err(CMF_E_ARG, "cmf_sampler_set_constraint: NULL sampler");
    if (c && cmf_constraint_vocab(c) != s->vocab)
        return cmf_err(CMF_E_ARG, "cmf_sampler_set_constraint: the constraint has %d ids, the sampler %d",
                       cmf_constraint_vocab(c), s->vocab);
    if (c && !s->masked && !(s->masked = malloc((size_t)s->vocab * sizeof *s->masked)))
        return cmf_err(CMF_E_NOMEM, "cmf_sampler_set_constraint: out of memory");
    s->con = c;
    cmf_json_fsm_init(&s->fsm);
    return CMF_OK;
}

cmf_status cmf_sampler_constraint_feed(cmf_sampler *s, const char *bytes, size_t n) {
    if (!s->con || n == 0) return CMF_OK;
    if (cmf_json_fsm_done(&s->fsm)) s->fsm.bad = 1; /* nothing follows the object */
    if (!cmf_json_fsm_feed(&s->fsm, bytes, n))
        return cmf_err(CMF_E_ARG, "sampler: JSON mode: the text does not continue the JSON object");
    return CMF_OK;
}

int cmf_sampler_constraint_done(const cmf_sampler *s) { return s && s->con && cmf_json_fsm_done(&s->fsm); }

int cmf_sampler_fits(const cmf_sampler *s, int32_t id) { return !s->con || cmf_constraint_fits(s->con, &s->fsm, id); }

cmf_status cmf_sampler_sample_masked(cmf_sampler *s, const float *logits, int32_t *token) {
    if (!s || !logits || !token) return cmf_err(CMF_E_ARG, "sampler: NULL argument");
    if (!s->con) return sample_row(s, logits, token);
    if (s->fsm.bad)
        return cmf_err(CMF_E_ARG, "sampler: JSON mode: an accepted token did not continue the JSON text (accept only "
                                  "drawn tokens after cmf_sampler_set_constraint)");
    const int any = cmf_constraint_mask(s->con, &s->fsm, logits, s->masked);
    cmf_status st = any ? sample_row(s, s->masked, token) : CMF_E_ARG;
    if (st == CMF_OK && (!cmf_constraint_fits(s->con, &s->fsm, *token) || s->masked[*token] == -INFINITY))
        st = CMF_E_ARG; /* every fitting logit NaN or -inf (greedy's argmax then lands on one at -inf) */
    if (st != CMF_OK)
        return cmf_err(CMF_E_ARG, "sampler: JSON mode: no token of the vocabulary %s", any ? "that continues the JSON "
                       "text has a finite logit" : "continues the JSON text");
    return CMF_OK;
}

cmf_status cmf_sampler_finish_topk(cmf_sampler *s, const cmf_sample_cand *c, int n, int32_t *token) {
    if (n <= 0) return cmf_err(CMF_E_ARG, "sampler: no token has a finite logit");
    if (n > s->vocab) return cmf_err(CMF_E_ARG, "sampler: %d candidates for a vocabulary of %d", n, s->vocab);
    memcpy(s->cands, c, (size_t)n * sizeof *c);
    return finish(s, n, c[0].z, token);
}
