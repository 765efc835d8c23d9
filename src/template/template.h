/* template.h — Jinja chat templates (Hugging Face semantics), internal API of src/template/.
 *
 * Renders the `chat_template` of a tokenizer_config.json the way transformers does (jinja2 3.1 with
 * trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, the globals raise_exception and
 * strftime_now, a tojson filter that is json.dumps(ensure_ascii=False) without key sorting, and
 * {% generation %} blocks rendering their body). The context is a JSON object: messages, tools,
 * add_generation_prompt, bos_token, eos_token, enable_thinking and any extra variables.
 *
 * Supported: the statements if/elif/else, for (loop.*, loop.cycle, loop.changed, `for x in y if c`, else, unpacking, nested
 * (`for a, (b, c) in ...`), `recursive` with loop(items) and loop.depth), break/continue, set (names, tuples, namespace attributes, blocks),
 * macro/call, filter blocks, raw, comments; Python-like expressions (`str % args` formatting, list/str * int, dict
 * literals with string/int/float/bool/None keys, f(*args, **kwargs) calls of macros, filters, tests and globals);
 * filters (format, center, attr, int/float as Python parses numbers, truncate, wordwrap, groupby, slice, striptags,
 * urlencode, tojson with transformers' ensure_ascii/indent/separators/sort_keys, ...), tests, cycler/joiner/namespace,
 * and str methods (strip/split/replace/..., ljust/rjust/center/zfill/expandtabs, find/rfind/index/rindex/count with
 * start/end, partition/rpartition, splitlines, removeprefix/removesuffix, casefold, isdigit/isalpha/isalnum/isspace/
 * islower/isupper/isdecimal) and dict/list methods as used by real chat templates.
 * Known differences from Python jinja2: a tuple cannot be a dict key (tuples otherwise behave as Python's: + and *
 * and slices keep them tuples, repr (1,) / (), never == or < against a list, count/index); a "\N{NAME}" escape in a
 * string literal is an error (no Unicode name database; Python decodes it);
 * filter results that jinja2 returns as generators (slice, batch, ...) are lists; striptags unescapes numeric
 * character references and amp/lt/gt/quot/apos/nbsp only (Python: all HTML5 names); the str class tests use
 * utf8proc's Unicode version (Python 3.11: Unicode 14); tojson(sort_keys=true) refuses non-string keys; a **kwargs key
 * that starts with the byte 0x02 is refused; JSON numbers without a
 * fraction become ints (cJSON keeps no literal text, so 1.0 prints as 1); integers are 64-bit (Python's are
 * unbounded: a literal, an int filter result or arithmetic (+ - * // ** abs sum -x) outside int64 is an error); a
 * namespace cannot hold itself (reference counting would never free the cycle); values nested deeper than 1000
 * levels cannot be compared or printed (Python: RecursionError); template inheritance/includes and autoescaping are
 * not supported (an error names the construct).
 *
 * Sandbox: output size and each string's size (max_output), total loop iterations and macro calls, the items of
 * the lists made by range(), list +, list *, list() and split() (max_iterations each), the work of one render (16 x
 * max_iterations steps: each pair of values ==, in, tests and the sort/unique/min/max keys compare, each list or
 * dict item a filter or method reads, each 64 bytes of text scanned, compared, sliced, made or written), macro call
 * depth (also recursive loop() depth), expression nesting, the operators on one path of an expression (4,000; the
 * items of a list/dict literal and the arguments of a call count apart, so a 20,000-entry dict literal parses),
 * padding widths (ljust/rjust/center/zfill/expandtabs: past the string size limit an error before any padding is
 * made) and the parse-time caps below
 * are bounded; exceeding a limit is an error, never a hang or a crash. The rendered text is valid UTF-8 or an error: a string escape that makes a
 * lone surrogate ("\ud800", which Python cannot encode) reaching the output, or context strings that are not
 * UTF-8, fail with a message naming the offset or the variable. */
#ifndef CMF_TEMPLATE_TEMPLATE_H
#define CMF_TEMPLATE_TEMPLATE_H

#include <stddef.h>

#include "cmf.h"

struct cJSON;

typedef struct cmf_template cmf_template;

/* Parse-time caps (a template is untrusted input, parsed once per model or request; real chat templates are a few
 * KB with a few thousand nodes): the source size, one string literal (after escapes, adjacent literals counted
 * apart), the tokens and the syntax-tree nodes of one template, and open brackets in one tag. Exceeding one is a
 * CMF_E_FORMAT error naming it. */
