/* info.c — `cmf info model.cmf [--tensors [PREFIX]]`: what a CMF file holds (CMF_FORMAT.md §1.2–1.9, §3): the
 * architecture and geometry from header.arch, the file-level quant label, feature bits, sections and their sizes,
 * the chat bundle, skills, what this runtime ignores, and optionally the tensor directory. Reads only the header,
 * the directory and the masks meta JSON (no tensor payload is touched). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "skills/skills.h"
#include "util/error.h"
#include "format/format.h"
#include "quant/dtype.h"

static const char *USAGE =
    "usage: cmf info MODEL.cmf [--tensors [PREFIX]]\n"
    "\n"
    "Prints the architecture, quant label, geometry (hidden_size, layers, heads, kv heads, head_dim, vocab,\n"
    "context), feature bits, sections and their sizes, chat template, eos/bos ids, skills, and what this\n"
    "runtime ignores (MTP head, sparse index), the task masks and which one runs by default.\n"
    "\n"
    "  --tensors [PREFIX]   also list the tensors (name, dtype, shape, bytes), only those whose name starts\n"
    "                       with PREFIX when given (put MODEL.cmf first, or write --tensors=PREFIX)\n";

/* "1234 B (1.2 KiB)" style sizes. */
static void human(uint64_t n, char *buf, size_t cap) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0)
        snprintf(buf, cap, "%" PRIu64 " B", n);
    else
        snprintf(buf, cap, "%" PRIu64 " B (%.1f %s)", n, v, unit[u]);
}

/* An integer field of an object as text ("?" when absent or not a number). */
static const char *num(const cJSON *obj, const char *key, char *buf, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsNumber(v))
        snprintf(buf, cap, "%.17g", v->valuedouble);
    else
        snprintf(buf, cap, "?");
    return buf;
}

