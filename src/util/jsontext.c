/* jsontext.c — raw JSON text checks (jsontext.h). */
#include "util/jsontext.h"

size_t cmf_json_nul_escape_at(const char *text, size_t len) {
    if (!text) return len;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (!in_string) {
            if (c == '"') in_string = 1;
            continue;
        }
        if (c == '"') {
            in_string = 0;
        } else if (c == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && text[i + 2] == '0' && text[i + 3] == '0' && text[i + 4] == '0' &&
                text[i + 5] == '0')
                return i;
            i++; /* the escaped character (a quote or a backslash among them) */
        }
    }
    return len;
}
