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
 *   4. top-k: keep the k largest z (k = 0: off)                                  (HF TopKLogitsWarper)
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
 * Memory: everything is allocated by cmf_sampler_new; sampling allocates nothing.
 */
#ifndef CMF_SAMPLE_H
#define CMF_SAMPLE_H

#include <stdint.h>

#include "cmf.h"

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

#endif
