/* kern_neon_i8.h — the int8 kernels of the arm64 path (kern.h's mk_i8 and gemv_i8), written once and included by
 * kern_neon.c once per dot-product flavour, not a header of its own: before each inclusion kern_neon.c defines
 *   KN_DOT  1: block dot products by SDOT (kn_sdot = vdotq_s32); 0: by SMULL/SMLAL2 + SADALP (ARMv8.0);
 *   KN(f)   the flavour's name of function f (f_dot, f_base);
 *   KN_TGT  the flavour's target attribute (enables the dot-product extension for the SDOT flavour).
 * Weights are signed v in natural column order; every block dot product is exact in int32 and scaled in f32. */

/* The exact dot product of one block of 32 (w0|w1 against x0|x1), added to the four int32 lanes of acc. */
KN_TGT AI int32x4_t KN(dot32)(int32x4_t acc, int8x16_t w0, int8x16_t x0, int8x16_t w1, int8x16_t x1) {
#if KN_DOT
    return kn_sdot(kn_sdot(acc, w0, x0), w1, x1);
#else
    /* |v| <= 128, |x| <= 127: one product <= 16256, the int16 sum of two <= 32512 */
    const int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
    const int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
    return vpadalq_s16(vpadalq_s16(acc, p0), p1);
#endif
}

/* ---- microkernel (kern_mk_i8): KERN_RB decoded rows x T token slots over kb blocks ----------------------------- */

KN_TGT AI void KN(mk_i8_t)(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb,
                           const cmf_qact *a, int64_t t0, int64_t b0, float acc[KERN_RB][KERN_TB], const int T) {
    float32x4_t s[KERN_RB][KERN_TB];
    const int8_t *xq[KERN_TB];
    const float *xd[KERN_TB];
    for (int j = 0; j < T; j++) {
        xq[j] = a->q + ((t0 + j) * a->nb + b0) * 32;
        xd[j] = a->d + (t0 + j) * a->nb + b0;
        for (int i = 0; i < KERN_RB; i++) s[i][j] = vdupq_n_f32(0.0f);
    }
    const int32x4_t z = vdupq_n_s32(0);
    for (int64_t b = 0; b < kb; b++) {
        int8x16_t X0[KERN_TB], X1[KERN_TB];
        for (int j = 0; j < T; j++) {
            X0[j] = vld1q_s8(xq[j] + 32 * b);
            X1[j] = vld1q_s8(xq[j] + 32 * b + 16);
        }
        for (int i = 0; i < KERN_RB; i++) {
            const int8x16_t W0 = vld1q_s8(q + i * ldq + 32 * b), W1 = vld1q_s8(q + i * ldq + 32 * b + 16);
            const float sw = ws[i * ldw + b];
            for (int j = 0; j < T; j++) {
                const int32x4_t p = KN(dot32)(z, W0, X0[j], W1, X1[j]);
                s[i][j] = vfmaq_n_f32(s[i][j], vcvtq_f32_s32(p), sw * xd[j][b]);
            }
        }
    }
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) acc[i][j] = vaddvq_f32(s[i][j]);
}

KN_TGT static void KN(mk_i8)(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb,
                             const cmf_qact *a, int64_t t0, int tb, int64_t b0, float acc[KERN_RB][KERN_TB]) {
    switch (tb) {
    case 1: KN(mk_i8_t)(q, ldq, ws, ldw, kb, a, t0, b0, acc, 1); break;
    case 2: KN(mk_i8_t)(q, ldq, ws, ldw, kb, a, t0, b0, acc, 2); break;
    case 3: KN(mk_i8_t)(q, ldq, ws, ldw, kb, a, t0, b0, acc, 3); break;
    default: KN(mk_i8_t)(q, ldq, ws, ldw, kb, a, t0, b0, acc, 4); break;
    }
}

