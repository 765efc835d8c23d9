/* gemm_pack.h — the packed int8 weight panel shared by the AVX2 and AVX-512 GEMM paths (gemm_avx2.c,
 * gemm_avx512.c; what cmf_gemm_pack_i8_* write into the KERN_GEMM_PACK_BYTES scratch of kern.h and
 * cmf_gemm_i8_* read): a 64-byte header, PR f32 row scales, kb x PR f32 block scales, kb x 1024 bytes of int8
 * weights (each path's own order, 32 values x 32 rows per block), then the decode buffer (PR rows x DB blocks of
 * 32 int8, then their PR x DB f32 scales). PR = KERN_GEMM_R rows; DB blocks decoded per step. */
#ifndef CMF_BACKEND_CPU_GEMM_PACK_H
#define CMF_BACKEND_CPU_GEMM_PACK_H

#include <stdint.h>

#include "backend/cpu/kern.h"

enum { PK_PR = KERN_GEMM_R, PK_DB = 8 /* blocks decoded per step */ };

typedef struct {
    int32_t nr, rowscaled; /* rows packed (<= PK_PR); 1: q8 (one scale per row in rs) */
    int64_t b0, kb;        /* first block and number of blocks of the panel */
    uint8_t pad[40];       /* to 64 bytes */
} pk_head;

/* The parts of a packed panel of kb blocks. */
typedef struct {
    pk_head *h;
    float *rs, *ws; /* row scales [PK_PR]; block scales [kb][PK_PR] */
    uint8_t *w8;    /* the int8 weights, kb * 1024 bytes (layout: the path's packer) */
    uint8_t *tmp;   /* decode buffer: PK_PR rows x PK_DB blocks of 32 */
    float *tws;     /* their scales */
} pk_parts;

/* The parts of the panel at buf (64-byte aligned scratch of KERN_GEMM_PACK_BYTES) for kb blocks. */
static inline pk_parts pk_parts_of(void *buf, int64_t kb) {
    pk_parts p;
    uint8_t *b = buf;
    p.h = (pk_head *)(void *)b;
    p.rs = (float *)(void *)(b + 64);
    p.ws = p.rs + PK_PR;
    p.w8 = (uint8_t *)(p.ws + kb * PK_PR);
    p.tmp = p.w8 + kb * 1024;
    p.tws = (float *)(void *)(p.tmp + PK_PR * PK_DB * 32);
    return p;
}

#endif
