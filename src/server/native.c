/* native.c — llama-server's own routes, for clients written against llama.cpp's server rather than OpenAI's API.
 * Source: llama.cpp tools/server (README.md "POST /completion", "GET /props", "POST /tokenize"; server-task.cpp
 * server_task_result_cmpl_final / _partial ::to_json_non_oaicompat; server-context.cpp get_res_props and the
 * /tokenize handler; server-common.cpp server_slot_stats::to_json), checked side by side with its llama-server on
 * the stories260K GGUF (field names and JSON types). Only fields cmf can fill truthfully are sent:
 *   POST /completion  {"index": 0, "content", "tokens": [] (llama-server's value without return_tokens, which cmf
 *                     refuses), "id_slot", "stop": true, "model", "tokens_predicted", "tokens_evaluated",
 *                     "generation_settings" (the request's settings, see gen_settings), "has_new_line",
 *                     "truncated" (server-context.cpp process_token: the context was full when the last token was
 *                     sampled, tokens in the cache + 1 >= n_ctx; cmf refuses a prompt that does not fit instead of
 *                     cutting it, and never shifts the context), "stop_type" ("eos", "word", "limit"),
 *                     "stopping_word", "tokens_cached",
 *                     "timings"}; not sent: "prompt" (llama-server's detokenized prompt), "completion_probabilities"
 *                     (n_probs is refused). Streamed: one event per piece {"index", "content", "stop": false,
 *                     "id_slot", "tokens_predicted", "tokens_evaluated"} (without llama-server's per-token "tokens":
 *                     a piece held back while it could start a stop string is not one token), then the final object
 *                     above with "content": "" and no "data: [DONE]", as llama-server.
 *   GET /props        {"default_generation_settings": {"params", "n_ctx"}, "total_slots", "model_alias",
 *                     "model_path" (when known), "chat_template" (the template requests are rendered with),
 *                     "bos_token" / "eos_token" (when the file has them), "build_info"}.
 *   /tokenize pieces  [{"id", "piece"}]: the piece as a string when its bytes are valid UTF-8, else an array of the
 *                     byte values, as llama-server (see srv_token_pieces). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "server/internal.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

cmf_sampler_params srv_sampling_defaults(int native) {
    cmf_sampler_params sp = cmf_sampler_default_params();
    sp.temperature = native ? 0.8f : 1.0f;
    sp.top_p = native ? 0.95f : 1.0f;
    sp.top_k = native ? 40 : 0;
    sp.min_p = native ? 0.05f : 0.0f;
    sp.penalty_last_n = 0; /* penalties are off (repeat_penalty 1, presence / frequency 0) */
    return sp;
}

/* llama-server's generation_settings / default_generation_settings.params (task_params::to_json), the fields that
 * describe cmf: the sampler's values, the samplers cmf lacks at their disabled values (which are all it accepts),
 * the sampler order cmf applies, n_predict and max_tokens (the most tokens this request may generate: max_tokens /
 * n_predict, or the room left in the context; -1 in /props: until the context is full), the stop strings (not for
 * /props: n_stops < 0, as llama-server leaves them out there), stream and ignore_eos. NULL when out of memory. */
static cJSON *gen_settings(const cmf_sampler_params *sp, int n_predict, char **stops, int n_stops, int stream,
                           int ignore_eos) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "temperature", sp->temperature);
    cJSON_AddNumberToObject(o, "top_k", sp->top_k);
    cJSON_AddNumberToObject(o, "top_p", sp->top_p);
    cJSON_AddNumberToObject(o, "min_p", sp->min_p);
    cJSON_AddNumberToObject(o, "repeat_last_n", sp->penalty_last_n);
    cJSON_AddNumberToObject(o, "repeat_penalty", sp->repeat_penalty);
    cJSON_AddNumberToObject(o, "presence_penalty", sp->presence_penalty);
    cJSON_AddNumberToObject(o, "frequency_penalty", sp->frequency_penalty);
    static const char *const off_names[] = {"typical_p", "mirostat", "dynatemp_range", "dry_multiplier",
                                            "xtc_probability", "n_probs", "min_keep", "top_n_sigma"};
    static const double off_values[] = {1, 0, 0, 0, 0, 0, 0, -1};
    for (size_t i = 0; i < sizeof off_values / sizeof off_values[0]; i++)
        cJSON_AddNumberToObject(o, off_names[i], off_values[i]);
    cJSON_AddNumberToObject(o, "max_tokens", n_predict);
    cJSON_AddNumberToObject(o, "n_predict", n_predict);
    cJSON *st = n_stops >= 0 ? cJSON_AddArrayToObject(o, "stop") : NULL;
    for (int i = 0; st && i < n_stops; i++) cJSON_AddItemToArray(st, cJSON_CreateString(stops[i]));
    cJSON_AddBoolToObject(o, "stream", stream);
    cJSON_AddBoolToObject(o, "ignore_eos", ignore_eos);
    static const char *const order[] = {"penalties", "temperature", "top_k", "top_p", "min_p"};
    cJSON *sm = cJSON_CreateStringArray(order, 5);
    if (sm) cJSON_AddItemToObject(o, "samplers", sm);
    return o;
}

