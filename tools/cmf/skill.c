/* skill.c — `cmf skill add|list|export|apply` (CMF_FORMAT.md §3.2–3.3), thin over src/skills/skills.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "quant/dtype.h"
#include "skills/skills.h"
#include "util/fileio.h"

static const char *USAGE =
    "usage: cmf skill add MODEL.cmf --from DONOR --id ID [--name NAME] [--tensors ffn|attn|all]\n"
    "                     [--layers all|A-B|i,j,k] [--skill-quant DTYPE] -o OUT.cmf\n"
    "       cmf skill list MODEL.cmf\n"
    "       cmf skill export MODEL.cmf --id ID [--base BASE.cmf] [--name NAME] -o SKILL.cmf\n"
    "       cmf skill apply BASE.cmf SKILL.cmf -o OUT.cmf [--force]\n"
    "\n"
    "add     bakes an in-file skill: for the chosen layers and tensor families (ffn: mlp gate/up/down; attn:\n"
    "        self_attn q/k/v/o and their biases; default all), the DONOR's tensor (a CMF file, a Hugging Face\n"
    "        directory or a .safetensors file; same shapes required) is encoded in the backbone tensor's dtype\n"
    "        (or --skill-quant for 2-D tensors: f32, f16, bf16, q8, q8_2f, q4, q4t, q4tp, ...) and stored as\n"
    "        skill.ID.<name> when it differs from the backbone. A registry record {id, name, layers, quality:\n"
    "        null} goes to header.skills; adding an existing ID replaces it. The file is rewritten completely\n"
    "        (OUT may be MODEL; written to OUT.tmp and renamed).\n"
    "list    prints each skill: tensors, MB, layers, routable (has a selection subspace), quality.\n"
    "export  writes a standalone skill file (feature SKILL_FILE): skill ID's tensors under their base names,\n"
    "        bound to the base by base_dir_hash. The base is --base, or MODEL itself. When MODEL has no skill ID\n"
    "        and --base is given, MODEL is cut as a specialist against the base (tensors that differ).\n"
    "apply   lays a skill file over the base it was cut against (refused for another base unless --force);\n"
    "        skill tensors the base lacks are dropped with a warning. The output is an ordinary model.\n";

static void on_warn(void *ctx, const char *msg) { cli_warn((const char *)ctx, "%s", msg); }

static int skill_add(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "skill add", argc, argv);
    const char *model = NULL, *from = NULL, *out = NULL, *v;
    cmf_skill_add_opts o = {.skill_quant = -1, .warn = on_warn, .warn_ctx = "skill add"};
    int rc;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (cli_is(&a, "--from", NULL)) {
            if ((rc = cli_value(&a, &from))) return rc;
        } else if (cli_is(&a, "--id", NULL)) {
            if ((rc = cli_value(&a, &o.id))) return rc;
        } else if (cli_is(&a, "--name", NULL)) {
            if ((rc = cli_value(&a, &o.name))) return rc;
        } else if (cli_is(&a, "--layers", NULL)) {
            if ((rc = cli_value(&a, &o.layers))) return rc;
        } else if (cli_is(&a, "--output", "-o")) {
            if ((rc = cli_value(&a, &out))) return rc;
        } else if (cli_is(&a, "--tensors", NULL)) {
            if ((rc = cli_value(&a, &v))) return rc;
            o.families = !strcmp(v, "ffn")    ? CMF_SKILL_FFN
                         : !strcmp(v, "attn") ? CMF_SKILL_ATTN
                         : !strcmp(v, "all")  ? CMF_SKILL_ALL
                                              : -1;
            if (o.families < 0)
                return cli_usage_error("skill add", "invalid value '%s' for --tensors (expected ffn, attn or all)", v);
        } else if (cli_is(&a, "--skill-quant", NULL)) {
            if ((rc = cli_value(&a, &v))) return rc;
            o.skill_quant = cmf_dtype_from_name(v);
            if (o.skill_quant < 0)
                return cli_usage_error("skill add", "invalid value '%s' for --skill-quant (not a dtype name)", v);
        } else if (!cli_is_flag(&a) && !model) {
            model = a.arg;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!model) return cli_usage_error("skill add", "missing MODEL.cmf (see cmf skill --help)");
    if (!from) return cli_usage_error("skill add", "missing --from DONOR");
    if (!o.id) return cli_usage_error("skill add", "missing --id ID");
    if (!out) return cli_usage_error("skill add", "missing -o OUT.cmf (it may be MODEL.cmf itself)");
    if (!cmf_skill_id_valid(o.id))
        return cli_usage_error("skill add", "invalid value '%s' for --id (expected 1-63 characters of [A-Za-z0-9_-], "
                                            "not 'none')", o.id);
    cmf_skill_add_report rep;
    cmf_status st = cmf_skill_add(model, from, out, &o, &rep);
    if (st) return cli_write_error("skill add", out, st);
    printf("skill '%s': %zu tensor(s) stored (%.2f MB), %zu equal to the backbone, %zu skipped%s -> %s\n", o.id,
           rep.n_stored, (double)rep.bytes / 1e6, rep.n_unchanged, rep.n_skipped,
           rep.n_replaced ? " (replaced the earlier bake)" : "", out);
    return CLI_OK;
}

static void print_json(const cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    fputs(s ? s : "?", stdout);
    free(s);
}

static int skill_list(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "skill list", argc, argv);
    const char *model = NULL;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (!cli_is_flag(&a) && !model) {
            model = a.arg;
            continue;
        }
        return cli_unknown(&a);
    }
    if (!model) return cli_usage_error("skill list", "missing MODEL.cmf (see cmf skill --help)");
    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(model, &f);
    if (st) return cli_lib_error("skill list", st);
    cmf_skill_info *list = NULL;
    size_t n = 0;
    if ((st = cmf_skills_list(f, &list, &n))) {
        cmf_file_close(f);
        return cli_lib_error("skill list", st);
    }
    if (n == 0)
        printf("no skills\n");
    else
        printf("%zu skill(s):\n", n);
    for (size_t i = 0; i < n; i++) {
        const cmf_skill_info *s = &list[i];
        printf("  %-12s %-20s %zu tensor(s), %.2f MB, layers [", s->id, s->name ? s->name : "-", s->n_tensors,
               (double)s->bytes / 1e6);
        for (size_t k = 0; k < s->n_layers; k++) printf(k ? ", %" PRIu32 : "%" PRIu32, s->layers[k]);
        printf("], %s", s->routable ? "routable" : "not routable (no selection)");
        if (!s->registered) printf(", no registry record");
        if (s->input_mask_task) printf(", task mask %s", s->input_mask_task);
        if (s->base_dir_hash) printf(", standalone skill for base %s", s->base_dir_hash);
        printf("\n      quality: ");
        if (s->quality)
            print_json(s->quality);
        else
            printf("not measured");
        printf("\n");
    }
    cmf_skills_free(list, n);
    cmf_file_close(f);
    return CLI_OK;
}

static int skill_export(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "skill export", argc, argv);
    const char *model = NULL, *id = NULL, *base = NULL, *name = NULL, *out = NULL;
    int rc;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (cli_is(&a, "--id", NULL)) {
            if ((rc = cli_value(&a, &id))) return rc;
        } else if (cli_is(&a, "--base", NULL)) {
            if ((rc = cli_value(&a, &base))) return rc;
        } else if (cli_is(&a, "--name", NULL)) {
            if ((rc = cli_value(&a, &name))) return rc;
        } else if (cli_is(&a, "--output", "-o")) {
            if ((rc = cli_value(&a, &out))) return rc;
        } else if (!cli_is_flag(&a) && !model) {
            model = a.arg;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!model) return cli_usage_error("skill export", "missing MODEL.cmf (see cmf skill --help)");
    if (!id) return cli_usage_error("skill export", "missing --id ID");
    if (!out) return cli_usage_error("skill export", "missing -o SKILL.cmf");
    if (cmf_same_file(model, out) || (base && cmf_same_file(base, out)))
        return cli_fail("skill export", "-o %s is an input; write the skill file under another name", out);
    size_t n = 0;
    cmf_status st = cmf_skill_export(model, id, base, name, out, on_warn, "skill export", &n);
    if (st) return cli_write_error("skill export", out, st);
    printf("skill '%s': %zu tensor(s) -> %s\n", id, n, out);
    return CLI_OK;
}

static int skill_apply(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "skill apply", argc, argv);
    const char *base = NULL, *skill = NULL, *out = NULL;
    int force = 0, rc;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return CLI_OK;
        }
        if (cli_is(&a, "--output", "-o")) {
            if ((rc = cli_value(&a, &out))) return rc;
        } else if (cli_is(&a, "--force", NULL)) {
            force = 1;
        } else if (!cli_is_flag(&a) && !base) {
            base = a.arg;
        } else if (!cli_is_flag(&a) && !skill) {
            skill = a.arg;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!base || !skill) return cli_usage_error("skill apply", "missing BASE.cmf SKILL.cmf (see cmf skill --help)");
    if (!out) return cli_usage_error("skill apply", "missing -o OUT.cmf");
    if (cmf_same_file(skill, out))
        return cli_fail("skill apply", "-o %s is the skill file; write the model under another name (or over BASE)", out);
    cmf_skill_apply_report rep;
    cmf_status st = cmf_skill_apply(base, skill, out, force, on_warn, "skill apply", &rep);
    if (st) return cli_write_error("skill apply", out, st);
    printf("applied: %zu tensor(s) replaced, %zu dropped%s -> %s\n", rep.n_replaced, rep.n_dropped,
           rep.forced ? " (base mismatch forced)" : "", out);
    return CLI_OK;
}

int cmd_skill(int argc, char **argv) {
    if (argc < 2)
        return cli_usage_error("skill", "missing subcommand: add, list, export or apply (see cmf skill --help)");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        fputs(USAGE, stdout);
        return CLI_OK;
    }
    if (!strcmp(sub, "add")) return skill_add(argc - 1, argv + 1);
    if (!strcmp(sub, "list")) return skill_list(argc - 1, argv + 1);
    if (!strcmp(sub, "export")) return skill_export(argc - 1, argv + 1);
    if (!strcmp(sub, "apply")) return skill_apply(argc - 1, argv + 1);
    return cli_usage_error("skill", "unknown subcommand '%s' (add, list, export, apply)", sub);
}
