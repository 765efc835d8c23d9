/* test_template_errors.c — error reporting and the sandbox of the Jinja engine: syntax errors carry line and
 * column, raise_exception's message comes back verbatim, hostile templates (huge ranges, unbounded recursion,
 * output bombs, deep nesting) stop with an error instead of hanging or crashing, and every truncation of a real
 * chat template either parses or fails cleanly. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "template/template.h"
#include "testutil.h"
#include "util/fileio.h"

/* Parses and renders `src` with context JSON text `ctx` (may be NULL); returns the status, *out the text. */
static cmf_status run(const char *src, const char *ctx, const cmf_template_limits *lim, char **out) {
    cJSON *c = ctx ? cJSON_Parse(ctx) : NULL;
    cmf_template *t = NULL;
    *out = NULL;
    cmf_status st = cmf_template_parse(src, strlen(src), &t);
    if (st == CMF_OK) st = cmf_template_render(t, c, lim, out, NULL);
    cmf_template_free(t);
    cJSON_Delete(c);
    return st;
}

static void expect_err_lim(const char *src, const cmf_template_limits *lim, cmf_status want, const char *msg_part) {
    char *out;
    cmf_status st = run(src, NULL, lim, &out);
    CHECK_MSG(st == want && strstr(cmf_last_error(), msg_part) != NULL && out == NULL,
              "template \"%.60s\": status %d message \"%s\"; want %d containing \"%s\"", src, st, cmf_last_error(),
              want, msg_part);
    free(out);
}

static void expect_err(const char *src, cmf_status want, const char *msg_part) {
    expect_err_lim(src, NULL, want, msg_part);
}

/* Renders src (no context, default limits) and checks the exact output. */
static void expect_out(const char *src, const char *want) {
    char *out;
    cmf_status st = run(src, NULL, NULL, &out);
    CHECK_MSG(st == CMF_OK && out && !strcmp(out, want), "template \"%.60s\": status %d (%s), output \"%.80s\"; want \"%s\"",
              src, st, st ? cmf_last_error() : "", out ? out : "", want);
    free(out);
}

/* A template of `reps` copies of `unit` between `pre` and `post` (malloc'd). */
static char *repeat(const char *pre, const char *unit, size_t reps, const char *post) {
    size_t u = strlen(unit), p = strlen(pre);
    char *s = malloc(p + u * reps + strlen(post) + 1);
    memcpy(s, pre, p);
    for (size_t i = 0; i < reps; i++) memcpy(s + p + i * u, unit, u);
    strcpy(s + p + u * reps, post);
    return s;
}

/* The limits and errors of the eighth review (tmpl8): value-walk budget, exact int64 integers, parse caps,
 * UTF-8 output, recursive loops. */