static void print_geometry(const cJSON *arch) {
    char b[8][40];
    printf("geometry:      hidden_size %s, layers %s, heads %s, kv heads %s, head_dim %s\n",
           num(arch, "hidden_size", b[0], 40), num(arch, "num_layers", b[1], 40),
           num(arch, "num_attention_heads", b[2], 40), num(arch, "num_kv_heads", b[3], 40),
           num(arch, "head_dim", b[4], 40));
    printf("               intermediate_size %s, vocab %s, context %s\n", num(arch, "intermediate_size", b[5], 40),
           num(arch, "vocab_size", b[6], 40), num(arch, "max_position_embeddings", b[7], 40));

    /* model features worth knowing at a glance */
    printf("model:         ");
    /* arch.norm_style (CMF_FORMAT.md §1.4): "qwen" (the default, also llama's) is RMSNorm x̂·w, "gemma" x̂·(1+w).
     * Printed as the formula: "norm qwen" on a llama file read as a wrong model family (review13). */
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(arch, "norm_style");
    const char *style = cJSON_IsString(ns) ? ns->valuestring : "qwen";
    if (!strcmp(style, "qwen")) printf("norm RMSNorm x*w");
    else if (!strcmp(style, "gemma")) printf("norm RMSNorm x*(1+w)");
    else printf("norm_style %s", style);
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(arch, "rope_theta");
    printf(", rope_theta %.17g", cJSON_IsNumber(rt) ? rt->valuedouble : 10000.0);
    /* rope scaling: arch.rope_scaling (linear / llama3) or arch.yarn */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(arch, "rope_scaling");
    const cJSON *rst = cJSON_GetObjectItemCaseSensitive(rs, "rope_type"),
                *rsf = cJSON_GetObjectItemCaseSensitive(rs, "factor");
    if (cJSON_IsString(rst) && cJSON_IsNumber(rsf)) printf(", rope scaling %s x%g", rst->valuestring, rsf->valuedouble);
    const cJSON *yarn = cJSON_GetObjectItemCaseSensitive(arch, "yarn");
    const cJSON *yf = cJSON_GetObjectItemCaseSensitive(yarn, "factor"),
                *yo = cJSON_GetObjectItemCaseSensitive(yarn, "original_max_position_embeddings"),
                *ya = cJSON_GetObjectItemCaseSensitive(yarn, "attention_factor");
    if (cJSON_IsNumber(yf) && cJSON_IsNumber(yo))
        printf(", rope scaling yarn x%g of %.17g positions, attention factor %g", yf->valuedouble, yo->valuedouble,
               cJSON_IsNumber(ya) ? ya->valuedouble : 1.0);
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(arch, "rms_norm_eps");
    if (cJSON_IsNumber(eps)) printf(", rms_norm_eps %g", eps->valuedouble);
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(arch, "hidden_act");
    printf(", act %s", cJSON_IsString(act) ? act->valuestring : "silu");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(arch, "tie_word_embeddings"))) printf(", tied embeddings");
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(arch, "sliding_window");
    if (cJSON_IsNumber(sw)) printf(", sliding_window %.17g", sw->valuedouble);
    const cJSON *fc = cJSON_GetObjectItemCaseSensitive(arch, "final_logit_softcapping");
    if (cJSON_IsNumber(fc)) printf(", final softcap %g", fc->valuedouble);
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(arch, "attn_logit_softcapping");
    if (cJSON_IsNumber(ac)) printf(", attn softcap %g", ac->valuedouble);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(arch, "rope_pairing");
    if (cJSON_IsString(rp)) printf(", rope pairing %s", rp->valuestring);
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(arch, "num_loops");
    if (cJSON_IsNumber(nl) && nl->valuedouble > 1) printf(", loops %.17g", nl->valuedouble);
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(arch, "moe"))) printf(", MoE");
    printf("\n");

    /* Dory (looped nGPT): its pattern is the truth, layer_types only satisfies §1.4 (MLP sub-layers are listed
     * there as FullAttention because the enum has no MLP value) */
    const cJSON *dory = cJSON_GetObjectItemCaseSensitive(arch, "dory");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(dory, "layer_pattern");
    if (cJSON_IsString(pat)) {
        int n_s = 0, n_f = 0, n_m = 0;
        for (const char *c = pat->valuestring; *c; c++) n_s += *c == 'S', n_f += *c == '*', n_m += *c == '-';
        printf("layer types:   SlidingAttention x%d, FullAttention x%d, MLP x%d (pattern %s)\n", n_s, n_f, n_m,
               pat->valuestring);
        const char *keys[] = {"n_input_layers", "n_recurrent_layers", "n_output_layers", "n_recurrent_loops"};
        double v[4];
        for (int k = 0; k < 4; k++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(dory, keys[k]);
            v[k] = cJSON_IsNumber(x) ? x->valuedouble : (k == 3 ? 1 : 0);
        }
        const cJSON *km = cJSON_GetObjectItemCaseSensitive(dory, "recurrent_kv_cache_mode");
        const cJSON *t1 = cJSON_GetObjectItemCaseSensitive(dory, "rope_theta");
        const cJSON *t2 = cJSON_GetObjectItemCaseSensitive(dory, "rope_theta_2");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(dory, "swa_window_size");
        printf("dory:          blocks %.17g/%.17g/%.17g (input/recurrent/output), loops %.17g, kv mode %s",
               v[0], v[1], v[2], v[3], cJSON_IsString(km) ? km->valuestring : "per_loop");
        if (cJSON_IsNumber(t1)) printf(", rope_theta %.17g", t1->valuedouble);
        if (cJSON_IsNumber(t2)) printf(", rope_theta_2 %.17g", t2->valuedouble);
        if (cJSON_IsNumber(w)) printf(", window %.17g", w->valuedouble);
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(dory, "recon_bias"))) printf(", Recon probe");
        printf("\n");
        return;
    }

    /* layer types, counted */
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(arch, "layer_types");
    if (cJSON_IsArray(lt)) {
        printf("layer types:   ");
        const char *seen[16];
        int counts[16], n_seen = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lt) {
            const char *s = cJSON_IsString(e) ? e->valuestring : "?";
            int k = 0;
            while (k < n_seen && strcmp(seen[k], s)) k++;
            if (k == n_seen && n_seen < 16) seen[n_seen] = s, counts[n_seen++] = 0;
            if (k < n_seen) counts[k]++;
        }
        for (int k = 0; k < n_seen; k++) printf("%s%s x%d", k ? ", " : "", seen[k], counts[k]);
        printf("\n");
    }
}

static void print_features(uint32_t f) {
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {{CMF_FEAT_TENSOR_DIR, "TENSOR_DIR"},   {CMF_FEAT_BINARY_MASKS, "BINARY_MASKS"},
                 {CMF_FEAT_QUANT_2F, "QUANT_2F"},       {CMF_FEAT_DELTA_MASKS, "DELTA_MASKS"},
                 {CMF_FEAT_HOT_PACKS, "HOT_PACKS"},     {CMF_FEAT_LOOP_MASKS, "LOOP_MASKS"},
                 {CMF_FEAT_SKILL_FILE, "SKILL_FILE"}};
    printf("features:      0x%02" PRIx32, f);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (f & names[i].bit) printf(" %s", names[i].name);
    printf("\n");
}