/* ---- fused decode kernels (kern_gemv_i8) -------------------------------------------------------------------------
 * Up to KERN_RB rows read straight from the mapping, each block decoded in registers and dotted with the one-level
 * int8 activations of each token (slot j = token j), the four rows sharing every activation load, one f32
 * accumulator per row and token over the whole row, one horizontal add at the end. K selects the weight layout:
 *   K = 0: q8_row / q8_2f, v = q, one row scale applied at the end (a partial last block is copied, zero-padded);
 *   K = 1: q4_tiled (16 nibble bytes at byte 2 of each 18-byte tile), K = 2: q4_block (16 bytes per group),
 *   K = 3: q4tp (as q4_block, the scale a rung of the row's ladder, computed once per call),
 *          all with v = nibble - 8 and the activations loaded de-interleaved (LD2: even | odd columns) to meet
 *          the low | high nibbles;
 *   K = 4: q2tp, v = 2c - 3, scale t[c-1]/2 (0 for code 0), activations de-interleaved by 4 (LD4). */

KN_TGT AI void KN(gemv_t)(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, float *ws,
                          float acc[KERN_RB][KERN_TB], const int K, const int T) {
    const int64_t C = w->cols, nb = a->nb, G = C / 32; /* G: whole blocks of a row */
    const uint8_t *base[KERN_RB];
    const float *wsi[KERN_RB];
    float rs[KERN_RB], lad[KERN_RB][32];
    kern_tp tp;
    memset(&tp, 0, sizeof tp);
    if (K >= 3) {
        cmf_kern_tp(w, &tp);
        for (int i = 0; i < nr; i++) cmf_kern_ladder(w, &tp, w->row0 + r + i, lad[i]);
    }
    for (int i = 0; i < KERN_RB; i++) {
        const int ii = i < nr ? i : nr - 1; /* rows past nr repeat the last one; their sums are dropped */
        const int64_t R = w->row0 + r + ii;
        base[i] = K == 0 ? w->data + R * C
                  : K == 1 ? w->data + 18 * R * G + 2
                  : K == 4 ? w->data + 8 * R * G
                           : w->data + 16 * R * G;
        rs[i] = K == 0 ? cmf_f16_table[cmf_rd16(w->data + (size_t)(w->full_rows * C) + 2 * (size_t)R)] : 1.0f;
        wsi[i] = ws + ii * KERN_KB;
    }
    float32x4_t s[KERN_RB][KERN_GEMV_T];
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) s[i][j] = vdupq_n_f32(0.0f);
    const int32x4_t z = vdupq_n_s32(0);
    const uint8x16_t m4 = vdupq_n_u8(15);
    const int8x16_t e8 = vdupq_n_s8(8), e3 = vdupq_n_s8(3);
    const uint8x8_t m2 = vdup_n_u8(3);
    for (int64_t b0 = 0; b0 < nb; b0 += KERN_KB) {
        const int64_t kb = nb - b0 < KERN_KB ? nb - b0 : KERN_KB;
        if (K >= 3) {
            for (int i = 0; i < nr; i++)
                for (int64_t b = 0; b < kb; b++) {
                    const unsigned code = cmf_kern_code(&tp, w->row0 + r + i, b0 + b);
                    ws[i * KERN_KB + b] = K == 3 ? lad[i][code] : code ? 0.5f * lad[i][code - 1] : 0.0f;
                }
        } else if (K != 0) {
            for (int i = 0; i < nr; i++) scales(w, r + i, b0, kb, ws + i * KERN_KB);
        }
        for (int64_t b = 0; b < kb; b++) {
            const int64_t B = b0 + b;
            int8x16_t X0[KERN_GEMV_T], X1[KERN_GEMV_T];
            float d[KERN_GEMV_T];
            for (int j = 0; j < T; j++) {
                const int8_t *xq = a->q + 32 * (j * nb + B);
                if (K == 0) {
                    X0[j] = vld1q_s8(xq);
                    X1[j] = vld1q_s8(xq + 16);
                } else if (K == 4) {
                    const int8x8x4_t v = vld4_s8(xq);
                    X0[j] = vcombine_s8(v.val[0], v.val[1]);
                    X1[j] = vcombine_s8(v.val[2], v.val[3]);
                } else {
                    const int8x16x2_t v = vld2q_s8(xq);
                    X0[j] = v.val[0];
                    X1[j] = v.val[1];
                }
                d[j] = a->d[j * nb + B];
            }
            for (int i = 0; i < KERN_RB; i++) {
                int8x16_t W0, W1;
                if (K == 0) {
                    if (B < G) {
                        W0 = vld1q_s8((const int8_t *)base[i] + 32 * B);
                        W1 = vld1q_s8((const int8_t *)base[i] + 32 * B + 16);
                    } else { /* the last, partial block of a row: missing columns read as 0 */
                        int8_t tmp[32] = {0};
                        memcpy(tmp, base[i] + 32 * B, (size_t)(C - 32 * B));
                        W0 = vld1q_s8(tmp);
                        W1 = vld1q_s8(tmp + 16);
                    }
                } else if (K == 4) {
                    const uint8x8_t c = vld1_u8(base[i] + 8 * B);
                    const uint8x16_t c01 = vcombine_u8(vand_u8(c, m2), vand_u8(vshr_n_u8(c, 2), m2));
                    const uint8x16_t c23 = vcombine_u8(vand_u8(vshr_n_u8(c, 4), m2), vshr_n_u8(c, 6));
                    W0 = vsubq_s8(vreinterpretq_s8_u8(vshlq_n_u8(c01, 1)), e3);
                    W1 = vsubq_s8(vreinterpretq_s8_u8(vshlq_n_u8(c23, 1)), e3);
                } else {
                    const uint8x16_t u = vld1q_u8(base[i] + (K == 1 ? 18 : 16) * B);
                    W0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(u, m4)), e8);
                    W1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(u, 4)), e8);
                }
                const float sw = K == 0 ? 1.0f : wsi[i][b];
                for (int j = 0; j < T; j++) {
                    const int32x4_t p = KN(dot32)(z, W0, X0[j], W1, X1[j]);
                    s[i][j] = vfmaq_n_f32(s[i][j], vcvtq_f32_s32(p), K == 0 ? d[j] : d[j] * sw);
                }
            }
        }
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < T; j++) acc[i][j] = vaddvq_f32(s[i][j]) * rs[i];
}

