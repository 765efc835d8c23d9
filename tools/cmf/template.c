/* template.c — `cmf template`: renders a conversation with a chat template and prints the prompt text exactly (no
 * newline added), as transformers' apply_chat_template(tokenize=False) does.
 *
 * The template comes from a model file (cmf_chat_render, include/cmf.h: header.tokenizer_config.chat_template,
 * ChatML when the file has none; bos_token / eos_token from the file's ids) or from a Hugging Face
 * tokenizer_config.json (cmf_chat_render_src, src/template/template.h): its "chat_template" (a string, or the list
 * form [{"name", "template"}, ...] from which "tool_use" is taken when --tools is given and the list has it, else
 * "default", as transformers does: cmf_chat_template_select; ChatML when absent) and its "bos_token" /
 * "eos_token" strings (or AddedToken objects {"content": ...}; undefined when null or absent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "template/template.h"

static const char *USAGE =
    "usage: cmf template (MODEL.cmf | tokenizer_config.json) --messages MSGS.json [options]\n"
    "\n"
    "Prints the prompt the chat template renders for a conversation, exactly (no newline added).\n"
    "\n"
    "  --messages F               a JSON array of messages {\"role\", \"content\", ...} (OpenAI form)\n"
    "  --tools F                  a JSON array of tools (the template's `tools`; default none)\n"
    "  --add-generation-prompt    end with the opening of an assistant turn\n"
    "  --kwargs JSON              a JSON object of extra template variables, e.g. '{\"enable_thinking\": false}';\n"
    "                             they override every other variable (bos_token too)\n"
    "  --chat-template-file F     use the Jinja template in F instead of the file's\n"
    "\n"
    "A file whose first non-blank byte (after an optional UTF-8 BOM) is '{' is read as a tokenizer_config.json: its\n"
    "chat_template (a string, or a list of named templates: \"tool_use\" is used when --tools is given and the\n"
    "list has one, else \"default\", as in transformers), bos_token and eos_token. A model file holds one template\n"
    "(the converter keeps the \"default\" one). Without a template the conversation is rendered as ChatML. A\n"
    "template error (syntax, raise_exception, ...) exits 1 with its message.\n";

typedef struct tpl_opts {
    const char *source, *messages, *tools, *kwargs, *template_file;
    int add_generation_prompt;
} tpl_opts;

static int parse(int argc, char **argv, tpl_opts *o) {
    cli_args a;
    cli_args_init(&a, "template", argc, argv);
    memset(o, 0, sizeof *o);
    int rc = 0;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(USAGE, stdout);
            return -1;
        } else if (cli_is(&a, "--messages", NULL)) {
            rc = cli_value(&a, &o->messages);
        } else if (cli_is(&a, "--tools", NULL)) {
            rc = cli_value(&a, &o->tools);
        } else if (cli_is(&a, "--kwargs", NULL)) {
            rc = cli_value(&a, &o->kwargs);
        } else if (cli_is(&a, "--chat-template-file", NULL)) {
            rc = cli_value(&a, &o->template_file);
        } else if (cli_is(&a, "--add-generation-prompt", NULL)) {
            o->add_generation_prompt = 1;
        } else if (!cli_is_flag(&a) && !o->source) {
            o->source = a.arg;
        } else {
            return cli_unknown(&a);
        }
        if (rc) return rc;
    }
    if (!o->source)
        return cli_usage_error("template", "missing MODEL.cmf or tokenizer_config.json (see cmf template --help)");
    if (!o->messages) return cli_usage_error("template", "missing --messages MSGS.json");
    if (o->kwargs) { /* a usage error: the value is on the command line */
        cJSON *k = cJSON_Parse(o->kwargs);
        int ok = cJSON_IsObject(k);
        cJSON_Delete(k);
        if (!ok) return cli_usage_error("template", "invalid value '%.60s' for --kwargs (expected a JSON object)", o->kwargs);
    }
    return 0;
}