static void print_sections(const cmf_file *f) {
    char a[32], b[32], c[32], d[32];
    human(f->env.data_len, a, sizeof a);
    human(f->env.header_len, b, sizeof b);
    human(f->env.dir_len, c, sizeof c);
    human(f->map.size, d, sizeof d);
    printf("size:          %s (header %s, directory %s, weights %s)\n", d, b, c, a);
    human(f->env.vocab_len, a, sizeof a);
    printf("vocab:         %s\n", f->env.vocab_len ? a : "absent (no tokenizer.json in the file)");
    human(f->env.masks_len, a, sizeof a);
    printf("masks:         %s\n", f->env.masks_len ? a : "absent");
    human(f->env.index_len, a, sizeof a);
    printf("index:         %s\n", f->env.index_len ? a : "absent");
}

static void print_ids(const char *label, const cJSON *v) {
    printf("%s", label);
    if (cJSON_IsNumber(v)) {
        printf("%.17g\n", v->valuedouble);
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
        const cJSON *e;
        int first = 1;
        cJSON_ArrayForEach(e, v) {
            if (cJSON_IsNumber(e)) printf("%s%.17g", first ? "" : ", ", e->valuedouble), first = 0;
        }
        printf("\n");
    } else {
        printf("none\n");
    }
}

static void print_chat(const cJSON *h) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(h, "tokenizer_config");
    const cJSON *tpl = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "chat_template") : NULL;
    if (cJSON_IsString(tpl))
        printf("chat template: yes (%zu bytes)\n", strlen(tpl->valuestring));
    else
        printf("chat template: no\n");
    print_ids("eos ids:       ", cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "eos_token_ids") : NULL);
    print_ids("bos id:        ", cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "bos_token_id") : NULL);
}

static void print_skills(const cmf_file *f) {
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(f->header, "skills");
    int n = cJSON_IsArray(sk) ? cJSON_GetArraySize(sk) : 0;
    if (n == 0) {
        printf("skills:        none\n");
        return;
    }
    printf("skills:        %d (run one with --skill ID; cmf skill list for details)\n", n);
    const cJSON *s;
    cJSON_ArrayForEach(s, sk) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(s, "id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "name");
        const char *ids = cJSON_IsString(id) ? id->valuestring : "?";
        /* the skill's tensors are directory entries named skill.<id>.<backbone name> (§3.1) */
        char prefix[256];
        snprintf(prefix, sizeof prefix, "skill.%s.", ids);
        size_t plen = strlen(prefix), count = 0;
        for (size_t i = 0; i < f->n_tensors; i++)
            if (!strncmp(f->tensors[i].name, prefix, plen)) count++;
        printf("  %-16s %-24s %zu tensors\n", ids, cJSON_IsString(name) ? name->valuestring : "-", count);
    }
}

/* What the file carries beyond the transformer: an MTP head (ignored by this version), task masks (applied: the
 * default one is named), the sparse index (deprecated, ignored). */
static void print_extras(const cmf_file *f) {
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(f->header, "arch");
    const cJSON *mtp = cJSON_GetObjectItemCaseSensitive(arch, "mtp");
    size_t n_mtp = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!strncmp(f->tensors[i].name, "model.mtp.", 10)) n_mtp++;
    if (cJSON_IsObject(mtp) || n_mtp) {
        char b[40];
        printf("MTP head:      arch.mtp (%s layers, %zu tensors): present, ignored by this version\n",
               cJSON_IsObject(mtp) ? num(mtp, "num_layers", b, sizeof b) : "?", n_mtp);
    }
    if (f->env.masks_len && f->masks) {
        cmf_masks *mk = NULL;
        if (cmf_masks_load(f, &mk) == CMF_OK) {
            printf("task masks:    %zu (", mk->n);
            for (size_t i = 0; i < mk->n; i++) printf("%s%s", i ? ", " : "", mk->masks[i].name);
            int idx = -1;
            cmf_err_clear();
            (void)cmf_masks_choose(mk, NULL, &idx);
            printf("); active by default: %s (--task NAME|off, CMF_TASK=off; see cmf masks)\n",
                   idx >= 0 ? mk->masks[idx].name : "none (dense)");
        } else {
            char msg[1024];
            printf("task masks:    unreadable: %s\n", cli_lib_message("info", CMF_E_FORMAT, msg, sizeof msg));
        }
        cmf_masks_free(mk);
    }
    if (f->env.index_len) printf("sparse index:  present, ignored by this version (deprecated section)\n");
}