#define CMF_TEMPLATE_MAX_SOURCE 1048576        /* bytes */
#define CMF_TEMPLATE_MAX_STRING_LITERAL 262144 /* bytes */
#define CMF_TEMPLATE_MAX_TOKENS 250000
#define CMF_TEMPLATE_MAX_NODES 100000
#define CMF_TEMPLATE_MAX_BRACKETS 200

typedef struct cmf_template_limits {
    size_t max_output;     /* bytes of rendered text (default 16 MiB) */
    size_t max_iterations; /* loop iterations plus macro calls over one render, and separately the items of the
                            * lists made by range(), +, *, list() and split() (default 1,000,000 each); the work
                            * budget is 16 times this */
    int max_depth;         /* nested macro calls (default 64) */
} cmf_template_limits;

/* The defaults above. */
cmf_template_limits cmf_template_default_limits(void);

/* Parses template source `src` (`len` bytes, UTF-8; need not be NUL-terminated) into *out (free with
 * cmf_template_free). Errors: CMF_E_FORMAT "template:LINE:COL: message" for a syntax error (1-based line and
 * column, counted in code points after "\r\n" -> "\n"); CMF_E_ARG for NULL arguments; CMF_E_NOMEM. */
cmf_status cmf_template_parse(const char *src, size_t len, cmf_template **out);

/* Renders `t` with the variables of JSON object `ctx` (may be NULL: no variables) under `lim` (NULL: defaults)
 * into *out: a malloc'd NUL-terminated string owned by the caller (*out_len, if not NULL, gets its length).
 * Errors: CMF_E_ARG with exactly the template's message when it calls raise_exception(msg); CMF_E_FORMAT
 * "template:LINE:COL: message" for runtime errors (attribute of an undefined value, bad operand types, ...);
 * CMF_E_UNSUPPORTED "template:LINE:COL: ..." for an unknown filter/test/method or a sandbox limit exceeded;
 * CMF_E_NOMEM. On error *out is NULL. */
cmf_status cmf_template_render(const cmf_template *t, const struct cJSON *ctx, const cmf_template_limits *lim,
                               char **out, size_t *out_len);

/* Frees a parsed template; NULL is a no-op. */
void cmf_template_free(cmf_template *t);

/* Parse + render in one call (same errors as the two above). */
cmf_status cmf_template_apply(const char *src, size_t len, const struct cJSON *ctx, char **out);

/* 1 when the template has a for loop over a message's content (`for part in message.content`, `message['content']`,
 * or a variable set from one): it expects content as a list of parts (vLLM's "openai" content format); else 0.
 * Used by the chat API's CMF_CHAT_CONTENT_AUTO. The scan is syntactic and never fails. */
int cmf_template_loops_over_content(const cmf_template *t);

/* The internal half of cmf_chat_render (chat.c): renders `p` with template source `src` (`len` bytes; NULL: ChatML)
 * and the given bos/eos token strings (NULL: not defined). Same errors as cmf_chat_render. */
cmf_status cmf_chat_render_src(const char *src, size_t len, const char *bos_token, const char *eos_token,
                               const cmf_chat_params *p, char **out, size_t *out_len);

/* Picks the template of a tokenizer_config.json's "chat_template" value `ct` (a string, or transformers' list of
 * named templates [{"name": ..., "template": ...}, ...]) as transformers' PreTrainedTokenizerBase.get_chat_template
 * does (4.4x and 5.x; the list becomes a dict, a later duplicate name wins): a string is used as is; from a list,
 * the template named "tool_use" when `has_tools` (tools were passed, even an empty list) and the list has one,
 * else the one named "default". *src points into `ct`; NULL when `ct` is NULL or JSON null (no template: the
 * caller falls back to ChatML). Errors: CMF_E_FORMAT "chat_template: ..." when the value is neither a string nor
 * a list of {name: string, template: string} objects (naming the bad entry), or the list has no usable template
 * (naming the templates it has). */
cmf_status cmf_chat_template_select(const struct cJSON *ct, int has_tools, const char **src);

/* Whether a rendered chat prompt leaves a <think> block open: `text` ends with "<think>" (trailing spaces and
 * newlines aside), as templates that start the reasoning themselves render (DeepSeek-R1's). The reply then begins
 * as reasoning; JSON mode starts after its "</think>" (src/server/sched.c, tools/cmf cli_json_begin). */
int cmf_chat_ends_in_think(const char *text);

#endif