/* Reads a JSON file that must be an array (for --messages / --tools); *text malloc'd. Prints errors. */
static int read_json_array(const char *flag, const char *path, char **text) {
    size_t len;
    int rc = cli_read_text("template", path, text, &len);
    if (rc) return rc;
    cJSON *j = cJSON_ParseWithLength(*text, len);
    if (!j) {
        size_t at = (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - *text : 0);
        rc = at <= len ? cli_fail("template", "%s %s: malformed JSON near byte %zu", flag, path, at)
                       : cli_fail("template", "%s %s: malformed JSON", flag, path);
    } else if (!cJSON_IsArray(j)) {
        rc = cli_fail("template", "%s %s: not a JSON array", flag, path);
    }
    cJSON_Delete(j);
    if (rc) {
        free(*text);
        *text = NULL;
    }
    return rc;
}

/* A token string of tokenizer_config.json: "..." or {"content": "..."}; NULL when null/absent. *err set when the
 * field has another type. */
static const char *token_field(const cJSON *cfg, const char *name, int *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cfg, name);
    if (!f || cJSON_IsNull(f)) return NULL;
    if (cJSON_IsString(f)) return f->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(f, "content");
    if (cJSON_IsObject(f) && cJSON_IsString(c)) return c->valuestring;
    *err = 1;
    return NULL;
}

/* Renders with a tokenizer_config.json (`src_override`: the --chat-template-file text, or NULL). */
static int render_config(const tpl_opts *o, const char *src_override, const cmf_chat_params *p, char **out,
                         size_t *out_len) {
    char *text = NULL;
    size_t len;
    int rc = cli_read_text("template", o->source, &text, &len);
    if (rc) return rc;
    size_t bom = len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0; /* a UTF-8 BOM */
    cJSON *cfg = cJSON_ParseWithLength(text + bom, len - bom);
    free(text);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return cli_fail("template", "%s: not a JSON object (a tokenizer_config.json)", o->source);
    }
    const char *src = src_override;
    cmf_status st = CMF_OK;
    if (!src) st = cmf_chat_template_select(cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), o->tools != NULL,
                                            &src);
    char msg[1024];
    if (st != CMF_OK) rc = cli_fail("template", "%s: %s", o->source, cli_lib_message("template", st, msg, sizeof msg));
    int bad_bos = 0, bad_eos = 0;
    const char *bos = token_field(cfg, "bos_token", &bad_bos), *eos = token_field(cfg, "eos_token", &bad_eos);
    if (!rc && (bad_bos || bad_eos))
        rc = cli_fail("template", "%s: %s: neither a string nor {\"content\": string}", o->source,
                      bad_bos ? "bos_token" : "eos_token");
    if (!rc) {
        st = cmf_chat_render_src(src, src ? strlen(src) : 0, bos, eos, p, out, out_len);
        if (st != CMF_OK) rc = cli_lib_error("template", st);
    }
    cJSON_Delete(cfg);
    return rc;
}

int cmd_template(int argc, char **argv) {
    tpl_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    char *msgs = NULL, *tools = NULL, *tpl = NULL, *out = NULL;
    size_t out_len = 0, tpl_len = 0;
    cmf_model *m = NULL;
    if ((rc = read_json_array("--messages", o.messages, &msgs))) goto done;
    if (o.tools && (rc = read_json_array("--tools", o.tools, &tools))) goto done;
    if (o.template_file && (rc = cli_read_template("template", o.template_file, &tpl, &tpl_len))) goto done;
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = msgs;
    p.tools_json = tools;
    p.extra_json = o.kwargs;
    p.template_src = tpl;
    p.add_generation_prompt = o.add_generation_prompt;
    FILE *f = fopen(o.source, "rb");
    if (!f) {
        rc = cli_fail("template", "%s: cannot open", o.source);
        goto done;
    }
    int c = fgetc(f);
    if (c == 0xEF && fgetc(f) == 0xBB && fgetc(f) == 0xBF) c = fgetc(f); /* skip a UTF-8 BOM */
    while (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = fgetc(f);
    fclose(f);
    if (c == '{') {
        rc = render_config(&o, tpl, &p, &out, &out_len);
    } else {
        cmf_model_params mp = {.n_threads = 1};
        cmf_status st = cmf_model_load(o.source, &mp, &m);
        if (st == CMF_OK) st = cmf_chat_render(m, &p, &out, &out_len);
        if (st != CMF_OK) rc = cli_lib_error("template", st);
    }
    if (!rc && (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0))
        rc = cli_fail("template", "error writing stdout");
done:
    free(out);
    cmf_model_free(m);
    free(tpl);
    free(tools);
    free(msgs);
    return rc;
}