static void print_tensors(const cmf_file *f, const char *prefix) {
    size_t plen = prefix ? strlen(prefix) : 0, shown = 0;
    uint64_t total = 0;
    printf("\n%-56s %-8s %-20s %12s\n", "name", "dtype", "shape", "bytes");
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (plen && strncmp(t->name, prefix, plen)) continue;
        char shape[96];
        size_t o = 0;
        o += (size_t)snprintf(shape + o, sizeof shape - o, "[");
        for (int d = 0; d < t->ndim && d < CMF_MAX_DIMS && o < sizeof shape; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%" PRIu32, d ? ", " : "", t->shape[d]);
        if (o < sizeof shape) snprintf(shape + o, sizeof shape - o, "]");
        const char *dn = cmf_dtype_name(t->dtype);
        printf("%-56s %-8s %-20s %12" PRIu64 "\n", t->name, dn ? dn : "?", shape, t->nbytes);
        shown++;
        total += t->nbytes;
    }
    char h[32];
    human(total, h, sizeof h);
    printf("%zu tensor(s), %s\n", shown, h);
}

/* "dtypes:" line: how many tensors of each directory dtype, and their bytes (the label above is file-level only:
 * the converter writes Q4_BLOCK for q4t / q4tp / q2tp files, CMF_FORMAT.md §1). */
void cli_dtype_tally(const cmf_file *f, size_t *count, uint64_t *bytes) {
    memset(count, 0, (CMF_DT_COUNT + 1) * sizeof *count);
    memset(bytes, 0, (CMF_DT_COUNT + 1) * sizeof *bytes);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const int d = f->tensors[i].dtype < CMF_DT_COUNT ? (int)f->tensors[i].dtype : CMF_DT_COUNT;
        count[d]++;
        bytes[d] += f->tensors[i].nbytes;
    }
}

static void print_dtypes(const cmf_file *f) {
    size_t count[CMF_DT_COUNT + 1];
    uint64_t bytes[CMF_DT_COUNT + 1];
    cli_dtype_tally(f, count, bytes);
    printf("dtypes:        ");
    for (int d = 0, first = 1; d <= CMF_DT_COUNT; d++)
        if (count[d]) {
            char sz[64];
            human(bytes[d], sz, sizeof sz);
            printf("%s%s x%zu, %s", first ? "" : "; ", d < CMF_DT_COUNT && cmf_dtype_name(d) ? cmf_dtype_name(d) : "?",
                   count[d], sz);
            first = 0;
        }
    printf("\n");
}

int cmd_info(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "info", argc, argv);
    const char *path = NULL, *prefix = NULL;
    int tensors = 0;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (cli_is(&a, "--tensors", NULL)) {
            tensors = 1;
            if (a.inline_val) {
                prefix = a.inline_val;
                a.inline_used = 1;
            } else if (path && a.i + 1 < a.argc && a.argv[a.i + 1][0] != '-') {
                prefix = a.argv[++a.i];
            }
            continue;
        }
        if (!cli_is_flag(&a) && !path) {
            path = a.arg;
            continue;
        }
        return cli_unknown(&a);
    }
    if (!path) return cli_usage_error("info", "missing MODEL.cmf (see cmf info --help)");

    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(path, &f);
    if (st != CMF_OK) return cli_lib_error("info", st);

    const cJSON *h = f->header;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(h, "arch");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(arch, "arch_name");
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(h, "quant_type");
    printf("file:          %s\n", path);
    printf("format:        CMF v%" PRIu32 ", %zu tensors\n", f->env.version, f->n_tensors);
    printf("arch:          %s\n", cJSON_IsString(an) ? an->valuestring : "?");
    printf("quant:         %s (file label; each tensor's dtype is in the directory)\n",
           cJSON_IsString(qt) ? qt->valuestring : "?");
    print_dtypes(f);
    print_geometry(arch);
    print_features(f->env.features);
    print_sections(f);
    print_chat(h);
    print_skills(f);
    print_extras(f);
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(h, "provenance");
    const cJSON *tool = cJSON_IsObject(prov) ? cJSON_GetObjectItemCaseSensitive(prov, "tool") : NULL;
    if (cJSON_IsString(tool)) printf("written by:    %s\n", tool->valuestring);
    /* the O(1) far-field hint of `cmf convert --o1` (DORY.md §3.1), as stored: {layers, m, w, sink} */
    const cJSON *o1 = cJSON_IsObject(prov) ? cJSON_GetObjectItemCaseSensitive(prov, "o1_attn") : NULL;
    char *o1s = o1 ? cJSON_PrintUnformatted(o1) : NULL;
    if (o1s) printf("o1 hint:       provenance.o1_attn %s (the runtime's default far field; --o1 off overrides)\n", o1s);
    free(o1s);
    if (tensors) print_tensors(f, prefix);
    cmf_file_close(f);
    return CLI_OK;
}
