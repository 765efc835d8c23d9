/* policy.h — the per-tensor dtype policy of the converters and `cmf requant` (CMF_FORMAT.md §2.0). */
#ifndef CMF_QUANT_POLICY_H
#define CMF_QUANT_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* The dtype a tensor named `name` of shape[ndim] gets when the user chose `quant` (enum cmf_dtype), §2.0:
 *   *.tid2eid index tables -> f32;
 *   1-D / non-2-D tensors, fewer than 32 elements, gate-critical 2-D tensors -> f16 (f32 / bf16 targets keep
 *   f32 / bf16 there);
 *   other 2-D matrices (embed_tokens and lm_head included) -> quant, except: quant q2tp is a profile: q2tp only for
 *   MoE expert gate/up (any model) or dense gate/up (`.mlp.` gate_proj/up_proj/w1/w3, Dory's `.mixer.` gate_proj/
 *   up_proj; models without experts, has_moe == 0), q4tp for the rest;
 *   dtypes that need cols % 32 == 0 (q4_tiled, q4tp, q2tp, vbit*, q1*) fall back to q8_2f when cols % 32 != 0.
 * Never fails; `quant` is not validated here. */
int cmf_quant_policy(int quant, const char *name, int ndim, const uint64_t *shape, int has_moe);

/* 1 if the 2-D tensor stays f16 whatever the quant (routers, gates; cortiq's force_f16 list). */
int cmf_policy_gate_critical(const char *name);
/* 1 if the name is an expert's (".experts.", ".shared_expert(s).") tensor. */
int cmf_policy_is_expert(const char *name);
/* 1 if the q2tp profile puts this tensor on the 2-bit plane (expert gate/up, or dense gate/up when !has_moe). */
int cmf_policy_q2tp_plane(const char *name, int has_moe);
/* 1 if any of the n names holds ".experts." (the model has routed MoE experts). */
int cmf_policy_has_moe(const char *const *names, size_t n);

#endif
