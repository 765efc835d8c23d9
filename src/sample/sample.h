/* sample.h — choosing the next token from a row of logits: greedy, temperature, top-k, top-p (nucleus), min-p,
 * and repetition / presence / frequency penalties over a window of recent tokens, driven by a seeded PRNG of our
 * own (PCG32), so the same seed gives the same tokens on every platform.
 *
 * Order of operations (Hugging Face transformers' generate(): logits processors, then warpers):
 *   1. penalties over the last `penalty_last_n` accepted tokens (each distinct token once, with its count c):
 *        repetition (CTRL paper, Keskar et al. 2019; HF RepetitionPenaltyLogitsProcessor):
 *            l = l > 0 ? l / r : l * r
 *        presence / frequency (OpenAI API definition): l -= presence + c * frequency
 *   2. temperature <= 0: greedy argmax (ties -> lowest id); stop here.
 *   3. z = l / temperature
 *   4. top-k: keep the k largest z (k = 0: off), then sort them in the order below   (HF TopKLogitsWarper)
 *   5. top-p: keep the smallest set of most probable tokens whose probability (renormalized over what step 4
 *      kept) sums to >= top_p; always at least one token (top_p >= 1: off)       (HF TopPLogitsWarper)
 *   6. min-p: keep tokens with p >= min_p * p_max (min_p = 0: off)               (HF MinPLogitsWarper)
 *   7. draw from softmax(z) over the kept tokens with one uniform number.
 * All kept sets are prefixes of the tokens ordered by (z descending, id ascending), so steps 4-6 are computed as
 * prefix lengths: top-k by quickselect (no full sort), min-p by a threshold pass, and top-p sorts only the prefix
 * it keeps, in growing pieces (the next 64, 256, ... candidates by quickselect, then a sort of the piece).
 * Cost per token: O(vocab) plus O(m log m) for the m tokens top-p keeps (a flat distribution with top-k and min-p
 * off keeps most of the vocab). Greedy (temperature <= 0) reads the row in place (a max over 8 lanes, then the first
 * index holding it); the row is copied only while a penalty applies.
 *
 * With top-k on, steps 5-7 read the k kept candidates sorted in that order (weights summed, min-p filtered and the
 * draw walked in it), so a device that hands back the same sorted k candidates (cmf_session_sample on CUDA,
 * cmf_sampler_finish_topk) gets the same token from the same generator state. (Before 2026-11-30 the k kept
 * candidates were summed and walked in quickselect order: the same distribution, other tokens for a given seed.)
 *
 * Memory: everything is allocated by cmf_sampler_new; sampling allocates nothing.
 */
#ifndef CMF_SAMPLE_H
#define CMF_SAMPLE_H

#include <stdint.h>

#include "cmf.h"
#include "sample/json_fsm.h"

/* The public sampler (cmf_sampler_params, cmf_sampler_new/_free/_reset/_accept/_sample and
 * cmf_sampler_default_params) is declared in include/cmf.h; this header adds the internal helpers below. */

/* Index of the largest value (ties -> the lowest index); NaN entries never win. -1 when n <= 0 or all NaN. */
int32_t cmf_argmax(const float *v, int n);

/* The PRNG: PCG32 (M.E. O'Neill, "PCG: A Family of Simple Fast Space-Efficient Statistically Good Algorithms for
 * Random Number Generation", 2014; XSH-RR output, 64-bit LCG state). */
typedef struct cmf_rng {
    uint64_t state, inc;
} cmf_rng;

/* Seeds the generator (any seed is valid; the stream constant is fixed). */
void cmf_rng_seed(cmf_rng *r, uint64_t seed);
/* Next 32 uniformly distributed bits. */
uint32_t cmf_rng_u32(cmf_rng *r);
/* A uniform double in [0, 1) with 53 random bits (two draws). */
double cmf_rng_uniform(cmf_rng *r);

