/* chat.c — the chat-template half of the public API (include/cmf.h "Chat templates"): builds the variables a
 * Hugging Face chat template sees and renders it with the Jinja engine of this folder.
 *
 * What transformers does (PreTrainedTokenizerBase.apply_chat_template -> render_jinja_template, transformers 4.4x
 * and 5.x): render(messages=chat, tools=tool_schemas or None, documents=None, add_generation_prompt=...,
 * **special_tokens_map, **kwargs) — the messages exactly as given, the tokenizer's special-token strings
 * (bos_token, eos_token, ... only those that are set), and the caller's keyword arguments last (enable_thinking is
 * one of those). transformers 5.17's special_tokens_map is bos/eos/unk/sep/pad/cls/mask where set plus the config's
 * extra_special_tokens (gemma3: boi_token, eoi_token, image_token); no additional_special_tokens (checked on the
 * device: tests/template/data/transformers_check/). We pass bos_token and eos_token, the token strings the file
 * records by id (CMF_FORMAT.md §1.8); it has no record of the others, which the real templates do not use.
 *
 * Content given as a list of parts is where runtimes differ: transformers passes the list through, so Qwen3's
 * template fails on `'\n' + message.content` and Llama 3's prints the list's repr; vLLM decides per template
 * whether it loops over content (then lists stay) or expects strings (then text parts are joined with "\n").
 * CMF_CHAT_CONTENT_AUTO does vLLM's detection (template.h: cmf_template_loops_over_content). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "template/template.h"
#include "util/error.h"
#include "util/jsontext.h"

/* ChatML (the format of transformers' former default_chat_template), the fallback of CMF_FORMAT.md §1.8. */
static const char CHATML[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const char *cmf_chat_template_chatml(void) { return CHATML; }

cmf_chat_params cmf_chat_default_params(void) {
    cmf_chat_params p;
    memset(&p, 0, sizeof p);
    p.add_generation_prompt = 1;
    p.enable_thinking = -1;
    p.content = CMF_CHAT_CONTENT_AUTO;
    return p;
}

const char *cmf_model_chat_template(const cmf_model *m) {
    if (!m || !m->file) return NULL;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m->file->header, "tokenizer_config");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    return cJSON_IsString(t) && t->valuestring ? t->valuestring : NULL;
}

cmf_status cmf_chat_template_select(const cJSON *ct, int has_tools, const char **src) {
    if (!src) return cmf_err(CMF_E_ARG, "chat_template: NULL argument");
    *src = NULL;
    if (!ct || cJSON_IsNull(ct)) return CMF_OK;
    if (cJSON_IsString(ct)) {
        *src = ct->valuestring;
        return CMF_OK;
    }
    if (!cJSON_IsArray(ct))
        return cmf_err(CMF_E_FORMAT, "chat_template: neither a string nor a list of named templates");
    const char *dflt = NULL, *tool = NULL;
    char names[256] = "";
    size_t nl = 0;
    int i = 0;
    for (const cJSON *e = ct->child; e; e = e->next, i++) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *tp = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsObject(e) || !cJSON_IsString(nm) || !cJSON_IsString(tp))
            return cmf_err(CMF_E_FORMAT, "chat_template[%d]: not a {\"name\": string, \"template\": string} object", i);
        if (!strcmp(nm->valuestring, "default")) dflt = tp->valuestring;
        if (!strcmp(nm->valuestring, "tool_use")) tool = tp->valuestring;
        if (nl < sizeof names - 1) {
            int w = snprintf(names + nl, sizeof names - nl, "%s\"%s\"", nl ? ", " : "", nm->valuestring);
            nl = w < 0 ? sizeof names - 1 : nl + (size_t)w;
            if (nl > sizeof names - 1) nl = sizeof names - 1;
        }
    }
    *src = has_tools && tool ? tool : dflt;
    if (!*src)
        return cmf_err(CMF_E_FORMAT, "chat_template: the list of named templates has no \"default\"%s (it has: %s)",
                       has_tools ? " nor \"tool_use\"" : "", i ? names : "none");
    return CMF_OK;
}

/* Parses `json` (named `what` in errors) and checks its top-level type (1 array, 2 object). */
static cmf_status parse_json(const char *json, const char *what, int want, cJSON **out) {
    *out = NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(json, &end, 1);
    if (!j) {
        size_t off = end ? (size_t)(end - json) : 0;
        return cmf_err(CMF_E_FORMAT, "chat: %s: malformed JSON near byte %zu", what, off);
    }
    if ((want == 1 && !cJSON_IsArray(j)) || (want == 2 && !cJSON_IsObject(j))) {
        cJSON_Delete(j);
        return cmf_err(CMF_E_FORMAT, "chat: %s must be a JSON %s", what, want == 1 ? "array" : "object");
    }
    *out = j;
    return CMF_OK;
}