#define KN_GEMV_FN(name, K)                                                                                        \
    KN_TGT static void KN(name)(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,      \
                                float acc[KERN_RB][KERN_TB]) {                                                     \
        if (nt == 1) KN(gemv_t)(w, r, nr, a, ws, acc, K, 1);                                                       \
        else KN(gemv_t)(w, r, nr, a, ws, acc, K, 2);                                                               \
    }
KN_GEMV_FN(gemv_q8, 0)
KN_GEMV_FN(gemv_q4t, 1)
KN_GEMV_FN(gemv_q4b, 2)
KN_GEMV_FN(gemv_q4tp, 3)
KN_GEMV_FN(gemv_q2tp, 4)
#undef KN_GEMV_FN

/* ---- int8 GEMM (kern_gemm_i8) on a panel packed by gemm_pack (kern_neon.c) ----------------------------------------
 * Microkernel: 8 rows (two row quads) x T <= 4 tokens. Per block, the 8 column groups of each quad are dotted
 * with lane g of the token's activation vector (SDOT by element; or, in the SMULL flavour, the lane broadcast,
 * SMULL/SMULL2 of the 4 rows x 4 bytes, ADDP to row pairs of columns and SADALP to the 4 row sums: exact, as
 * |v*x| <= 16256), giving the exact int32 block sums of 4 rows in one vector; they are scaled in f32 by
 * ws (4 rows) * d (the token's block scale) and accumulated over the chunk's blocks. */
#if KN_DOT
#define KN_DOTL(acc, w, x, L) KN_SDOT_LANE(acc, w, x, L)
#else
#define KN_DOTL(acc, w, x, L)                                                                                      \
    do {                                                                                                           \
        const int8x16_t xb_ = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), L));                   \
        (acc) = vpadalq_s16((acc), vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(xb_)), vmull_high_s8((w), xb_))); \
    } while (0)