/* server_slot_stats::to_json: prompt time from the slot taking the request to its first sampled token, generation
 * time from the first to the last sampled token over n_gen - 1 steps (the first token comes from the prompt's
 * logits), in milliseconds; rates 0 when the time is 0, as llama-server. */
static cJSON *timings(const srv_req *r) {
    cJSON *t = cJSON_CreateObject();
    if (!t) return NULL;
    const int prompt_n = r->n_prompt - r->n_cached, steps = r->n_gen > 1 ? r->n_gen - 1 : 0;
    const double p_ms = r->t_first > 0 ? 1e3 * (r->t_first - r->t_start) : 0;
    const double g_ms = r->t_first > 0 ? 1e3 * (r->t_last - r->t_first) : 0;
    cJSON_AddNumberToObject(t, "cache_n", r->n_cached);
    cJSON_AddNumberToObject(t, "prompt_n", prompt_n);
    cJSON_AddNumberToObject(t, "prompt_ms", p_ms);
    cJSON_AddNumberToObject(t, "prompt_per_token_ms", prompt_n > 0 ? p_ms / prompt_n : 0);
    cJSON_AddNumberToObject(t, "prompt_per_second", p_ms > 0 ? 1e3 * prompt_n / p_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", r->n_gen);
    cJSON_AddNumberToObject(t, "predicted_ms", g_ms);
    cJSON_AddNumberToObject(t, "predicted_per_token_ms", steps > 0 ? g_ms / steps : 0);
    cJSON_AddNumberToObject(t, "predicted_per_second", g_ms > 0 ? 1e3 * steps / g_ms : 0);
    return t;
}

/* The final object of a /completion request (content: the whole text, or "" for the stream's last event). */
static cJSON *final_json(const srv_req *r, const char *content) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    const char *reason = r->finish_reason ? r->finish_reason : "stop";
    const int word = r->stop_hit >= 0 && r->stop_hit < r->n_stops;
    cJSON_AddNumberToObject(j, "index", 0);
    cJSON_AddStringToObject(j, "content", content);
    cJSON_AddArrayToObject(j, "tokens");
    cJSON_AddNumberToObject(j, "id_slot", r->id_slot);
    cJSON_AddBoolToObject(j, "stop", 1);
    cJSON_AddStringToObject(j, "model", r->model_name);
    cJSON_AddNumberToObject(j, "tokens_predicted", r->n_gen);
    cJSON_AddNumberToObject(j, "tokens_evaluated", r->n_prompt);
    cJSON *gs = gen_settings(&r->sp, r->max_tokens, r->stops, r->n_stops, r->stream, r->ignore_eos);
    if (gs) cJSON_AddItemToObject(j, "generation_settings", gs);
    const char *text = r->content.p ? r->content.p : "";
    cJSON_AddBoolToObject(j, "has_new_line", strchr(text, '\n') != NULL);
    cJSON_AddBoolToObject(j, "truncated", r->truncated);
    /* llama-server's stop types: an end token (eos), a stop string (word), max tokens / the context / the time limit
     * (limit) */
    cJSON_AddStringToObject(j, "stop_type", word ? "word" : !strcmp(reason, "length") ? "limit" : "eos");
    cJSON_AddStringToObject(j, "stopping_word", word ? r->stops[r->stop_hit] : "");
    cJSON_AddNumberToObject(j, "tokens_cached", r->n_past);
    cJSON *t = timings(r);
    if (t) cJSON_AddItemToObject(j, "timings", t);
    return j;
}

srv_reply srv_native_reply(srv_req *r) {
    if (r->http_status) return srv_reply_err(r->http_status, NULL, "%s", r->error);
    cJSON *j = final_json(r, r->content.p ? r->content.p : "");
    srv_reply rep = {200, j ? cJSON_PrintUnformatted(j) : NULL};
    cJSON_Delete(j);
    if (!rep.body) rep = srv_reply_err(500, NULL, "out of memory");
    return rep;
}