/* Joins the text parts of message `i`'s content list with "\n" (vLLM's string content format) and replaces the
 * list with that string. Parts must be {"type":"text","text":string} (or bare strings). */
static cmf_status join_parts(cJSON *msg, cJSON *content, int i) {
    size_t len = 0;
    int k = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const char *text = NULL;
        if (cJSON_IsString(part)) {
            text = part->valuestring;
        } else {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsObject(part) || !cJSON_IsString(type))
                return cmf_err(CMF_E_FORMAT, "chat: messages[%d].content[%d] is not a {\"type\": ...} object", i, k);
            if (strcmp(type->valuestring, "text") != 0)
                return cmf_err(CMF_E_UNSUPPORTED,
                               "chat: messages[%d].content[%d]: part type '%s' is not supported (text only)", i, k,
                               type->valuestring);
            if (!cJSON_IsString(tx))
                return cmf_err(CMF_E_FORMAT, "chat: messages[%d].content[%d]: \"text\" must be a string", i, k);
            text = tx->valuestring;
        }
        len += strlen(text) + 1;
        k++;
    }
    char *s = malloc(len + 1), *w = s;
    if (!s) return cmf_err(CMF_E_NOMEM, "chat: out of memory");
    k = 0;
    cJSON_ArrayForEach(part, content) {
        const char *text = cJSON_IsString(part) ? part->valuestring
                                                : cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        if (k++) *w++ = '\n';
        size_t n = strlen(text);
        memcpy(w, text, n);
        w += n;
    }
    *w = '\0';
    cJSON *str = cJSON_CreateString(s);
    free(s);
    if (!str || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", str)) {
        cJSON_Delete(str);
        return cmf_err(CMF_E_NOMEM, "chat: out of memory");
    }
    return CMF_OK;
}

/* Checks every message (an object with a string role) and joins part lists when `join` is set. */
static cmf_status check_messages(cJSON *msgs, int join) {
    int i = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!cJSON_IsObject(m)) return cmf_err(CMF_E_FORMAT, "chat: messages[%d] is not a JSON object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role))
            return cmf_err(CMF_E_FORMAT, "chat: messages[%d] has no string \"role\"", i);
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (join && cJSON_IsArray(content)) {
            cmf_status st = join_parts(m, content, i);
            if (st) return st;
        }
        i++;
    }
    return CMF_OK;
}

/* Adds (or replaces) ctx[key] = item; item is consumed. */
static int put(cJSON *ctx, const char *key, cJSON *item) {
    if (!item) return -1;
    if (cJSON_GetObjectItemCaseSensitive(ctx, key)) return cJSON_ReplaceItemInObjectCaseSensitive(ctx, key, item) ? 0 : -1;
    return cJSON_AddItemToObject(ctx, key, item) ? 0 : -1;
}

/* The template's variables (transformers' render() call, see the top of this file). */
static cmf_status build_context(const cmf_template *t, const char *bos, const char *eos, const cmf_chat_params *p,
                                cJSON **out) {
    *out = NULL;
    cJSON *msgs = NULL, *tools = NULL, *extra = NULL, *ctx = NULL;
    cmf_status st = parse_json(p->messages_json, "messages", 1, &msgs);
    if (!st && p->tools_json) st = parse_json(p->tools_json, "tools", 1, &tools);
    if (!st && p->extra_json) st = parse_json(p->extra_json, "extra variables", 2, &extra);
    if (!st) {
        int join = p->content == CMF_CHAT_CONTENT_STRING ||
                   (p->content == CMF_CHAT_CONTENT_AUTO && !cmf_template_loops_over_content(t));
        st = check_messages(msgs, join);
    }
    if (!st && !(ctx = cJSON_CreateObject())) st = cmf_err(CMF_E_NOMEM, "chat: out of memory");
    if (!st) {
        int bad = put(ctx, "messages", msgs);
        msgs = NULL;
        bad |= put(ctx, "tools", tools ? tools : cJSON_CreateNull());
        tools = NULL;
        bad |= put(ctx, "documents", cJSON_CreateNull());
        bad |= put(ctx, "add_generation_prompt", cJSON_CreateBool(p->add_generation_prompt != 0));
        if (p->enable_thinking >= 0) bad |= put(ctx, "enable_thinking", cJSON_CreateBool(p->enable_thinking != 0));
        if (bos) bad |= put(ctx, "bos_token", cJSON_CreateString(bos));
        if (eos) bad |= put(ctx, "eos_token", cJSON_CreateString(eos));
        for (cJSON *e = extra ? extra->child : NULL; e && !bad; e = e->next)
            bad |= put(ctx, e->string, cJSON_Duplicate(e, 1));
        if (bad) st = cmf_err(CMF_E_NOMEM, "chat: out of memory");
    }
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    cJSON_Delete(extra);
    if (st) {
        cJSON_Delete(ctx);
        return st;
    }
    *out = ctx;
    return CMF_OK;
}