static void review8(void) {
    cmf_template_limits small = cmf_template_default_limits();
    small.max_iterations = 10000; /* walk budget 160,000 steps: fast under ASan */
    /* two distinct lists, each holding one list twice, 40 deep: ==, in, tests, index, sort, unique, min stop at the
     * walk budget (== walked 2^40 pairs) */
    const char *walks[] = {"{{ ns.a == ns.b }}", "{{ ns.a != ns.b }}", "{{ ns.a in [ns.b] }}", "{{ ns.a is eq(ns.b) }}",
                           "{{ ns.a is in([ns.b]) }}", "{{ [ns.b].index(ns.a) }}", "{{ [ns.a, ns.b] | sort }}",
                           "{{ [ns.a, ns.b] | unique | list }}", "{{ [ns.a, ns.b] | min }}", "{{ ns.a < ns.b }}",
                           "{{ [ns.a, ns.b] | select('eq', ns.b) | list }}"};
    for (size_t k = 0; k < sizeof walks / sizeof walks[0]; k++) {
        char src[512];
        snprintf(src, sizeof src, "{%% set ns = namespace(a=[1], b=[1]) %%}{%% for i in range(40) %%}"
                                  "{%% set ns.a = [ns.a, ns.a] %%}{%% set ns.b = [ns.b, ns.b] %%}{%% endfor %%}%s", walks[k]);
        expect_err_lim(src, &small, CMF_E_UNSUPPORTED, "sandbox limit exceeded: work steps");
    }
    /* unique is quadratic in the items; a dict's sort_keys is not */
    expect_err_lim("{{ range(5000) | unique | list | length }}", &small, CMF_E_UNSUPPORTED, "work steps");
    expect_out("{{ [[1, [2]], [1, [2]], [1, [3]]] | unique | list }}|{{ [[1, [2]]] == [[1, [2]]] }}",
               "[[1, [2]], [1, [3]]]|True");
    /* work: text scanned or made and items read count (64 bytes or one item a step), so a loop repeating a linear
     * operation on a big value stops (a 16 MB string searched a million times ran for hours) */
    {
        const char *heavy[] = {"{% if 'zz' in s %}{% endif %}", "{% set x = s | length %}", "{% set x = s[5] %}",
                               "{% set x = s ~ 'x' %}", "{% set x = m() %}", "{% set x = s.find('z') %}",
                               "{% set x = d.items() %}", "{% set x = l | reverse %}", "{% set x = l | join %}",
                               "{% set x = s == t %}", "{% set x = s[1:] %}", "{% for k in d %}{% break %}{% endfor %}",
                               "{% set x = s < t %}", "{% set x = s is lower %}", "{% set x = l | sum %}"};
        char *ctx = malloc(5000 * 16 + 16), *p = ctx;
        p += sprintf(p, "{\"d\":{");
        for (int i = 0; i < 5000; i++) p += sprintf(p, "%s\"k%d\":%d", i ? "," : "", i, i);
        sprintf(p, "}}");
        for (size_t k = 0; k < sizeof heavy / sizeof heavy[0]; k++) {
            char src[512], *out;
            snprintf(src, sizeof src, "{%% set s = 'a' * 200000 %%}{%% set t = 'a' * 200000 %%}{%% set l = range(4000) | list %%}"
                                      "{%% macro m() %%}{{ s }}{%% endmacro %%}{%% for i in range(5000) %%}%s{%% endfor %%}", heavy[k]);
            cmf_status st = run(src, ctx, &small, &out);
            CHECK_MSG(st == CMF_E_UNSUPPORTED && !out && strstr(cmf_last_error(), "sandbox limit exceeded: work steps"),
                      "%s: status %d, %s", heavy[k], st, cmf_last_error());
            free(out);
        }
        free(ctx);
    }
    /* repeating nothing a huge number of times is no loop (the fuzzer found '' * 10**11 running for minutes) */
    expect_out("[{{ '\\0q' * -1111111 * 111111111111 }}][{{ '' * 9223372036854775807 }}][{{ [] * 9223372036854775807 }}]",
               "[][][[]]");
    /* slicing a string is linear (each code point was found from the start: quadratic) */
    expect_out("{% set s = 'é' * 1000000 %}{{ s[::2] | length }} {{ s[::-3] | length }} {{ s[1:] | length }} "
               "{{ s[-2::-1000000] | length }}", "500000 333334 999999 1");
    /* a substring search is linear: a 2 MB needle in a 4 MB string (naively 10^12 steps) */
    expect_out("{% set s = 'a' * 1000000 %}{{ (s ~ 'b') in (s ~ s) }}{{ (s ~ 'b') in (s ~ 'ab') }}"
               "{{ (s ~ s).find(s ~ 'b') }}{{ (s ~ s).count(s ~ 'b') }}", "FalseTrue-10");

    /* a context object with 40,000 keys (a request's tool-call arguments): building it, lookups, iteration and
     * sort_keys stay near linear (each was linear per key: 8 * 10^8 key comparisons) */
    {
        enum { KEYS = 40000 };
        char *ctx = malloc((size_t)KEYS * 24 + 64), *p = ctx;
        p += sprintf(p, "{\"d\":{");
        for (int i = KEYS - 1; i >= 0; i--) p += sprintf(p, "%s\"k%d\":%d", i == KEYS - 1 ? "" : ",", i, i);
        sprintf(p, ",\"k7\":-7}}"); /* a duplicate key: the last value wins, in the first one's place (Python) */
        char *out;
        cmf_template_limits lim = cmf_template_default_limits();
        CHECK(run("{{ d | length }} {{ d['k39999'] }} {{ d.k7 }} {{ (d | list)[39992] }} {% set ns = namespace(bad=0) %}"
                  "{% for k in d %}{% if d[k] != k[1:] | int and k != 'k7' %}{% set ns.bad = ns.bad + 1 %}{% endif %}"
                  "{% endfor %}{{ ns.bad }} {{ (d | tojson(sort_keys=true))[:26] }}", ctx, &lim, &out) == CMF_OK &&
              out && !strcmp(out, "40000 39999 -7 k7 0 {\"k0\": 0, \"k1\": 1, \"k10\": "));
        free(out);
        free(ctx);
    }

    /* integers: exact strings within int64, a clear error outside it; literals over the whole int64 range */
    expect_out("{{ '9007199254740993' | int }} {{ '9223372036854775807' | int }} {{ '-9223372036854775808' | int }} "
               "{{ 9223372036854775807 }} {{ 0x7fffffffffffffff }} {{ -9223372036854775807 - 1 }} {{ 2 ** 62 - 1 + 2 ** 62 }} "
               "{{ (-9223372036854775807 - 1) % -1 }} {{ -5 % 2.5 }} {{ 5 % -2.5 }} {{ 2 ** -1 }}",
               "9007199254740993 9223372036854775807 -9223372036854775808 9223372036854775807 9223372036854775807 "
               "-9223372036854775808 9223372036854775807 0 0.0 -0.0 0.5");
    /* arithmetic past int64 is an error (Python's int would grow; a float would print other digits), without
     * undefined behaviour */
    expect_err("{{ 3 ** 40 }}", CMF_E_FORMAT, "integer overflow: the result of '**' does not fit in 64 bits");
    expect_err("{{ 2 ** 63 }}", CMF_E_FORMAT, "the result of '**' does not fit");
    expect_err("{{ 9223372036854775807 + 1 }}", CMF_E_FORMAT, "the result of '+' does not fit");
    expect_err("{{ -9223372036854775807 - 2 }}", CMF_E_FORMAT, "the result of '-' does not fit");
    expect_err("{{ 4611686018427387904 * 2 }}", CMF_E_FORMAT, "the result of '*' does not fit");
    expect_err("{{ (-9223372036854775807 - 1) // -1 }}", CMF_E_FORMAT, "the result of '//' does not fit");
    expect_err("{{ -(-9223372036854775807 - 1) }}", CMF_E_FORMAT, "does not fit in 64 bits");
    expect_err("{{ (-9223372036854775807 - 1) | abs }}", CMF_E_FORMAT, "abs: integer overflow");
    expect_err("{{ [9223372036854775807, 1] | sum }}", CMF_E_FORMAT, "sum: integer overflow");
    expect_err("{{ '9223372036854775808' | int }}", CMF_E_FORMAT, "outside the 64-bit integer range");
    expect_err("{{ '-99999999999999999999' | int }}", CMF_E_FORMAT, "outside the 64-bit integer range");
    expect_err("{{ '1e19' | int }}", CMF_E_FORMAT, "outside the 64-bit integer range");
    expect_err("{{ 1e19 | int }}", CMF_E_FORMAT, "outside the 64-bit integer range");
    expect_err("{{ '%d' % 1e19 }}", CMF_E_FORMAT, "outside the 64-bit integer range");
    expect_err("{{ 9223372036854775808 }}", CMF_E_FORMAT, "template:1:4: integer literal too large");
    expect_err("{{ 0x10000000000000000 }}", CMF_E_FORMAT, "integer literal too large");

    /* parse caps: source size, one string literal, tokens, nodes, open brackets */
    char *big = repeat("", " ", CMF_TEMPLATE_MAX_SOURCE + 1, "");
    expect_err(big, CMF_E_FORMAT, "template: too long: 1048577 bytes (limit 1048576)");
    free(big);
    big = repeat("{{ '", "x", CMF_TEMPLATE_MAX_STRING_LITERAL + 1, "' }}");
    expect_err(big, CMF_E_FORMAT, "template:1:4: string literal too long (limit 262144 bytes)");
    free(big);
    big = repeat("{{ '", "x", CMF_TEMPLATE_MAX_STRING_LITERAL, "' | length }}");
    expect_out(big, "262144");
    free(big);
    big = repeat("", "{{ 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1 }}", 4000, "");
    expect_err(big, CMF_E_FORMAT, "too long: more than 250000 tokens");
    free(big);
    big = repeat("", "{{1}}", 60000, "");
    expect_err(big, CMF_E_FORMAT, "template too long (more than 100000 syntax nodes)");
    free(big);
    const char *opens[] = {"[", "(", "{'a':"};
    for (size_t k = 0; k < 3; k++) {
        big = repeat("{{ ", opens[k], 5000, " }}"); /* unclosed: said "unclosed variable tag" */
        expect_err(big, CMF_E_FORMAT, "nested too deeply");
        free(big);
    }
    big = repeat("{{ ", "[", 5000, "1");
    char *tail = repeat(big, "]", 5000, " }}");
    expect_err(tail, CMF_E_FORMAT, "template:1:204: expression nested too deeply (more than 200 open brackets)");
    free(tail);
    free(big);
    expect_err("{{ [1, (2] }}", CMF_E_FORMAT, "template:1:10: unexpected ']', expected ')'");

    /* UTF-8: a lone surrogate escape renders only where Python could encode the prompt; context strings are checked */
    expect_err("x{{ '\\ud800' }}y", CMF_E_FORMAT, "rendered text is not valid UTF-8 at byte offset 1");
    expect_err("{{ '\\ud83d\\ude00' }}", CMF_E_FORMAT, "not valid UTF-8 at byte offset 0");
    expect_err("{{ '%c' % 0xdfff }}", CMF_E_FORMAT, "not valid UTF-8");
    expect_out("{% if 'a' != '\\ud800' %}ok {{ '\\ud800' | length }}{% endif %}{{ '\\377\\u00e9' }}", "ok 1\xc3\xbf\xc3\xa9");
    char *out;
    CHECK(run("{{ messages[1].content }}", "{\"messages\":[{\"content\":\"ok\"},{\"content\":\"ab\xff\"}]}", NULL, &out) ==
          CMF_E_FORMAT && !out);
    CHECK_MSG(strstr(cmf_last_error(), "template context: messages[1].content is not valid UTF-8 (byte offset 2)"), "%s",
              cmf_last_error());
    CHECK(run("x", "{\"k\xc3\":1}", NULL, &out) == CMF_E_FORMAT && !out);
    CHECK_MSG(strstr(cmf_last_error(), "a key of the context is not valid UTF-8"), "%s", cmf_last_error());
    CHECK(run("x", "{\"tools\":[{\"d\":\"\xed\xa0\x80\"}]}", NULL, &out) == CMF_E_FORMAT && !out); /* encoded surrogate */
    CHECK_MSG(strstr(cmf_last_error(), "tools[0].d is not valid UTF-8"), "%s", cmf_last_error());

    /* a list nested 100,000 deep (one level per loop iteration) is made and freed without recursion; walks that
     * follow one 3,000 deep stop at JV_MAX_DEPTH with Python's RecursionError text (they overflowed the C stack) */
    {
        const char *deep_ends[] = {"{{ ns.l }}", "{{ ns.l == ns.m }}", "{{ ns.l < ns.m }}", "{{ ns.l ~ '' }}",
                                   "{{ [ns.l, ns.m] | sort | length }}", "{{ ns.l | string | length }}",
                                   "{{ ns.l in [ns.m] }}", "{{ [ns.l, ns.m] | unique | list | length }}",
                                   "{{ '%s' % [ns.l] }}", "{{ [ns.l] | join }}", "{% filter upper %}{{ ns.l }}{% endfilter %}",
                                   "{{ raise_exception(ns.l) }}", "{{ ns.l | tojson }}"};
        for (size_t k = 0; k < sizeof deep_ends / sizeof deep_ends[0]; k++) {
            char src[512];
            snprintf(src, sizeof src, "{%% set ns = namespace(l=[], m=[]) %%}{%% for i in range(3000) %%}"
                                      "{%% set ns.l = [ns.l] %%}{%% set ns.m = [ns.m] %%}{%% endfor %%}%s", deep_ends[k]);
            expect_err(src, CMF_E_FORMAT, k == 12 ? "not JSON serializable" : "maximum recursion depth exceeded");
        }
        expect_out("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                   "{{ ns.l | length }}{{ ns.l[0][0][0] | length }}", "11");
    }
    /* a namespace cannot hold itself, directly or through lists, dicts, other namespaces or a bound method
     * (reference counting would never free the cycle; Python's collector does) */
    expect_err("{% set ns = namespace(a=1) %}{% set ns.me = [1, {'x': ns}] %}", CMF_E_FORMAT,
               "a namespace cannot hold itself ('ns.me' would reach 'ns')");
    expect_err("{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}", CMF_E_FORMAT,
               "'a.b' would reach 'a'");
    expect_err("{% set cy = cycler(1, 2) %}{% set cy.f = cy.next %}", CMF_E_FORMAT, "cannot hold itself");
    expect_out("{% set a = namespace(n=0) %}{% set b = namespace(a=a) %}{% set ns = namespace(l=[]) %}"
               "{% for i in range(1000) %}{% set ns.l = ns.l + [b] %}{% set a.n = a.n + 1 %}{% endfor %}"
               "{{ ns.l | length }} {{ ns.l[999].a.n }}", "1000 1000");

    /* recursive loops are bounded by the macro depth; list * int by the list-items budget */
    expect_err("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", CMF_E_UNSUPPORTED, "macro call depth");
    expect_err("{{ ([1, 2] * 1000000000) | length }}", CMF_E_UNSUPPORTED, "list items made by range(), +, *, list() and split()");
    expect_err("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l * 2 %}{% endfor %}",
               CMF_E_UNSUPPORTED, "list items made");
    /* a string's characters and split pieces count as list items; replace keeps the size limit while it builds */
    expect_err_lim("{% set s = 'x' * 20000 %}{% for ch in s %}{% endfor %}", &small, CMF_E_UNSUPPORTED, "list items made");
    expect_err_lim("{{ ('x' * 20000) | list | length }}", &small, CMF_E_UNSUPPORTED, "list items made");
    expect_err_lim("{{ ('x ' * 20000).split() | length }}", &small, CMF_E_UNSUPPORTED, "list items made");
    expect_err_lim("{{ ('x,' * 20000).split(',') | length }} {{ ('x ' * 20000) | wordcount }}", &small, CMF_E_UNSUPPORTED,
                   "list items made");
    expect_out("{{ ('x,' * 2000).split(',') | length }} {{ ('ab' * 3000) | list | length }}", "2001 6000");
    {
        cmf_template_limits kb = cmf_template_default_limits();
        kb.max_output = 1000000; /* (the limit's path with 1 MB strings: fast under ASan) */
        expect_err_lim("{{ ('a' * 1000000).replace('a', 'b' * 1000000) | length }}", &kb, CMF_E_UNSUPPORTED, "string size");
    }
    expect_err("{{ ('a' * 4000) | replace('', 'b' * 8000) | length }}", CMF_E_UNSUPPORTED, "string size");
    expect_err("{{ '%999999999s' % 'x' }}", CMF_E_UNSUPPORTED, "string size");
    expect_err("{{ 'x' | center(999999999) }}", CMF_E_UNSUPPORTED, "string size");
    expect_err("{{ '%*d' % (-9223372036854775807 - 1, 1) }}", CMF_E_UNSUPPORTED, "string size");
    expect_out("{{ '%*d|' % (-3, 1) }}{{ -9223372036854775808.0 | int }}", "1  |-9223372036854775808");
    /* batch: the batch size is no allocation size (batch(2**60 + 1) wrote past a 16-byte array), fill values are
     * list items */
    expect_out("{{ [1, 2, 3] | batch(1152921504606846977) | list }}{{ [1, 2, 3] | batch(9223372036854775807) | list }}",
               "[[1, 2, 3]][[1, 2, 3]]");
    expect_err("{{ [1] | batch(1000000000000000000, 'x') | list | length }}", CMF_E_UNSUPPORTED, "list items made");
    expect_out("{{ [1, 2, 3] | batch(2, 'x') | list }}", "[[1, 2], [3, 'x']]");
    expect_err("{{ '%.2000f' % 1.0 }}", CMF_E_UNSUPPORTED, "format precision / width (limit 1000)"); /* (Python: none) */
    expect_out("{{ ('%.1000f' % 1.0) | length }}", "1002");
    /* tmpl9: padding widths and tab sizes past the string size limit are refused before any padding is made;
     * slices, lines and wrapped text keep the list-items and string limits; loop.changed needs its loop */
    expect_err("{{ 'x'.ljust(99999999999) }}", CMF_E_UNSUPPORTED, "string size (padding width) (limit 16777216)");
    expect_err("{{ 'x'.center(9223372036854775807, '*') }}", CMF_E_UNSUPPORTED, "padding width");
    expect_err("{{ '-1'.zfill(16777217) }}", CMF_E_UNSUPPORTED, "padding width");
    expect_err("{{ 'a\tb'.expandtabs(99999999999) }}", CMF_E_UNSUPPORTED, "string size");
    expect_err("{{ ('\t' * 1000).expandtabs(100000) }}", CMF_E_UNSUPPORTED, "string size");
    expect_out("{{ 'x'.rjust(3, 'é') }}{{ 'x'.ljust(-9223372036854775807 - 1) }}{{ 'a\tb'.expandtabs(-5) }}", "ééxxab");
    expect_err_lim("{{ [1] | slice(1000000000000) | list | length }}", &small, CMF_E_UNSUPPORTED, "list items made");
    expect_err_lim("{{ ('x\n' * 20000).splitlines() | length }}", &small, CMF_E_UNSUPPORTED, "list items made");
    {
        cmf_template_limits kb = cmf_template_default_limits();
        kb.max_output = 1000;
        expect_err_lim("{{ ('ab ' * 300) | wordwrap(1) }}", &kb, CMF_E_UNSUPPORTED, "string size");
        expect_err_lim("{{ ('a' * 600) | wordwrap(1) }}", &kb, CMF_E_UNSUPPORTED, "string size");
        expect_err_lim("{{ ('é' * 400) | urlencode }}", &kb, CMF_E_UNSUPPORTED, "string size");
        expect_err_lim("{{ 'x'.center(1001) }}", &kb, CMF_E_UNSUPPORTED, "padding width");
    }
    /* tmpl10: str.format widths past the string size limit are refused before padding (a zero fill with grouping
     * made its digits first); the result keeps the string limit; rsplit's pieces count as list items; ASCII-only
     * strings and long runs of final sigmas stay linear */
    expect_err("{{ '{:999999999}'.format('x') }}", CMF_E_UNSUPPORTED, "string size (format width)");
    expect_err("{{ '{:0999999999,}'.format(1) }}", CMF_E_UNSUPPORTED, "string size (format width)");
    expect_err("{{ '{:{w}}'.format(1, w=99999999) }}", CMF_E_UNSUPPORTED, "string size (format width)");
    {
        cmf_template_limits kb = cmf_template_default_limits();
        kb.max_output = 1000;
        expect_err_lim("{{ ('{0}' * 300).format('abcd') | length }}", &kb, CMF_E_UNSUPPORTED, "string size");
    }
    expect_err_lim("{% set s = 'x' * 1000000 %}{{ ('{0:.1}' * 100000).format(s) | length }}", &small, CMF_E_UNSUPPORTED, "work steps");
    expect_err_lim("{% set l = range(5000) | list %}{{ ('{0!r:.1}' * 100000).format(l) | length }}", &small, CMF_E_UNSUPPORTED, "work steps");
    expect_err_lim("{% set l = [range(1000) | list] * 100 %}{% for i in range(1000) %}{{ l is lower }}{% endfor %}", &small,
                   CMF_E_UNSUPPORTED, "work steps");
    expect_err_lim("{{ ('x,' * 20000).rsplit(',') | length }}", &small, CMF_E_UNSUPPORTED, "list items made");
    expect_err_lim("{{ ('x ' * 20000).rsplit() | length }}", &small, CMF_E_UNSUPPORTED, "list items made");
    expect_out("{{ ('aΣ\u0301' * 300000).lower() | length }} {{ ('ß' * 100000).upper() | length }}", "900000 200000");
    expect_out("{{ '{:,}|{:_x}|{:>6.2%}'.format(-1234567, 65535, 0.125) }}", "-1,234,567|ffff|12.50%");
    /* wordwrap is linear in the text (200,000 words); a lone surrogate (not UTF-8 for PCRE2) is an error */
    expect_out("{{ ('word ' * 200000) | wordwrap(11) | length }}", "999999");
    expect_err("{{ 'a \\ud800 b' | wordwrap(2) }}", CMF_E_FORMAT, "wordwrap: the text is not valid UTF-8 at byte offset 2");
    /* striptags and rfind stay linear: 50,000 tags, an unclosed '<' before 300 KB, the last match of an overlapping
     * needle */
    expect_out("{{ ('<b>x' * 50000) | striptags | length }} {{ ('<' ~ 'a' * 300000) | striptags | length }} "
               "{{ ('a' * 300000).rfind('a' * 150000) }} {{ ('a' * 300000).rpartition('a' * 150000)[0] | length }}",
               "50000 300001 150000 150000");
    expect_err("{% set ns = namespace() %}{% for x in [1] %}{% set ns.c = loop.changed %}{% endfor %}{{ ns.c(1) }}",
               CMF_E_FORMAT, "loop.changed() called after its loop ended");
    /* **kwargs needs a mapping with string keys; a dict with number keys cannot be written with sort_keys (Python
     * compares the keys: int with str is a TypeError; we refuse every non-string key there); keys that Python cannot
     * hash are an error; a string key that starts with \x02 (the tag of stored number keys) stays a string */
    expect_err("{% macro f() %}{% endmacro %}{{ f(**{1: 2}) }}", CMF_E_FORMAT, "keywords must be strings");
    expect_err("{{ dict(**{'\\x02': 1}) }}", CMF_E_FORMAT, "keywords must be strings");
    expect_err("{{ {1: 'a'} | tojson(sort_keys=true) }}", CMF_E_FORMAT, "non-string keys (sort_keys)");
    expect_err("{{ {{'a': 1}: 2} }}", CMF_E_FORMAT, "unhashable type: 'dict'");
    expect_err("{{ {missing: 2} }}", CMF_E_FORMAT, "unhashable type: 'undefined'");
    expect_out("{% set d = {'\\x021i': 'str', 1: 'int', '\\x02': 'tag'} %}{{ d['\\x021i'] }} {{ d[1] }} {{ d['\\x02'] }} "
               "{{ d | length }} {{ (d | list)[0] == '\\x021i' }} {{ (d | list)[0] | length }}{{ (d | list)[2] | length }}",
               "str int tag 3 True 31");
    expect_err("{{ f(*1) }}", CMF_E_FORMAT, "'int' object is not iterable");
    expect_err("{{ range(**{'a': 1}, *[1]) }}", CMF_E_FORMAT, "invalid syntax for function call expression");
    /* a loop object kept past its loop is not callable */
    expect_err("{% set ns = namespace() %}{% for x in [1] recursive %}{% set ns.l = loop %}{% endfor %}{{ ns.l([1]) }}",
               CMF_E_FORMAT, "'dict' object is not callable");
}

int main(void) {
    /* syntax errors: line and column (1-based, of the offending token) */
    expect_err("ok\n{{ 1 + }}", CMF_E_FORMAT, "template:2:8: unexpected 'end of print statement'");
    expect_err("a\n  {% frobnicate %}", CMF_E_FORMAT, "template:2:6: encountered unknown tag 'frobnicate'");
    expect_err("x\n\n{% if a %}\nbody", CMF_E_FORMAT, "template:4:5: unexpected end of template, expected 'endif'");
    expect_err("{{ 'abc }}", CMF_E_FORMAT, "template:1:4: unterminated");
    expect_err("{{ x ", CMF_E_FORMAT, "template:1:1: unclosed variable tag");
    expect_err("{% for %}{% endfor %}", CMF_E_FORMAT, "template:1:8: expected a variable name");
    expect_err("{# never closed", CMF_E_FORMAT, "template:1:1: unclosed comment");
    expect_err("{{ a ; b }}", CMF_E_FORMAT, "template:1:6: unexpected character ';'");
    expect_err("é\n  é {{ ) }}", CMF_E_FORMAT, "template:2:8:"); /* columns count code points */
    /* \N{NAME}: Python's unicode-escape decodes it by the character's name ("\N{LATIN SMALL LETTER A}" is "a"); we
     * have no name database, so it is an error naming the escape (it was printed as is), at the backslash */
    expect_err("ab\n {{ 'x\\N{LATIN SMALL LETTER A}' }}", CMF_E_FORMAT,
               "template:2:7: \\N{...} escapes are not supported");
    expect_err("{{ \"\\N{DIGIT ONE}\" ~ 1 }}", CMF_E_FORMAT, "\\N{...} escapes are not supported");

    /* raise_exception: the template's own message, verbatim, as CMF_E_ARG */
    expect_err("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}", CMF_E_ARG,
               "Conversation roles must alternate user/assistant/user/assistant/...");
    char *out;
    CHECK(run("{{ raise_exception('bad: ' ~ messages[0].role) }}", "{\"messages\":[{\"role\":\"tool\"}]}", NULL, &out) == CMF_E_ARG);
    CHECK(strcmp(cmf_last_error(), "bad: tool") == 0);
    /* an error always has a message: an empty one says so, a NUL is written \x00 (the fuzzer found both) */
    expect_err("{{ raise_exception('') }}", CMF_E_ARG, "raise_exception() with an empty message");
    expect_err("{{ raise_exception('\\0\\0a') }}", CMF_E_ARG, "\\x00\\x00a");

    /* runtime errors name the position */
    expect_err("{{ nothing.attr }}", CMF_E_FORMAT, "template:1:11: 'nothing' is undefined");
    /* an Undefined from a computed key names that key after the key string itself is gone (CI's fuzzer found a
     * read after free here), and a method fetched by a computed name outlives the name */
    expect_err("{% set d = {} %}{% for k in ['ab'] %}{% set x = d[k ~ 'c'] %}{{ x + 1 }}{% endfor %}", CMF_E_FORMAT,
               "'abc' is undefined");
    expect_err("{% set x = (1)['fo' ~ 'o'] %}{{ 2 * x }}", CMF_E_FORMAT, "'foo' is undefined");
    CHECK(run("{% set m = 'ab'['up' ~ 'per'] %}{{ m() }}", NULL, NULL, &out) == CMF_OK && out && !strcmp(out, "AB"));
    free(out);
    expect_err("{{ 1 + 'a' }}", CMF_E_FORMAT, "unsupported operand types for '+': 'int' and 'str'");
    expect_err("{{ 1 // 0 }}", CMF_E_FORMAT, "division or modulo by zero");
    expect_err("{{ 1 | nosuchfilter }}", CMF_E_UNSUPPORTED, "unknown filter 'nosuchfilter'");
    expect_err("{{ 1 is nosuchtest }}", CMF_E_UNSUPPORTED, "unknown test 'nosuchtest'");
    expect_err("{% set x = 1 %}{% set x.a = 2 %}", CMF_E_FORMAT, "non-namespace");

    /* sandbox: huge ranges, nested loops, unbounded recursion, output and string bombs, deep nesting */
    expect_err("{% for i in range(10**9) %}{% endfor %}", CMF_E_UNSUPPORTED, "sandbox limit exceeded: list items made");
    /* the iteration budget counts loop iterations once: range() charges a budget of its own (a small budget keeps
     * this test fast under ASan) */
    cmf_template_limits small = cmf_template_default_limits();
    small.max_iterations = 10000;
    CHECK(run("{% for i in range(9999) %}{% endfor %}ok", NULL, &small, &out) == CMF_OK && out && !strcmp(out, "ok"));
    free(out);
    /* lists made by + count against that budget: doubling (was 11 GB) and quadratic appends (was 52 s) stop early */
    expect_err("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               CMF_E_UNSUPPORTED, "sandbox limit exceeded: list items made");
    expect_err("{% set ns = namespace(d=[]) %}{% for i in range(100000) %}{% set ns.d = ns.d + [i] %}{% endfor %}",
               CMF_E_UNSUPPORTED, "sandbox limit exceeded: list items made");
    CHECK(run("{% set ns = namespace(d=[]) %}{% for i in range(500) %}{% set ns.d = ns.d + [i] %}{% endfor %}"
              "{{ ns.d | length }}", NULL, NULL, &out) == CMF_OK && out && !strcmp(out, "500"));
    free(out);
    /* filters that build strings keep the string size limit (a replace() chain made 1e9 bytes) */
    small.max_output = 1000; /* (small sizes keep this fast under ASan) */
    CHECK(run("{{ ('x' * 600) | replace('x', 'yy') | length }}", NULL, &small, &out) == CMF_E_UNSUPPORTED && !out);
    CHECK_MSG(strstr(cmf_last_error(), "string size"), "%s", cmf_last_error());
    CHECK(run("{{ ('\"' * 600) | tojson | length }}", NULL, &small, &out) == CMF_E_UNSUPPORTED && !out);
    CHECK_MSG(strstr(cmf_last_error(), "string size"), "%s", cmf_last_error());
    small.max_output = cmf_template_default_limits().max_output;
    /* a list holding one list twice, 40 levels deep (2^40 leaves): printing, str(), tojson and == stop at once
     * (the serializers stop at the size limit, == of the same list is true without a walk); a 100 KB limit takes
     * the same path as the default 16 MB one, fast under ASan */
    {
        small.max_output = 100000;
        const char *ends[] = {"{{ ns.l }}", "{{ ns.l | string | length }}", "{{ ns.l | tojson | length }}",
                              "{{ ns.l ~ '' }}"};
        char src[512];
        for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
            snprintf(src, sizeof src, "{%% set ns = namespace(l=[1]) %%}{%% for i in range(40) %%}"
                                      "{%% set ns.l = [ns.l, ns.l] %%}{%% endfor %%}%s", ends[k]);
            expect_err_lim(src, &small, CMF_E_UNSUPPORTED, k == 0 ? "output bytes" : "string size");
        }
        small.max_output = cmf_template_default_limits().max_output;
        CHECK(run("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
                  "{{ ns.l == ns.l }}", NULL, NULL, &out) == CMF_OK && out && !strcmp(out, "True"));
        free(out);
    }
    /* macro calls count as steps: f calling itself twice 60 deep (2^61 calls, no output) stops */
    CHECK(run("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}", NULL,
              &small, &out) == CMF_E_UNSUPPORTED && !out);
    CHECK_MSG(strstr(cmf_last_error(), "loop iterations and macro calls"), "%s", cmf_last_error());
    /* a long chain of left-associative operators is refused at parse time (30,000 '+' overflowed the stack) */
    {
        enum { TERMS = 5000 }; /* (past the 4,000 limit) */
        const char *ops[] = {" + 1", " ~ 'a'", "|upper", ".a", "[0]", " and 1"};
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            char *chain = malloc(TERMS * 8 + 16), *p = chain;
            p += sprintf(p, "{{ 1");
            for (int i = 0; i < TERMS; i++) p += sprintf(p, "%s", ops[k]);
            sprintf(p, " }}");
            expect_err(chain, CMF_E_FORMAT, "expression too long");
            free(chain);
        }
    }
    /* a dict or list literal of 5,000 items (past MAX_EXPR_NODES, 4,000, were they one chain) is no chain: its
     * items count apart (a 2,500-entry dict said "expression too long"); a chain inside one item still counts the
     * nodes on its path */
    {
        enum { ITEMS = 5000 };
        char *lit = malloc(ITEMS * 24 + 64), *p = lit;
        p += sprintf(p, "{%% set d = {");
        for (int i = 0; i < ITEMS; i++) p += sprintf(p, "%s\"k%d\": %d", i ? ", " : "", i, i);
        p += sprintf(p, "} %%}{%% set l = [");
        for (int i = 0; i < ITEMS; i++) p += sprintf(p, "%s%d", i ? "," : "", i);
        sprintf(p, "] %%}{{ d | length }} {{ d.k4999 }} {{ l | length }} {{ l[-1] }}");
        expect_out(lit, "5000 4999 5000 4999");
        free(lit);
        char *chain = repeat("{{ [1, 1", " + 1", 4100, "] }}");
        expect_err(chain, CMF_E_FORMAT, "expression too long (more than 4000 operators and operands in one chain");
        free(chain);
        chain = repeat("{{ {'a': [f(1", " ~ 1", 4100, ")]} }}");
        expect_err(chain, CMF_E_FORMAT, "expression too long");
        free(chain);
    }
    /* nested loops stop at the iteration budget (a small one: fast under ASan) */
    expect_err_lim("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}"
                   "{% endfor %}", &small, CMF_E_UNSUPPORTED, "sandbox limit exceeded");
    expect_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", CMF_E_UNSUPPORTED, "macro call depth");
    expect_err("{{ 'x' * 1000000000 }}", CMF_E_UNSUPPORTED, "string size");
    expect_err("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
               "{% endfor %}", CMF_E_UNSUPPORTED, "string size");
    cmf_template_limits lim = cmf_template_default_limits();
    lim.max_output = 1000;
    CHECK(run("{% for i in range(501) %}ab{% endfor %}", NULL, &lim, &out) == CMF_E_UNSUPPORTED);
    CHECK(strstr(cmf_last_error(), "output bytes") != NULL);
    CHECK(run("{% for i in range(500) %}ab{% endfor %}", NULL, &lim, &out) == CMF_OK && out && strlen(out) == 1000);
    free(out);
    {
        enum { DEPTH = 5000 };
        char *deep = malloc(DEPTH * 2 + 16), *p = deep;
        p += sprintf(p, "{{ ");
        for (int i = 0; i < DEPTH; i++) *p++ = '(';
        *p++ = '1';
        for (int i = 0; i < DEPTH; i++) *p++ = ')';
        sprintf(p, " }}");
        expect_err(deep, CMF_E_FORMAT, "nested too deeply");
        p = deep;
        for (int i = 0; i < DEPTH / 10; i++) p += sprintf(p, "{%%if 1%%}");
        expect_err(deep, CMF_E_FORMAT, "nested too deeply");
        free(deep);
    }

    review8();

    /* bad arguments */
    CHECK(cmf_template_parse(NULL, 0, NULL) == CMF_E_ARG);
    cmf_template *t;
    CHECK(cmf_template_parse("x", 1, &t) == CMF_OK);
    cJSON *arr = cJSON_CreateArray();
    CHECK(cmf_template_render(t, arr, NULL, &out, NULL) == CMF_E_ARG);
    cJSON_Delete(arr);
    cmf_template_free(t);

    /* every prefix of the real Qwen3 template parses or fails cleanly (never crashes) */
    char *cfg;
    size_t len;
    if (cmf_read_file(shared_path("data/tokenizers/qwen3/tokenizer_config.json"), &cfg, &len) != CMF_OK) {
        CHECK_MSG(0, "reading the Qwen3 tokenizer_config.json: %s", cmf_last_error());
        CMF_TEST_END();
    }
    cJSON *j = cJSON_Parse(cfg);
    const char *src = cJSON_GetStringValue(cJSON_GetObjectItem(j, "chat_template"));
    CHECK(src != NULL);
    if (!src) src = "";
    size_t n = strlen(src), parsed = 0;
    for (size_t k = 0; k <= n; k++) {
        cmf_status st = cmf_template_parse(src, k, &t);
        CHECK(st == CMF_OK || st == CMF_E_FORMAT);
        if (st == CMF_OK) {
            parsed++;
            cmf_template_free(t);
        }
    }
    CHECK(parsed > 0 && parsed < n); /* the whole template parses; most truncations do not */
    cJSON_Delete(j);
    free(cfg);
    CMF_TEST_END();
}
