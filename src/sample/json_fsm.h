/* json_fsm.h — a byte-at-a-time recognizer of one JSON object (RFC 8259), for JSON-constrained sampling
 * (constrain.c: OpenAI's response_format {"type": "json_object"}, `cmf run --json`).
 *
 * The language accepted: optional whitespace (the rule below), one JSON object (RFC 8259 §4; values §3, numbers §6, strings §7 with
 * every escape, UTF-8 §8.1 checked as RFC 3629 well-formed: no overlongs, no surrogates, nothing above U+10FFFF),
 * then nothing. Two limits keep a sampled text from running away:
 *   - containers nest at most CMF_JSON_MAX_DEPTH deep (the top-level object counts);
 *   - whitespace between tokens is llama.cpp's json.gbnf rule `ws ::= | " " | "\n" [ \t]{0,20}`: nothing, one
 *     space, or a newline and at most CMF_JSON_MAX_INDENT spaces or tabs (pretty-printed JSON fits; a run of
 *     newlines or blank padding, which a sampler could otherwise draw without end, does not; no '\r').
 * A text that breaks a limit is rejected like malformed JSON. "\u" escapes of lone surrogates are accepted (RFC 8259
 * §8.2 allows them; Python's json and cJSON parse them).
 *
 * Use: cmf_json_fsm_init, then cmf_json_fsm_feed with the bytes as they come (any split: a UTF-8 character, an escape
 * or a literal may span calls); cmf_json_fsm_done says whether the object is complete. The state is a small plain
 * struct: copy it to try a continuation without committing to it.
 */
#ifndef CMF_JSON_FSM_H
#define CMF_JSON_FSM_H

#include <stddef.h>
#include <stdint.h>

#define CMF_JSON_MAX_DEPTH 32
#define CMF_JSON_MAX_INDENT 20

typedef struct cmf_json_fsm {
    uint32_t stack; /* bit i: container i is an object (1) or an array (0); i < depth */
    uint8_t state;  /* what the next byte may be (json_fsm.c's enum) */
    uint8_t depth;  /* open containers */
    uint8_t ws;     /* the whitespace run: 0 none yet, 1 + the indent after its newline, 255 one space (closed) */
    uint8_t aux;    /* per state: hex digits left of a \u escape, bytes left of a UTF-8 character, literal position */
    uint8_t lo, hi; /* the allowed range of the next UTF-8 continuation byte */
    uint8_t lit;    /* the literal being matched: 't' true, 'f' false, 'n' null */
    uint8_t bad;    /* 1 once a byte was rejected (every later feed fails) */
} cmf_json_fsm;

/* Starts at the beginning of a text. */
void cmf_json_fsm_init(cmf_json_fsm *f);

/* Feeds n bytes. Returns 1 when every byte continues a text of the language (f advanced), 0 when one does not (f is
 * then marked bad and must not be used further: feed a copy to test a continuation). n = 0 returns !bad. */
int cmf_json_fsm_feed(cmf_json_fsm *f, const void *bytes, size_t n);

/* 1 when the text is inside a string, between characters (not in an escape or a multi-byte character): every byte
 * other than '"', '\\' and a control character keeps it there, and so does a whole well-formed UTF-8 character. */
int cmf_json_fsm_in_string(const cmf_json_fsm *f);

/* 1 when the bytes fed so far are a whole text of the language (the object closed), else 0. After that no byte is
 * accepted: the language ends there (trailing whitespace included: a sampler then draws only end-of-text ids). */
int cmf_json_fsm_done(const cmf_json_fsm *f);

#endif