int srv_native_sse_piece_to(srv_buf *out, srv_req *r, const char *text, size_t n) {
    char *t = strndup(text, n); /* cJSON strings end at a NUL, as every other route's */
    cJSON *j = t ? cJSON_CreateObject() : NULL;
    char *s = NULL;
    if (j) {
        cJSON_AddNumberToObject(j, "index", 0);
        cJSON_AddStringToObject(j, "content", t);
        cJSON_AddBoolToObject(j, "stop", 0);
        cJSON_AddNumberToObject(j, "id_slot", r->id_slot);
        cJSON_AddNumberToObject(j, "tokens_predicted", r->n_gen);
        cJSON_AddNumberToObject(j, "tokens_evaluated", r->n_prompt);
        s = cJSON_PrintUnformatted(j);
    }
    cJSON_Delete(j);
    free(t);
    const size_t len0 = out->len;
    int bad = !s || srv_buf_adds(out, "data: ") || srv_buf_adds(out, s) || srv_buf_adds(out, "\n\n");
    free(s);
    if (bad) { /* nothing half-written stays */
        out->len = len0;
        if (out->p) out->p[len0] = 0;
    }
    return bad ? -1 : 0;
}

int srv_native_sse_end(srv_req *r) {
    cJSON *j = NULL;
    if (r->http_status) {
        char *txt = srv_error_json(r->http_status, r->error, NULL);
        j = txt ? cJSON_Parse(txt) : NULL;
        free(txt);
    } else {
        j = final_json(r, "");
    }
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    int bad = !s || srv_buf_adds(&r->sse, "data: ") || srv_buf_adds(&r->sse, s) || srv_buf_adds(&r->sse, "\n\n");
    free(s);
    return bad ? -1 : 0;
}

/* llama.cpp's text of ids (tools/server/server-common.cpp tokens_to_str for /detokenize; the /completion pieces of
 * server-context.cpp, common_token_to_piece): the pieces of llama_vocab::token_to_piece with lstrip 0 joined, so the
 * first SentencePiece word keeps its leading space (" Once upon" for [403, 407]), where HF's decode (Metaspace
 * prepend_scheme, the Strip decoder) drops it. Decoding [anchor] + ids and cutting off the anchor's own text gives
 * that join: the first-token rule then applies to the anchor only. */
int32_t srv_piece_anchor(const cmf_tokenizer *tok) { return tok_anchor_id(tok); }

cmf_status srv_llama_detokenize(const cmf_server *s, const int32_t *ids, size_t n, int skip_special, char **text) {
    *text = NULL;
    if (s->anchor < 0 || n == 0) return cmf_detokenize(s->tok, ids, n, skip_special, text);
    int32_t *all = malloc((n + 1) * sizeof *all);
    char *pre = NULL, *full = NULL;
    size_t pre_n = 0, full_n = 0;
    if (!all) return cmf_err(CMF_E_NOMEM, "detokenize: out of memory");
    all[0] = s->anchor;
    memcpy(all + 1, ids, n * sizeof *ids);
    cmf_status st = cmf_detokenize_n(s->tok, all, 1, skip_special, &pre, &pre_n);
    if (st == CMF_OK) st = cmf_detokenize_n(s->tok, all, n + 1, skip_special, &full, &full_n);
    free(all);
    if (st == CMF_OK && full_n >= pre_n && memcmp(full, pre, pre_n) == 0) {
        memmove(full, full + pre_n, full_n - pre_n + 1); /* with the NUL */
        *text = full;
        full = NULL;
    }
    free(pre);
    free(full);
    if (st != CMF_OK) return st;
    return *text ? CMF_OK : cmf_detokenize(s->tok, ids, n, skip_special, text);
}

/* The text of token id with its special tokens shown ("<s>"), or NULL. Malloc'd. */
static char *token_text(const cmf_server *s, int32_t id) {
    char *text = NULL;
    if (id < 0 || id >= cmf_tokenizer_vocab_size(s->tok) || cmf_detokenize(s->tok, &id, 1, 0, &text) != CMF_OK)
        return NULL;
    return text;
}