/* A candidate: scaled logit z = l / temperature (+inf clamped to 3e38, NaN and -inf never candidates) and its id. */
typedef struct cmf_sample_cand {
    float z;
    int32_t id;
} cmf_sample_cand;

/* Step 1 for one token seen `count` times in the window: the repetition penalty, then presence + count *
 * frequency subtracted. Separate statements, so that no compiler contracts them into an fma: the CUDA path
 * (backend/cuda/sample.cu k_penalize) repeats these float operations with _rn intrinsics, bit for bit. */
static inline float cmf_sample_penalize(float x, int32_t count, float repeat, float presence, float frequency) {
    if (repeat != 1.0f) x = x > 0.0f ? x / repeat : x * repeat;
    const float f = (float)count * frequency;
    const float d = presence + f;
    return x - d;
}

/* The sampler's parameters and vocabulary size (s not NULL). */
const cmf_sampler_params *cmf_sampler_params_of(const cmf_sampler *s);
int cmf_sampler_vocab(const cmf_sampler *s);

/* The penalty window of step 1 as m distinct tokens (*ids)[i] with their counts (*counts)[i], i < m (arrays owned
 * by the sampler, valid until the next call on it); returns 0 when no penalty changes any logit now. */
int cmf_sampler_penalty_window(cmf_sampler *s, const int32_t **ids, const int32_t **counts);

/* Steps 5-7 from step 4's result computed elsewhere: c[0..n) are the min(top_k, finite candidates) first
 * candidates of the penalized row in the order (z desc, id asc), sorted, z as step 3 computes it (-0.0 may come
 * as +0.0: same result). Same token and generator advance as cmf_sampler_sample on the full row (top_k > 0,
 * temperature > 0). Errors: CMF_E_ARG when n <= 0 ("no token has a finite logit", as cmf_sampler_sample) or n >
 * vocab. */
cmf_status cmf_sampler_finish_topk(cmf_sampler *s, const cmf_sample_cand *c, int n, int32_t *token);

/* The constraint (constrain.c). The vocabulary size it was built for. */
int cmf_constraint_vocab(const cmf_constraint *c);
/* 1 when token id fits after the text of recognizer state f (json_fsm.h): its bytes continue the text, or the text
 * is complete and id is an eos id; 0 otherwise (eos before the end, special tokens, ids outside the vocabulary). */
int cmf_constraint_fits(const cmf_constraint *c, const cmf_json_fsm *f, int32_t id);
/* out[v] = logits[v] for every token v < vocab that fits after f's text (cmf_constraint_fits), else -inf; returns
 * whether any fits. The same answers as cmf_constraint_fits per token, faster: a token whose first byte the text
 * cannot take next is out at once, and inside a string a token of plain characters is in at once. */
int cmf_constraint_mask(const cmf_constraint *c, const cmf_json_fsm *f, const float *logits, float *out);
/* Advances f by token id (a token that does not fit marks f bad). */
void cmf_constraint_advance(const cmf_constraint *c, cmf_json_fsm *f, int32_t id);

/* Advances s's constraint by n bytes of text that were not drawn as tokens (the server: content that followed
 * </think> inside the token that closed the reasoning). CMF_E_ARG (and the constraint broken) when they do not
 * continue the JSON text; CMF_OK without a constraint. */
cmf_status cmf_sampler_constraint_feed(cmf_sampler *s, const char *bytes, size_t n);
/* 1 when s has no constraint or token id fits its text (cmf_constraint_fits). */
int cmf_sampler_fits(const cmf_sampler *s, int32_t id);
/* The constrained redraw: the row with every token that does not fit at -inf, sampled as cmf_sampler_sample (one
 * more draw of the generator). Errors: CMF_E_ARG when the constraint is broken (a token that did not fit was
 * accepted) or no fitting token has a finite logit. cmf_sampler_sample calls it when its first draw does not fit;
 * cmf_session_sample when the device's does not. */
cmf_status cmf_sampler_sample_masked(cmf_sampler *s, const float *logits, int32_t *token);

#endif
