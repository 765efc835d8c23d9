/* policy.c — which dtype each tensor gets for a chosen --quant (CMF_FORMAT.md §2.0 "Converter policy"), shared by
 * the converters (convert/emit.c) and `cmf requant`. Tensor lists follow cortiq's converter
 * (crates/cortiq-cli/src/convert.rs: force_f16, force_f32, q2tp_expert_gate_or_up, q2tp_dense_gate_or_up). */
#include <string.h>

#include "quant/dtype.h"
#include "quant/policy.h"

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

int cmf_policy_gate_critical(const char *name) {
    static const char *const SUFFIX[] = {
        "mlp.gate.weight", "shared_expert_gate.weight", "self_attn.g_proj.weight", "linear_attn.in_proj_a.weight",
        "linear_attn.in_proj_b.weight", "conv1d.weight",
        /* KDA (Kimi) low-rank gate stages */
        "kda_attn.f_a_proj.weight", "kda_attn.f_b_proj.weight", "kda_attn.b_proj.weight",
        "kda_attn.g_a_proj.weight", "kda_attn.g_b_proj.weight",
        /* Gemma-3n AltUp / LAuReL / per-layer inputs */
        "altup.correction_coefs.weight", "altup.prediction_coefs.weight", "altup.modality_router.weight",
        "laurel.linear_left.weight", "laurel.linear_right.weight", "per_layer_input_gate.weight",
        ".per_layer_projection.weight"};
    for (size_t i = 0; i < sizeof SUFFIX / sizeof SUFFIX[0]; i++)
        if (ends_with(name, SUFFIX[i])) return 1;
    return 0;
}

static int gate_or_up_suffix(const char *name) {
    return ends_with(name, ".gate_proj.weight") || ends_with(name, ".up_proj.weight") ||
           ends_with(name, ".w1.weight") || ends_with(name, ".w3.weight");
}

int cmf_policy_is_expert(const char *name) {
    return strstr(name, ".experts.") || strstr(name, ".shared_expert.") || strstr(name, ".shared_experts.");
}

int cmf_policy_q2tp_plane(const char *name, int has_moe) {
    if (cmf_policy_is_expert(name)) return gate_or_up_suffix(name);
    if (has_moe || strstr(name, ".shared_expert") || strstr(name, ".mtp.")) return 0;
    /* Dory's dense MLP layers name their gate/up `backbone.layers.N.mixer.{gate,up}_proj.weight` (DORY.md §1.2):
     * dense gate/up of a model without experts, so on the 2-bit plane by §2.0's rule */
    return ends_with(name, ".mlp.gate_proj.weight") || ends_with(name, ".mlp.up_proj.weight") ||
           ends_with(name, ".mlp.w1.weight") || ends_with(name, ".mlp.w3.weight") ||
           ends_with(name, ".mixer.gate_proj.weight") || ends_with(name, ".mixer.up_proj.weight");
}

static int needs_cols32(int dt) {
    return dt == CMF_DT_Q4_TILED || dt == CMF_DT_Q4TP || dt == CMF_DT_Q2TP || dt == CMF_DT_VBIT ||
           dt == CMF_DT_VBIT_RO || dt == CMF_DT_Q1 || dt == CMF_DT_Q1S || dt == CMF_DT_Q1T;
}

int cmf_quant_policy(int quant, const char *name, int ndim, const uint64_t *shape, int has_moe) {
    if (ends_with(name, ".tid2eid")) return CMF_DT_F32;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int matrix = ndim == 2 && n >= 32 && !cmf_policy_gate_critical(name);
    if (!matrix) return quant == CMF_DT_F32 || quant == CMF_DT_BF16 ? quant : CMF_DT_F16;
    int dt = quant;
    if (quant == CMF_DT_Q2TP && !cmf_policy_q2tp_plane(name, has_moe)) dt = CMF_DT_Q4TP;
    if (needs_cols32(dt) && shape[1] % 32 != 0) dt = CMF_DT_Q8_2F;
    return dt;
}

int cmf_policy_has_moe(const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strstr(names[i], ".experts.")) return 1;
    return 0;
}
