/* jsontext.h — checks on raw JSON text that the JSON library (cJSON) cannot make after parsing. */
#ifndef CMF_UTIL_JSONTEXT_H
#define CMF_UTIL_JSONTEXT_H

#include <stddef.h>

/* The byte offset of the first `\u0000` escape inside a JSON string of `text` (len bytes; case of the hex digits
 * ignored), or len when there is none. cJSON decodes such a string into a NUL-terminated C string that ends at the
 * U+0000, so the rest of the string would be lost silently: callers refuse the text instead (RFC 8259 §7 allows
 * the escape; jinja2 would see the character). Escaped backslashes (`\\u0000`) are not escapes of U+0000. */
size_t cmf_json_nul_escape_at(const char *text, size_t len);

#endif