srv_reply srv_api_props(cmf_server *s) {
    cJSON *j = cJSON_CreateObject(), *dg = cJSON_AddObjectToObject(j, "default_generation_settings");
    const cmf_sampler_params sp = srv_sampling_defaults(1);
    cJSON *gs = gen_settings(&sp, -1, NULL, -1, 0, 0);
    if (gs) cJSON_AddItemToObject(dg, "params", gs);
    cJSON_AddNumberToObject(dg, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(j, "total_slots", s->o.n_slots);
    cJSON_AddStringToObject(j, "model_alias", s->model_name);
    if (s->model_path) cJSON_AddStringToObject(j, "model_path", s->model_path);
    const char *tpl = s->chat_template ? s->chat_template : cmf_model_chat_template(s->m);
    cJSON_AddStringToObject(j, "chat_template", tpl ? tpl : cmf_chat_template_chatml());
    int n_eos = 0;
    const int32_t *eos = cmf_model_eos_ids(s->m, &n_eos);
    char *bos_t = token_text(s, cmf_model_bos_id(s->m)), *eos_t = n_eos > 0 ? token_text(s, eos[0]) : NULL;
    if (bos_t) cJSON_AddStringToObject(j, "bos_token", bos_t);
    if (eos_t) cJSON_AddStringToObject(j, "eos_token", eos_t);
    free(bos_t);
    free(eos_t);
    cJSON_AddStringToObject(j, "build_info", "cmf " CMF_VERSION_STRING);
    srv_reply rep = {200, cJSON_PrintUnformatted(j)};
    cJSON_Delete(j);
    if (!rep.body) rep = srv_reply_err(500, NULL, "out of memory");
    return rep;
}

/* The piece's JSON: a string when valid UTF-8 (without NUL), else the array of its byte values. */
static cJSON *piece_json(const char *p, size_t n) {
    if (cmf_utf8_invalid_at((const uint8_t *)p, n) == n && !memchr(p, 0, n)) {
        char *t = strndup(p, n);
        cJSON *v = t ? cJSON_CreateString(t) : NULL;
        free(t);
        return v;
    }
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)p[i]));
    return a;
}

/* The vocabulary string of a byte-fallback token "<0xHH>" as its byte (*b), or 0 when id is not one. */
static int byte_token(const tok_model *m, int32_t id, unsigned char *b) {
    size_t len = 0;
    const char *t = tok_model_token(m, id, &len);
    unsigned v = 0;
    if (!t || len != 6 || strncmp(t, "<0x", 3) != 0 || t[5] != '>' || sscanf(t + 3, "%2x", &v) != 1) return 0;
    *b = (unsigned char)v;
    return 1;
}

/* The bytes of a byte-level BPE token (GPT-2's bytes_to_unicode characters mapped back) into out[0..*n), or 0 when
 * a character of its vocabulary string is outside that alphabet. out holds at least the string's length. */
static int byte_level_bytes(const tok_model *m, int32_t id, char *out, size_t cap, size_t *n) {
    size_t len = 0, k = 0;
    const char *t = tok_model_token(m, id, &len);
    if (!t || len > cap) return 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        int l = tok_utf8_decode(t + i, len - i, &cp), b = l ? tok_unicode_to_byte(cp) : -1;
        if (b < 0) return 0;
        out[k++] = (char)b;
        i += (size_t)l;
    }
    *n = k;
    return 1;
}

/* llama-server's with_pieces (common_token_to_piece of each id: the token's own bytes, a SentencePiece word's
 * leading space included). Here: the text each id adds when the ids are decoded in order with a streaming
 * detokenizer (special tokens shown) primed with ids[0], so the first piece is decoded as a later one would be
 * (" Once", not the "Once" a decode of the text's start gives); a SentencePiece byte-fallback token "<0xHH>" is its
 * byte; while the decoder holds back part of a character (a byte-level BPE token that splits one), each token is
 * its own bytes (GPT-2's byte alphabet mapped back) instead of the text it completes. */
cJSON *srv_token_pieces(cmf_server *s, const int32_t *ids, size_t n) {
    cJSON *a = cJSON_CreateArray();
    cmf_detok_stream *ds = NULL;
    if (!a) return NULL;
    if (n && (cmf_detok_stream_new(s->tok, 0, &ds) != CMF_OK || cmf_detok_stream_prime(ds, ids, 1) != CMF_OK)) {
        cmf_detok_stream_free(ds);
        cJSON_Delete(a);
        return NULL;
    }
    const tok_model *m = s->tok->model;
    int held = 0; /* the decoder held back the previous token's text (part of a character) */
    char raw[256];
    for (size_t i = 0; i < n; i++) {
        char *text = NULL;
        size_t tlen = 0, rn = 0;
        unsigned char b;
        if (cmf_detok_stream_push_n(ds, ids[i], &text, &tlen) != CMF_OK) {
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        size_t rlen = 0;
        const int has_raw = tok_model_token(m, ids[i], &rlen) != NULL && rlen > 0;
        cJSON *piece;
        if (byte_token(m, ids[i], &b))
            piece = piece_json((const char *)&b, 1);
        else if ((held || (tlen == 0 && has_raw)) && byte_level_bytes(m, ids[i], raw, sizeof raw, &rn))
            piece = piece_json(raw, rn);
        else
            piece = piece_json(text, tlen);
        held = tlen == 0 && has_raw;
        free(text);
        cJSON *o = cJSON_CreateObject();
        if (!o || !piece) {
            cJSON_Delete(o);
            cJSON_Delete(piece);
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        cJSON_AddNumberToObject(o, "id", ids[i]);
        cJSON_AddItemToObject(o, "piece", piece);
        cJSON_AddItemToArray(a, o);
    }
    cmf_detok_stream_free(ds);
    return a;
}