#endif

KN_TGT AI void KN(gemm_mk)(const void *pack, int h, const cmf_qact *a, int64_t t0, float *out, int64_t ldo,
                           const float *bias, int first, const int T) {
    const pk_head *hd = pack;
    const int64_t kb = hd->kb, b0 = hd->b0, nb = a->nb;
    const float *ws = pk_ws(pack) + 8 * h;
    const int8_t *e = pk_e(pack, kb) + 256 * h;
    float32x4_t F0[4], F1[4];
    const int8_t *xq[4];
    const float *xd[4];
    for (int j = 0; j < T; j++) {
        xq[j] = a->q + ((t0 + j) * nb + b0) * 32;
        xd[j] = a->d + (t0 + j) * nb + b0;
        F0[j] = F1[j] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < kb; b++) {
        const int8_t *eb = e + b * (PK_R * 32);
        int8x16_t XA[4], XB[4];
        int32x4_t I0[4], I1[4];
        for (int j = 0; j < T; j++) {
            XA[j] = vld1q_s8(xq[j] + 32 * b);
            XB[j] = vld1q_s8(xq[j] + 32 * b + 16);
            I0[j] = I1[j] = vdupq_n_s32(0);
        }
#define KN_G(g, X, L)                                                                                              \
    {                                                                                                              \
        const int8x16_t W0 = vld1q_s8(eb + 16 * (g)), W1 = vld1q_s8(eb + 128 + 16 * (g));                          \
        for (int j = 0; j < T; j++) {                                                                              \
            KN_DOTL(I0[j], W0, X[j], L);                                                                           \
            KN_DOTL(I1[j], W1, X[j], L);                                                                           \
        }                                                                                                          \
    }
        KN_G(0, XA, 0) KN_G(1, XA, 1) KN_G(2, XA, 2) KN_G(3, XA, 3)
        KN_G(4, XB, 0) KN_G(5, XB, 1) KN_G(6, XB, 2) KN_G(7, XB, 3)
#undef KN_G
        const float32x4_t S0 = vld1q_f32(ws + b * PK_R), S1 = vld1q_f32(ws + b * PK_R + 4);
        for (int j = 0; j < T; j++) {
            F0[j] = vfmaq_f32(F0[j], vcvtq_f32_s32(I0[j]), vmulq_n_f32(S0, xd[j][b]));
            F1[j] = vfmaq_f32(F1[j], vcvtq_f32_s32(I1[j]), vmulq_n_f32(S1, xd[j][b]));
        }
    }
    const int left = hd->nr - 8 * h < 8 ? hd->nr - 8 * h : 8;
    for (int j = 0; j < T; j++) {
        float v[8];
        vst1q_f32(v, F0[j]);
        vst1q_f32(v + 4, F1[j]);
        float *o = out + (t0 + j) * ldo + 8 * h;
        for (int i = 0; i < left; i++) o[i] = (first ? (bias ? bias[8 * h + i] : 0.0f) : o[i]) + v[i];
    }
}
#undef KN_DOTL

KN_TGT static void KN(gemm_i8)(const void *pack, const cmf_qact *a, int64_t t0, int64_t t1, float *out,
                               int64_t ld_out, const float *bias, int first) {
    const pk_head *hd = pack;
    for (int h = 0; h < (hd->nr + 7) / 8; h++)
        for (int64_t t = t0; t < t1; t += 4) {
            switch (t1 - t) {
            case 1: KN(gemm_mk)(pack, h, a, t, out, ld_out, bias, first, 1); break;
            case 2: KN(gemm_mk)(pack, h, a, t, out, ld_out, bias, first, 2); break;
            case 3: KN(gemm_mk)(pack, h, a, t, out, ld_out, bias, first, 3); break;
            default: KN(gemm_mk)(pack, h, a, t, out, ld_out, bias, first, 4); break;
            }
        }
}