cmf_status cmf_chat_render_src(const char *src, size_t len, const char *bos_token, const char *eos_token,
                               const cmf_chat_params *p, char **out, size_t *out_len) {
    if (!out) return cmf_err(CMF_E_ARG, "chat: NULL output");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!p || !p->messages_json) return cmf_err(CMF_E_ARG, "chat: no messages");
    if (p->content < CMF_CHAT_CONTENT_AUTO || p->content > CMF_CHAT_CONTENT_PARTS)
        return cmf_err(CMF_E_ARG, "chat: content mode %d is not a cmf_chat_content value", (int)p->content);
    if (p->enable_thinking < -1 || p->enable_thinking > 1)
        return cmf_err(CMF_E_ARG, "chat: enable_thinking %d is not -1, 0 or 1", p->enable_thinking);
    const char *texts[3] = {p->messages_json, p->tools_json, p->extra_json};
    static const char *const names[3] = {"messages", "tools", "extra variables"};
    for (int i = 0; i < 3; i++) {
        size_t n = texts[i] ? strlen(texts[i]) : 0, at = cmf_json_nul_escape_at(texts[i], n);
        if (at < n)
            return cmf_err(CMF_E_UNSUPPORTED, "chat: the %s JSON holds a \\u0000 escape (U+0000) at byte %zu: a "
                           "string with U+0000 cannot be passed to the template", names[i], at);
    }
    if (!src) {
        src = CHATML;
        len = sizeof CHATML - 1;
    }
    cmf_template *t = NULL;
    cmf_status st = cmf_template_parse(src, len, &t);
    if (st) return cmf_err_prefix(st, "chat template: ");
    cJSON *ctx = NULL;
    st = build_context(t, bos_token, eos_token, p, &ctx);
    if (!st) {
        st = cmf_template_render(t, ctx, NULL, out, out_len);
        if (st) cmf_err_prefix(st, "chat template: ");
    }
    cJSON_Delete(ctx);
    cmf_template_free(t);
    return st;
}

/* The text of special token `id` (HF's special_tokens_map holds strings; the file records ids), or NULL. */
static char *token_text(const cmf_model *m, int32_t id) {
    const cmf_tokenizer *tok = m ? cmf_model_tokenizer(m) : NULL;
    if (!tok || id < 0 || id >= cmf_tokenizer_vocab_size(tok)) return NULL;
    char *text = NULL;
    if (cmf_detokenize(tok, &id, 1, 0, &text) != CMF_OK) {
        cmf_err_clear();
        return NULL;
    }
    return text;
}

cmf_status cmf_chat_render(const cmf_model *m, const cmf_chat_params *p, char **out, size_t *out_len) {
    if (!out) return cmf_err(CMF_E_ARG, "chat: NULL output");
    *out = NULL;
    const char *src = p && p->template_src ? p->template_src : cmf_model_chat_template(m);
    char *bos = NULL, *eos = NULL;
    if (m) {
        int n_eos = 0;
        const int32_t *eos_ids = cmf_model_eos_ids(m, &n_eos);
        bos = token_text(m, cmf_model_bos_id(m));
        if (n_eos > 0) eos = token_text(m, eos_ids[0]);
    }
    cmf_status st = cmf_chat_render_src(src, src ? strlen(src) : 0, bos, eos, p, out, out_len);
    free(bos);
    free(eos);
    return st;
}

cmf_status cmf_chat_tokenize(const cmf_model *m, const char *text, size_t len, int32_t **ids, size_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!m || !ids || !n) return cmf_err(CMF_E_ARG, "chat tokenize: NULL argument");
    const cmf_tokenizer *tok = cmf_model_tokenizer(m);
    if (!tok) {
        const char *why = cmf_model_tokenizer_error(m);
        return cmf_err(CMF_E_FORMAT, "chat tokenize: %s",
                       why && *why ? why : "the model has no tokenizer (no vocab section)");
    }
    /* exactly one BOS: the post-processor's special tokens only when the template did not write the BOS text
     * itself; a file without a BOS id (or whose BOS id has no token) gets none: the template writes them all */
    int32_t bos = cmf_model_bos_id(m);
    int add_special = 0;
    if (bos >= 0 && bos < cmf_tokenizer_vocab_size(tok)) {
        char *bos_text = NULL;
        cmf_status st = cmf_detokenize(tok, &bos, 1, 0, &bos_text);
        if (st != CMF_OK) return st;
        size_t bl = strlen(bos_text);
        add_special = bl > 0 && !(len >= bl && text && memcmp(text, bos_text, bl) == 0);
        free(bos_text);
    }
    return cmf_tokenize(tok, text, len, add_special, ids, n);
}

int cmf_chat_ends_in_think(const char *text) {
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
    return n >= 7 && !memcmp(text + n - 7, "<think>", 7);
}
