#!/usr/bin/env python3
"""Writes tests/template/data/cases.json: chat-template test cases rendered by Python jinja2 3.1 configured as
Hugging Face transformers configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception and
strftime_now globals, json.dumps-based tojson, {% generation %} blocks rendering their body).

Run once from the repository root:  CMF_SHARED=../shared python3 scripts/template/make_refs.py
Each case: name, template source (inline "template", a committed "template_path" under tests/template/data/, or
"template_shared": a tokenizer_config.json under $CMF_SHARED/data whose chat_template is used), "context"
(the JSON variables) and either "expected" (the exact rendered text) or "error" ("raise" with "message", "runtime" (the
template fails on this input, e.g. `'x' in None`), or "syntax" with "line")."""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.sandbox
from jinja2 import nodes
from jinja2.ext import Extension

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "template", "data")
SHARED = os.environ.get("CMF_SHARED", os.path.join(ROOT, "..", "shared"))


class GenerationBlock(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers tracks assistant spans with it)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    # transformers compiles chat templates in jinja2's ImmutableSandboxedEnvironment (chat_template_utils.py
    # _compile_jinja_template): list/dict methods that modify in place (append, pop, update, ...) raise SecurityError.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loader=None,
                                                       extensions=["jinja2.ext.loopcontrols", GenerationBlock])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


# ---- conversations ----
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER1 = {"role": "user", "content": "Hello! What's 2+2?"}
ASSIST1 = {"role": "assistant", "content": "2+2 is 4."}
USER2 = {"role": "user", "content": "  And in French, s'il vous plaît?  "}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city — «unicode» ok",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "Time now",
                                              "parameters": {"type": "object", "properties": {}}}}
TOOL_CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]}
TOOL_CALL_STR = {"role": "assistant", "content": None, "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
    {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}
TOOL_RESULT = {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}
TOOL_RESULT2 = {"role": "tool", "content": "12:00"}
REASONING = {"role": "assistant", "content": "It is 4.", "reasoning_content": "\nThe user asks 2+2. That is 4.\n"}
THINK_INLINE = {"role": "assistant", "content": "<think>\nSimple sum.\n</think>\n\nThe answer is 4."}

CONVERSATIONS = {
    "single": [USER1],
    "system": [SYSTEM, USER1],
    "multi": [SYSTEM, USER1, ASSIST1, USER2],
    "multi_nosys": [USER1, ASSIST1, USER2, {"role": "assistant", "content": "Deux plus deux font quatre."}],
    "reasoning": [USER1, REASONING, USER2],
    "think_inline": [SYSTEM, USER1, THINK_INLINE, USER2],
    "reasoning_last": [USER1, REASONING],
}
TOOL_CONVERSATIONS = {
    "tool_calls": [SYSTEM, USER1, TOOL_CALL, TOOL_RESULT, {"role": "assistant", "content": "It is 21 °C."}],
    "tool_calls_str": [USER1, TOOL_CALL_STR, TOOL_RESULT, TOOL_RESULT2],
}


def family_cases():
    cases = []
    specs = [("qwen3", {"template_shared": "tokenizers/qwen3/tokenizer_config.json"}, True),
             ("llama3", {"template_shared": "tokenizers/llama3/tokenizer_config.json"}, False),
             ("deepseek_v3", {"template_path": "templates/deepseek_v3.jinja"}, True),
             ("turns", {"template_path": "templates/turns.jinja"}, True),
             ("alternating", {"template_path": "templates/alternating.jinja"}, False)]
    for fam, src, tools_ok in specs:
        convs = dict(CONVERSATIONS)
        if tools_ok:
            convs.update(TOOL_CONVERSATIONS)
        for cname, msgs in convs.items():
            for agp in (False, True):
                ctx = {"messages": msgs, "add_generation_prompt": agp, "bos_token": "<s>", "eos_token": "</s>"}
                cases.append(dict(src, name=f"{fam}/{cname}/agp={int(agp)}", context=ctx))
        extra = [("thinking_off", {"enable_thinking": False}), ("thinking_on", {"enable_thinking": True})]
        if tools_ok:
            extra += [("tools", {"tools": [WEATHER_TOOL, TIME_TOOL]})]
        for xname, xv in extra:
            ctx = {"messages": CONVERSATIONS["multi"], "add_generation_prompt": True, "bos_token": "<s>",
                   "eos_token": "</s>", **xv}
            cases.append(dict(src, name=f"{fam}/multi/{xname}", context=ctx))
        if tools_ok:
            ctx = {"messages": TOOL_CONVERSATIONS["tool_calls"], "tools": [WEATHER_TOOL], "add_generation_prompt": True,
                   "bos_token": "<s>", "eos_token": "</s>"}
            cases.append(dict(src, name=f"{fam}/tool_calls/tools", context=ctx))
    return cases


# ---- feature templates: (name, template, context) ----
V = {"s": "Hello, World", "n": 7, "f": 2.5, "l": [3, 1, 2], "words": ["b", "A", "c", "a"],
     "d": {"b": 1, "a": [1, 2], "c": {"x": None}}, "u": "héllo wörld ünïcode", "empty": "", "none": None,
     "users": [{"name": "ann", "age": 31, "admin": True}, {"name": "Bob", "age": 25, "admin": False},
               {"name": "cy", "age": 40}]}
FEATURES = [
    ("ws/trim_lstrip", "a\n  {% if true %}\n  x\n  {% endif %}\nb\n", {}),
    ("ws/minus", "a  \n  {{- 'x' -}}  \n  b {%- if 1 %} c {% endif -%}  d", {}),
    ("ws/plus", "a\n  {%+ if true +%}\nx\n  {%+ endif %}\nb", {}),
    ("ws/comment", "a\n  {# note #}\nb {#- trim -#} c", {}),
    ("ws/raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{%- raw -%}  x  {%- endraw %}", {}),
    ("ws/crlf", "line1\r\n{% if true %}\r\nline2\r\n{% endif %}\r\n", {}),
    ("ws/var_newline", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("lit/strings", r"""{{ 'it\'s' }}|{{ "q\"q" }}|{{ 'tab\tnl\nuni\u00e9\x41' }}|{{ 'con' 'cat' }}""", {}),
    ("lit/numbers", "{{ 1 }} {{ -2 }} {{ 3.0 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1_000 }} {{ 2.5e-7 }} {{ 2 ** 62 }}", {}),
    ("lit/consts", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}", {}),
    ("lit/containers", "{{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': [1.5]} }} {{ (1, 2) | list }} {{ [] }} {{ {} }}", {}),
    ("op/arith", "{{ 7 + 2 }} {{ 7 - 9 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} "
                 "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1.5 * 2 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none }}", {}),
    ("op/compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'x' in 'xyz' }} "
                   "{{ 3 not in l }} {{ 'b' in d }} {{ [1,2] == [1,2] }} {{ true == 1 }}", V),
    ("op/logic", "{{ 1 and 'x' }}|{{ 0 or 'y' }}|{{ not 0 }}|{{ none or [] }}|{{ 'a' if n > 5 else 'b' }}|"
                 "{{ 'c' if false }}|{{ not n is odd }}", V),
    ("op/precedence", "{{ 1 + 2 * 3 - 4 / 2 }} {{ -2 ** 2 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ not 1 == 2 }}", {}),
    ("access/attr_item", "{{ d.b }} {{ d['a'][1] }} {{ d.a.0 }} {{ l[-1] }} {{ d.c.x }} {{ d.missing }}|"
                         "{{ users[1].name }} {{ s[0] }} {{ u[1] }}", V),
    ("access/slice", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[7:] }} {{ s[::-1] }} {{ u[1:4] }} "
                     "{{ l[5:] }} {{ s[-5:-1] }}", V),
    ("access/slice_steps", "{{ u[::2] }}|{{ u[::-2] }}|{{ u[1::3] }}|{{ u[-2::-3] }}|{{ u[3:1] }}|{{ u[1:3:-1] }}|{{ u[5:2:-1] }}|"
                           "{{ u[::-9223372036854775807 - 1] }}|{{ u[-1::9223372036854775807] }}|{{ 'añ€😀b'[::-1] }}|{{ 'añ€😀b'[1:4] }}|"
                           "{{ 'añ€😀b'[::2] }}|{{ ''[::-1] }}|{{ u[100:] }}|{{ u[-100:2] }}", V),
    ("test/types", "{% for x in [1, 2.5, 'a', none, true, [1], {'a': 1}] %}"
                   "{{ x is number }}{{ x is integer }}{{ x is float }}{{ x is string }}{{ x is none }}"
                   "{{ x is boolean }}{{ x is mapping }}{{ x is sequence }}{{ x is iterable }};{% endfor %}", {}),
    ("test/misc", "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} "
                  "{{ missing is defined }} {{ missing is undefined }} {{ s is defined }} {{ n is eq 7 }} "
                  "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ none is not none }} "
                  "{{ 'abc' is lower }} {{ 'aBc' is upper }} {{ 2 is in l }}", V),
    ("filter/string", "{{ '  pad  ' | trim }}|{{ s | upper }}|{{ s | lower }}|{{ 'hello big-world (x' | title }}|"
                      "{{ 'hELLO' | capitalize }}|{{ s | replace('l', 'L') }}|{{ s | replace('l', '', 2) }}|"
                      "{{ u | upper }}|{{ u | length }}|{{ s | reverse }}|{{ 'a b  c' | wordcount }}|{{ 'xxaxx' | trim('x') }}", V),
    ("filter/list", "{{ l | length }} {{ l | count }} {{ l | first }} {{ l | last }} {{ l | sort }} "
                    "{{ l | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} "
                    "{{ words | unique | list }} {{ l | reverse | list }} {{ l | join('-') }} {{ l | sum }} "
                    "{{ l | min }} {{ l | max }} {{ words | max }} {{ [1.5, -2] | map('abs') | list }} "
                    "{{ l | batch(2) | list }} {{ l | batch(2, 0) | list }}", V),
    ("filter/dict", "{{ d | length }} {{ d | list }} {% for k, v in d | items %}{{ k }}={{ v }};{% endfor %} "
                    "{{ d | dictsort }} {% for k, v in d.items() %}{{ k }}{% endfor %} {{ d.keys() | list }} "
                    "{{ d.values() | list }} {{ d.get('b') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", V),
    ("filter/attrs", "{{ users | map(attribute='name') | join(', ') }}|{{ users | selectattr('admin') | list | length }}|"
                     "{{ users | rejectattr('admin') | map(attribute='name') | list }}|"
                     "{{ users | selectattr('age', 'gt', 30) | map(attribute='name') | list }}|"
                     "{{ users | sort(attribute='age') | map(attribute='name') | join }}|"
                     "{{ users | map(attribute='admin', default='?') | list }}|{{ users | sum(attribute='age') }}|"
                     "{{ l | select('odd') | list }}|{{ l | reject('odd') | list }}|{{ [0, 1, '', 'a'] | select | list }}|"
                     "{{ users | max(attribute='age') | string }}", V),
    ("filter/default", "{{ missing | default('dflt') }}|{{ missing | d('x') }}|{{ empty | default('e') }}|"
                       "{{ empty | default('e', true) }}|{{ none | default('n') }}|{{ none | default('n', boolean=true) }}|"
                       "{{ missing | default }}", V),
    ("filter/convert", "{{ '42' | int + 1 }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} "
                       "{{ 3 | float }} {{ n | string ~ '!' }} {{ 2.567 | round(2) }} {{ 2.5 | round }} "
                       "{{ 2.1 | round(0, 'ceil') }} {{ -3 | abs }} {{ none | string }} {{ s | list | length }}", V),
    ("filter/tojson", "{{ d | tojson }}|{{ users[0] | tojson(indent=2) }}|{{ 'é\"\\n<>&' | tojson }}|"
                      "{{ [1.0, 1e20, none, true, 0.1] | tojson }}|{{ {} | tojson }}|{{ [] | tojson(indent=4) }}|"
                      "{{ d | tojson(sort_keys=true) }}", V),
    ("filter/escape_indent", "{{ '<a href=\"x\">&\\'</a>' | e }}|{{ 'x' | safe }}|{{ 'a\nb\n\nc' | indent }}|"
                             "{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(width='> ', blank=true) }}", {}),
    ("filter/block", "{% filter upper %}hello {{ s }}{% endfilter %}|{% filter replace('a', 'o') | title %}banana split{% endfilter %}", V),
    ("method/str", "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\n\nhi\n'.lstrip('\n') }}|{{ 'hi  '.rstrip() }}|"
                   "{{ 'a,b,,c'.split(',') }}|{{ ' a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ s.startswith('Hell') }}|"
                   "{{ s.endswith(('x', 'World')) }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.replace('o', '0') }}|"
                   "{{ 'hello wORLD' .title() }}|{{ 'hELLO' .capitalize() }}|{{ s.find('o') }}|{{ s.find('zz') }}|"
                   "{{ s.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ u.split('ö')[0] }}", V),
    ("method/strip_unicode", "{{ 'é'.strip('\\xa9') }}|{{ 'ééxé©'.rstrip('é©') }}|{{ '©©aé'.lstrip('©') }}|"
                             "{{ '«x»' | trim('«»') }}|{{ '日本日' .strip('日') }}", {}),
    ("filter/str_chars", "{{ 'héllo' | first }}{{ 'héllo' | last }}{{ '日本' | last }}{{ '' | first is defined }}|"
                         "{{ 'añb€😀' | reverse }}|{{ 'a-b c_d, é9 ½ x.y' | wordcount }}|{{ '' | wordcount }}|{{ '  ' | wordcount }}", {}),
    ("stmt/for_loop", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                      "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}];"
                      "{% endfor %}", V),
    ("stmt/for_filter_else", "{% for x in l if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}|"
                             "{% for x in [] %}no{% else %}empty{% endfor %}|{% for x in l if x > 9 %}{% else %}none{% endfor %}|"
                             "{% for c in 'héy' %}{{ c }}.{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|"
                             "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for x in missing %}{% endfor %}", V),
    ("stmt/break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}"
                            "{% endif %}{{ x }}{% endfor %}|{% for i in range(3) %}{% for j in range(3) %}"
                            "{% if j > i %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}", {}),
    ("filter/dictsort_args", "{{ {'b': 2, 'a': 1, 'C': 0} | dictsort(reverse=true) }}|{{ {'b': 2, 'a': 1, 'C': 0} | dictsort(by='value') }}|"
                            "{{ {'b': 2, 'a': 1, 'C': 0} | dictsort(true) }}|{{ {'b': 2, 'a': 1, 'C': 0} | dictsort(false, 'value', true) }}", {}),
    ("filter/indent_wide", "{{ 'a\nb' | indent(300) | length }}|{{ [1, [2]] | tojson(indent=100) | length }}", {}),
    ("stmt/range", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}", {}),
    ("stmt/set_scope", "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}|"
                       "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}|"
                       "{% set ns = namespace(total=0, items=[]) %}{% for i in l %}{% set ns.total = ns.total + i %}"
                       "{% endfor %}{{ ns.total }}|{% set t %}block {{ n }}{% endset %}{{ t | upper }}|"
                       "{% set acc = [] %}{% for i in l %}{% set acc = acc + [i * 2] %}{% endfor %}{{ acc }}", V),
    ("stmt/if_elif", "{% for v in [1, 5, 10, none] %}{% if v is none %}N{% elif v < 3 %}small{% elif v < 8 %}mid"
                     "{% else %}big{% endif %} {% endfor %}", {}),
    ("stmt/macro_call", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                        "{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}|"
                        "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                        "{% call wrap('b') %}bold {{ n }}{% endcall %}|"
                        "{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}|"
                        "{% macro va() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ va(1, 2, z=3) }}", V),
    ("stmt/generation", "{% for m in ['a', 'b'] %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}", {}),
    # printf-style formatting (`str % args` and the format filter), center, attr, repetition (tmpl8)
    ("format/percent", "{{ '%5s|%-5s|%.2s|%05d|%+d|% d|%x|%#x|%X|%o|%#o|%e|%E|%g|%G|%10.3f|%-8.2e|%c|%c|%%|%i|%u|%d' % "
                       "('ab', 'cd', 'xyz', 42, 5, 6, 255, 255, 255, 8, 8, 12345.678, 0.5, 0.00001234, 1e20, 3.14159, -2.5, "
                       "65, 'z', 7, 8, 3.99) }}|{{ '%s %r' % ([1, 'a'], {'k': 'v'}) }}|{{ '%s' % ((1, 2),) }}|"
                       "{{ '%(a)s %(b)05.1f' % {'a': 'x', 'b': 2.25} }}|{{ '%*d|%-*s|%.*f' % (5, 42, 4, 'a', 2, 3.14159) }}|"
                       "{{ 'abc' % [] }}|{{ '%s' % none }}|{{ '%5.1s|' % 'héllo' }}|{{ '%d%%' % 50 }}|{{ '%c' % 233 }}|"
                       "{{ '%5c|' % 'é' }}|{{ '%.0f %.0f' % (0.5, 1.5) }}|{{ '%d %s' % (true, true) }}|"
                       "{{ '%.3d|%+.2x|%-+6d|%06.2f|% .1e' % (5, 10, 3, -1.5, 12.0) }}|{{ '%#g|%#.0f|%#X' % (1.0, 2.0, 255) }}|"
                       "{{ '%x|%o|%d' % (-255, -8, -7) }}|{{ '%s' % missing }}|{{ '%-6r|' % 'q' }}|{{ 'n=%d' % n }}", V),
    ("format/filter", "{{ '%s|%d|%.3f' | format('a', 2, 1.5) }}|{{ '%(x)s-%(y)s' | format(x=1, y='b') }}|"
                      "{{ '%s' | format(x=1) }}|{{ 'plain' | format }}|{{ n | format }}|"
                      "{% for m in users %}{{ '%-5s is %3d' | format(m.name, m.age) }};{% endfor %}", V),
    ("filter/center_attr", "[{{ 'héllo' | center(11) }}][{{ 'ab' | center(5) }}][{{ 'abc' | center(6) }}][{{ 'abc' | center }}]"
                           "[{{ 'abcdef' | center(3) }}][{{ 7 | center(5) }}]|{{ d | attr('b') }}|{{ (d | attr('items'))() | list }}|"
                           "{{ (s | attr('upper'))() }}|{% set ns = namespace(k=3) %}{{ ns | attr('k') }}|{{ l | attr('x') is defined }}|"
                           "{% set cy = cycler(5, 6) %}{{ cy | attr('current') }}{{ (cy | attr('next'))() }}"
                           "{{ cy.current }}", V),
    ("op/repeat", "{{ [1, 2] * 3 }} {{ 2 * [0] }} {{ [1] * -1 }} {{ 'ab' * 0 }} {{ true * [1] }} {{ 3 * 'xy' }} "
                  "{{ ([none] * 2) | length }} {{ [[1]] * 2 }}", {}),
    # Python's int()/float() parsing in the int and float filters, and 64-bit integer literals (tmpl8)
    ("filter/int_exact", "{{ '9007199254740993' | int }} {{ '9223372036854775807' | int }} {{ '-9223372036854775808' | int }} "
                         "{{ '  42  ' | int }} {{ '1_000' | int }} {{ '+5' | int }} {{ '-0' | int }} {{ '42.9' | int }} "
                         "{{ '-42.9' | int }} {{ '1e3' | int }} {{ 'nan' | int }} {{ 'inf' | int }} {{ '0x1A' | int }} "
                         "{{ '0x1A' | int(base=16) }} {{ '1A' | int(0, 16) }} {{ '010' | int }} {{ '0b11' | int(base=0) }} "
                         "{{ none | int }} {{ true | int }} {{ '' | int }} {{ '1__0' | int }} {{ '_1' | int }} {{ '\t7\n' | int }} "
                         "{{ 2.5e18 | int }} {{ -2.9 | int }} {{ [1, 2] | int }} {{ '1.5e400' | int }} {{ '12abc' | int }} "
                         "{{ '0x_1f' | int(base=16) }} {{ 'z' | int(base=36) }} {{ '12' | int(base=1) }} {{ '007' | int(0, 0) }} "
                         "{{ '0o17' | int(0, 0) }} {{ '1.5' | int(base=16) }} {{ 'a' | int('x') }} {{ '9223372036854775807' | int + 0 }}", {}),
    ("filter/float_parse", "{{ 'nan' | float }} {{ '1_0.5' | float }} {{ ' inf ' | float }} {{ '0x10' | float }} "
                           "{{ 'Infinity' | float }} {{ '-nan' | float }} {{ '1e' | float }} {{ '.5' | float }} {{ '5.' | float }} "
                           "{{ '1_.5' | float }} {{ '-1E-3' | float }} {{ 3 | float('x') }} {{ 'a' | float('x') }} {{ true | float }} "
                           "{{ none | float }} {{ '  2.5\n' | float }}", {}),
    # the sign of an inf word is the string's own, not a previous value's (a stale buffer gave 'Infinity' after '-nan'
    # the sign of -inf)
    ("filter/float_sign_words", "{% for v in ['-nan', 'Infinity', '-inf', 'inf', '-nan', 'nan', '+inf', 'INF'] %}"
                                "[{{ v | float }}]{% endfor %}", {}),
    ("lit/int64", "{{ 9223372036854775807 }} {{ -9223372036854775807 }} {{ 4611686018427387904 + 4611686018427387903 }} {{ 0x1f }} "
                  "{{ 0X1F }} {{ 0o17 }} {{ 0o_17 }} {{ 0b101 }} {{ 0b1_01 }} {{ 00 }} {{ 1_0.5 }} {{ 1e1_0 }} {{ 1_000_000 }} "
                  "{{ 9007199254740993 == 9007199254740992.0 }} {{ 9007199254740992 == 9007199254740992.0 }}", {}),
    ("op/int_edges", "{{ [1, 2, 3][1::9223372036854775807] }}{{ 'abc'[1::9223372036854775807] }}"
                     "{{ [1, 2, 3][::-9223372036854775807] }}|{{ range(9223372036854775800, 9223372036854775807, 5) | list }}|"
                     "{{ 1 ** 9223372036854775807 }} {{ (-1) ** 9223372036854775807 }} {{ 2 ** 62 }} {{ 3 ** 39 }} {{ 0 ** 0 }}|"
                     "{{ -9223372036854775807 | abs }} {{ [9007199254740993, 0] | sum }} {{ [1, 2.5] | sum }}|"
                     "{{ 9223372036854775806 % 9223372036854775807 }} {{ -9223372036854775806 % 9223372036854775807 }} "
                     "{{ 7 % -3 }} {{ -7 % -3 }} {{ 9223372036854775806 // -9223372036854775807 }} {{ -6 % 3 }}", {}),
    ("lit/escapes", r"""{{ '\101\102' }}|{{ '\377' }}|{{ '\0' | length }}|{{ '\u00e9\U0001F600' }}|{{ '\x41' }}|{{ '\q' }}""", {}),
    # cycler / joiner / loop.cycle / recursive loops (tmpl8)
    ("global/cycler_joiner", "{% set cy = cycler('r', 'g', 'b') %}{% for x in range(4) %}{{ cy.next() }}{% endfor %}"
                             "{{ cy.current }}{{ cy.reset() }}{{ cy.current }}|{% set j = joiner('; ') %}"
                             "{% for x in l %}{{ j() }}{{ x }}{% endfor %}|{% set j2 = joiner() %}{% for x in l %}{{ j2() }}{{ x }}{% endfor %}|"
                             "{% set c1 = cycler(1) %}{{ c1.next() }}{{ c1.next() }}", V),
    ("stmt/loop_cycle", "{% for x in l %}{{ loop.cycle('odd', 'even') }} {% endfor %}|"
                        "{% for x in l if x > 1 %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}|"
                        "{% for m in users %}<tr class=\"{{ loop.cycle('x', 'y') }}\">{{ m.name }}</tr>{% endfor %}", V),
    ("stmt/recursive", "{% for item in tree recursive %}[{{ loop.depth }}/{{ loop.depth0 }}:{{ item.name }}"
                       "{% if item.kids %}{{ loop(item.kids) }}{% endif %}]{% endfor %}|"
                       "{% for item in tree recursive %}{{ loop.index }}{{ item.name }}{% if item.kids %}({{ loop(item.kids) | upper }})"
                       "{% endif %}{% if not loop.last %},{% endif %}{% endfor %}|"
                       "{% for item in tree if item.name != 'e' recursive %}{{ item.name }}{{ loop.length }}"
                       "{% if item.kids %}<{{ loop(item.kids) }}>{% endif %}{% endfor %}|"
                       "{% for item in tree recursive %}{% for k in [1] %}{{ loop.depth }}{% endfor %}{{ loop.depth }}"
                       "{% if item.kids %}{{ loop(item.kids) }}{% endif %}{% endfor %}|"
                       "{% for item in [] recursive %}x{% else %}empty{% endfor %}",
     {"tree": [{"name": "a", "kids": [{"name": "b", "kids": [{"name": "c"}]}, {"name": "d"}]}, {"name": "e"}]}),
    # loop.changed, str methods, filters, calls (tmpl9)
    ("stmt/loop_changed", "{% for u in users | sort(attribute='age') %}{% if loop.changed(u.admin) %}[{{ u.admin }}]{% endif %}"
                          "{{ u.name }} {% endfor %}|{% for x in [1, 1, 2, 1.0, 1] %}{{ loop.changed(x) }}{% endfor %}|"
                          "{% for x in [1, 2] %}{{ loop.changed() }}{{ loop.changed() }}{% endfor %}|"
                          "{% for a, b in [[1, 'x'], [1, 'y'], [1, 'y']] %}{{ loop.changed(a, b) }}{% endfor %}|"
                          "{% for x in [1, 2] %}{% for y in [1, 1] %}{{ loop.changed(y) }}{% endfor %}{% endfor %}|"
                          "{% for item in tree recursive %}{{ loop.changed(item.k) }}{{ loop.depth }}{% if item.kids %}"
                          "({{ loop(item.kids) }}){% endif %}{% endfor %}",
     dict(V, tree=[{"k": 1, "kids": [{"k": 1}, {"k": 2}]}, {"k": 1}])),
    ("method/str_pad", "[{{ 'ab'.ljust(5) }}][{{ 'ab'.ljust(5, '*') }}][{{ 'ab'.rjust(5, 'é') }}][{{ 'héllo'.center(10, '-') }}]"
                       "[{{ 'abc'.center(6) }}][{{ 'ab'.center(5) }}][{{ 'abcdef'.ljust(3) }}][{{ '42'.zfill(5) }}]"
                       "[{{ '-42'.zfill(6) }}][{{ '+7'.zfill(1) }}][{{ ''.zfill(3) }}][{{ 'x'.rjust(-4) }}][{{ 'ab'.ljust(true, 'z') }}]"
                       "[{{ 'a\tbc\tdef\n\tg'.expandtabs() }}][{{ 'a\tb'.expandtabs(4) }}][{{ 'a\tb'.expandtabs(0) }}]"
                       "[{{ 'é\tx\r\ty'.expandtabs(tabsize=3) }}]", {}),
    ("method/str_search", "{{ s.find('o', 5) }} {{ s.find('o', 5, 8) }} {{ s.rfind('o') }} {{ s.rfind('o', 0, 6) }} "
                          "{{ s.index('W') }} {{ s.rindex('l') }} {{ s.count('l', 4) }} {{ s.count('') }} {{ 'abc'.count('', 1) }} "
                          "{{ 'abc'.find('', 3) }} {{ 'abc'.find('', 4) }} {{ 'abc'.count('', 4) }} {{ u.find('ö') }} "
                          "{{ u.rfind('ü', -12) }} {{ u.find('l', -5, -1) }} {{ 'aaaa'.count('aa') }} {{ 'aaaa'.rfind('aa') }} "
                          "{{ s.find('o', none, none) }} {{ ''.rfind('') }} {{ 'abc'.rfind('', 1, 2) }} {{ s.find('l', -100, 100) }}", V),
    ("method/str_partition", "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('=') }} "
                             "{{ 'abc'.rpartition('=') }} {% set k, sep, v = 'key: value'.partition(': ') %}{{ v }}|{{ k }} "
                             "{{ 'x<sep>y'.partition('<sep>')[2] }} {{ ('a=b'.partition('=') | list) }}", {}),
    ("method/str_lines", "{{ 'a\nb\r\nc\rd'.splitlines() }} {{ 'a\nb\n'.splitlines() }} {{ 'a\nb\n'.splitlines(true) }} "
                         "{{ ''.splitlines() }} {{ '\n'.splitlines() }} {{ 'x\x0by\x0cz\x1cw\u2028v\x85u'.splitlines() }} "
                         "{{ 'a\r\n\r\nb'.splitlines(keepends=true) }} {{ 'one'.splitlines() }}", {}),
    ("method/str_class", "{% for t in ['123', '', '½', '²', '١٢', 'abc', 'aBc', 'ABC', 'é', 'A1', ' \t\n', '\xa0\u3000', "
                         "'a b', 'ª', 'Ⅻ', 'ǅ', '1a', 'x_y', 'ⓐ', '\u0660'] %}"
                         "{{ t.isdigit() | int }}{{ t.isdecimal() | int }}{{ t.isalpha() | int }}{{ t.isalnum() | int }}"
                         "{{ t.isspace() | int }}{{ t.islower() | int }}{{ t.isupper() | int }} {% endfor %}", {}),
    ("method/str_misc", "{{ 'Straße'.casefold() }} {{ 'ΣΑΣ'.casefold() }} {{ 'ǅ'.casefold() }} {{ 'ﬁ'.casefold() }} "
                        "{{ 'ABC'.casefold() == 'abc' }} {{ 'prefix-body'.removeprefix('prefix-') }} {{ 'body.txt'.removesuffix('.txt') }} "
                        "{{ 'abc'.removeprefix('x') }} {{ 'abc'.removesuffix('') }} {{ 'aa'.removeprefix('aaa') }}", {}),
    ("method/str_rsplit", "{{ 'a,b,c'.rsplit(',') }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a,b,c'.rsplit(',', maxsplit=0) }} "
                          "{{ '  a  b c  '.rsplit() }} {{ '  a  b c  '.rsplit(none, 1) }} {{ '  a  b c  '.rsplit(maxsplit=2) }} "
                          "{{ 'a::b::::c'.rsplit('::') }} {{ 'aaaa'.rsplit('aa', 1) }} {{ 'aaa'.rsplit('aa') }} {{ ''.rsplit(',') }} "
                          "{{ ''.rsplit() }} {{ 'x\xa0y\u3000z'.rsplit() }} {{ 'héllo wörld'.rsplit('ö') }} {{ 'a b'.rsplit(sep=' ') }} "
                          "{{ 'k=v=w'.rsplit('=', -1) }} {{ 'a.b.c'.rsplit('.', true) }} "
                          "{{ 'model.layers.0.weight'.rsplit('.', 1)[0] }} {{ 'a b  '.rsplit(none, 0) }}", {}),
    ("method/str_format", "{{ '{} and {}'.format('x', 2) }}|{{ '{1}{0}{1}'.format('a', 'b') }}|{{ '{name}: {n}'.format(name='k', n=7) }}|"
                          "{{ '{{literal}} {}'.format(1) }}|{{ '{0[a]} {0[b][1]} {1.x} {2[0]}'.format(d, {'x': 5}, l) }}|"
                          "{{ '{!r} {!s} {!a}'.format('é', 'é', 'é😀') }}|{{ '{0!r:>8}'.format('ab') }}|{{ '{}'.format(none) }} {{ '{}'.format(true) }} "
                          "{{ '{}'.format([1, 'a']) }} {{ '{}'.format({'k': none}) }} {{ '{}'.format(2.5) }} {{ '{}'.format(1e16) }}|"
                          "{{ '{:>{w}}|{:^{w}.{p}}'.format('ab', 'cdefg', w=6, p=2) }}|{{ '{0[1]}'.format('xyz') }}|"
                          "{{ '{a}-{b}'.format_map({'a': 1, 'b': 'two'}) }}|{{ '{x.nope}|{x[k]}'.format(x={'k': 3}) }}|"
                          "{{ '{}'.format(*l) }}|{{ '{0}{0}{z}'.format(*['pos'], **{'z': 'kw'}) }}|{{ 'no fields'.format(1, 2, z=3) }}|"
                          "[{{ '{0.__class__}{0._x}'.format('x') }}]", V),
    ("method/str_format_spec", "{% for sp in ['', '5', '<5', '>5', '^6', '*^7', 'é>4', '05', '.2', '<5.1', '=5'] %}"
                               "[{{ ('{:' ~ sp ~ '}').format('abc') if sp != '=5' else '' }}]{% endfor %}|"
                               "{% for sp in ['', 'd', '5', '<5', '^6', '+', ' ', '-', '05', '+06', '=+8', ',', '_', '010,', '08,', '09_',"
                               " 'b', '#b', 'o', '#o', 'x', '#X', '#010_x', '_b', 'n', 'e', '.2f', '%', '*>+9,d', '0=8'] %}"
                               "[{{ ('{:' ~ sp ~ '}').format(-1234) }}/{{ ('{:' ~ sp ~ '}').format(255) }}]{% endfor %}|"
                               "{% for sp in ['', '.3', '.1', '10.2f', 'e', '.2E', 'g', '.3g', 'G', '%', '.1%', '+.3', ',.2f', '_.1f', '010,.1f',"
                               " '#.0f', '#g', '.0e', 'n', 'F', '^12.4e', 'z.1f', '08.2f', '.20', '10'] %}"
                               "[{{ ('{:' ~ sp ~ '}').format(1234.5678) }}/{{ ('{:' ~ sp ~ '}').format(-0.00001234) }}/"
                               "{{ ('{:' ~ sp ~ '}').format(100.0) }}/{{ ('{:' ~ sp ~ '}').format(-0.0) }}/{{ ('{:' ~ sp ~ '}').format(big * 10) }}]{% endfor %}|"
                               "{{ '{:>5}|{:d}|{:x}|{:5}|{}'.format(true, false, true, false, true) }}|{{ '{:c}{:c}'.format(65, 233) }}|"
                               "{{ '{:e}|{:%}|{:.2%}'.format(5, 5, 7) }}|{{ '{:,}'.format(1234567.891) }}|{{ '{:.1f}'.format(0.25) }}|"
                               "{{ '{:.0f} {:.0f}'.format(0.5, 1.5) }}|{{ '{:g}'.format(1e-5) }}|{{ '{:.3}'.format(123.0) }}|{{ '{:.3}'.format(1e20) }}", {"big": 1e308}),
    ("method/str_class2", "{% for t in ['Hello World', 'Hello world', 'HELLO', '', 'ǅungla', 'Ab1 Cd', 'a', '123', 'Ⅻ', '½', '一二', '٣', "
                          "'1.5', '²', 'abc', '\t', 'é', '\x7f', '\u200b', 'a b', '\xa0', 'ª'] %}"
                          "{{ t.istitle() | int }}{{ t.isnumeric() | int }}{{ t.isascii() | int }}{{ t.isprintable() | int }} {% endfor %}", {}),
    ("case/full_mapping", "{{ 'straße ﬁx ŉ ǰ ΐ և'.upper() }}|{{ 'İstanbul'.lower() }}|{{ 'ΟΔΟΣ ΟΔΟΣ. ΑΣ\u0301 Σ ΑΣΑ Α.Σ'.lower() }}|"
                          "{{ 'ﬁsh straße ǆemal ΣΑΣ'.title() }}|{{ 'ßig ΣΑΣ'.capitalize() }}|{{ 'Straße ǅ ΑΣ İ aBc'.swapcase() }}|"
                          "{{ 'straße ﬁx' | upper }}|{{ 'ΟΔΟΣ' | lower }}|{{ 'ﬁsh-straße (ΑΣ) [ΣΑΣ x\u3000ΑΣ\xa0bΣ' | title }}|"
                          "{{ 'ßig ΣΑΣ' | capitalize }}|{{ 'hello ʰworld ⓐb' .title() }}|{{ 'abc' is lower }} {{ '123' is lower }} "
                          "{{ 'ABC1' is upper }} {{ '' is upper }} {{ 42 is lower }} {{ ['a'] is lower }} {{ 'Ab' is upper }} {{ none is upper }}", {}),
    ("method/unicode_space", "[{{ '\u3000a\xa0'.strip() }}][{{ '\u3000a\xa0' | trim }}][{{ 'a\u3000b\xa0c  d'.split() }}][{{ '\x1ca\x1f'.strip() }}]"
                             "[{{ '\u2003x\u2003'.lstrip() }}][{{ '\u2003x\u2003'.rstrip() }}][{{ ' a\u3000b\u3000 c '.split(none, 1) }}]"
                             "[{{ '\u3000 12 \xa0' | int }}][{{ ' 1.5\u2003' | float }}][{{ '\u3000a b' | wordcount }}][{{ 'é\u3000' .strip() }}]", {}),
    ("value/repr_unicode", "{{ ['\\xa0', '\\u3000', 'é', '\\u200b', '\\U0001F600', '\\x85', '\\ue000', '\\U000e0001', '\\u2028', "
                           "'a\\u0301', '\\x7f\\x1b', '\\U0010ffff', '\\u0378'] }}|{{ {'k\\xa0': '\\u00ad'} }}|{{ ('\\u3000',) }}", {}),
    ("filter/round_python", "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ -2.5 | round(0, 'floor') }} {{ 7 | round }} {{ true | round }} "
                            "{{ 1250 | round(-2) }} {{ 1350 | round(-2) }} {{ -1250 | round(-2) }} {{ -1251 | round(-2) }} {{ 5 | round(-1) }} {{ 15 | round(-1) }} "
                            "{{ 1250.0 | round(-2) }} {{ 1250.0001 | round(-2) }} {{ -1250.0 | round(-2) }} {{ 999.9 | round(-3) }} {{ 12345.678 | round(-400) }} "
                            "{{ 1e300 | round(-299) }} {{ 0.125 | round(2) }} {{ 0.375 | round(2) }} {{ 1.23456789 | round(400) }} {{ -0.4 | round }} "
                            "{{ 2.5 | round(0, 'ceil') }} {{ 1234 | round(-2, 'ceil') }} {{ 9007199254740993 | round(-1) }} {{ 1e-320 | round(320) }} {{ 4.35 | round(1) }}", {}),
    ("expr/tuple_list_equal", "{{ (1, 2) == [1, 2] }} {{ (1, 2) == (1, 2) }} {{ [1, 2] in [(1, 2)] }} {{ (1, 2) in [(1, 2)] }} {{ [[1]] == [(1,)] }} "
                              "{% set d = {'a': 1} %}{{ d.items() | list == [('a', 1)] }} {{ d | dictsort == [('a', 1)] }} {{ (d | dictsort)[0] == ['a', 1] }} "
                              "{{ 'a=b'.partition('=') == ('a', '=', 'b') }} {{ 'a b'.split() == ('a', 'b') }} "
                              "{% for g in [{'x': 1}] | groupby('x') %}{{ g == (1, [{'x': 1}]) }}{% endfor %} "
                              "{% macro f() %}{{ varargs == (1, 2) }} {{ varargs == [1, 2] }}{% endmacro %}{{ f(1, 2) }} {{ ((1, 2) | list) == [1, 2] }}", {}),
    ("filter/indent_lines", "[{{ 'a\\nb' | indent(2) }}][{{ 'a\\nb' | indent(2, first=true) }}][{{ 'a\\nb' | indent(2, blank=true) }}][{{ 'a\\nb' | indent(2, true, true) }}]"
                          "[{{ 'a\\n' | indent(2) }}][{{ 'a\\n' | indent(2, first=true) }}][{{ 'a\\n' | indent(2, blank=true) }}][{{ 'a\\n' | indent(2, true, true) }}]"
                          "[{{ '' | indent(2) }}][{{ '' | indent(2, first=true) }}][{{ '' | indent(2, blank=true) }}][{{ '' | indent(2, true, true) }}]"
                          "[{{ 'a\\r\\nb\\rc\\x0bd\\u2028e\\x85f\\x1cg' | indent(2) }}][{{ 'a\\r\\nb\\rc\\x0bd\\u2028e\\x85f\\x1cg' | indent(2, first=true) }}][{{ 'a\\r\\nb\\rc\\x0bd\\u2028e\\x85f\\x1cg' | indent(2, blank=true) }}][{{ 'a\\r\\nb\\rc\\x0bd\\u2028e\\x85f\\x1cg' | indent(2, true, true) }}]"
                          "[{{ 'x\\n\\n' | indent(2) }}][{{ 'x\\n\\n' | indent(2, first=true) }}][{{ 'x\\n\\n' | indent(2, blank=true) }}][{{ 'x\\n\\n' | indent(2, true, true) }}]"
                          "[{{ 'a\\r' | indent(2) }}][{{ 'a\\r' | indent(2, first=true) }}][{{ 'a\\r' | indent(2, blank=true) }}][{{ 'a\\r' | indent(2, true, true) }}]", {}),
    ("method/str_startswith_range", "{{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.startswith('b', 1) }} {{ 'abc'.endswith('b', 0, 2) }} {{ 'abc'.startswith('', 3) }} "
                                    "{{ 'abc'.startswith('', 4) }} {{ 'abc'.startswith('', 2, 1) }} {{ 'héllo'.startswith('llo', 2) }} {{ 'héllo'.endswith('é', -5, -3) }} "
                                    "{{ 'abc'.endswith(('c', 'x'), -1) }} {{ 'abc'.startswith('a', none, none) }} {{ 'abc'.startswith('abc', -10, 10) }} {{ 'abc'.endswith('', 5) }}", {}),
    ("expr/concat_precedence", "{{ 'a' ~ 2 * 3 ~ 'b' }} {{ 'x' ~ 'y' + 'z' }} {{ 'a' ~ 'b' == 'ab' }} {{ 1 ~ 2 ~ 3 }} {{ 2 * 3 ~ 4 }} {{ 'a' ~ -1 }} "
                               "{{ 'n=' ~ 10 // 3 ~ ';' }} {{ 'a' ~ 'b' in 'xaby' }} {{ ('a' ~ 1) + 'b' }} {{ '%r|%a|%5a|%-8a|' % ('é', 'é😀\\n', 'x', 'ü') }}", {}),
    ("filter/truncate", "[{{ 'Hello big wide world' | truncate(9) }}][{{ 'Hello big wide world' | truncate(9, true) }}]"
                        "[{{ 'Hello big wide world' | truncate(17) }}][{{ 'Hello big wide world' | truncate(15) }}]"
                        "[{{ 'Hello big wide world' | truncate(12, end='…') }}][{{ 'abcdefghijk' | truncate(5, leeway=0) }}]"
                        "[{{ 'abcdefghijk' | truncate(5) }}][{{ 'héllo wörld ünïcode' | truncate(10, leeway=0) }}]"
                        "[{{ ('x' * 300) | truncate | length }}][{{ 'a b c d e f' | truncate(3, false, '', 0) }}]"
                        "[{{ 'abc def' | truncate(3, killwords=false, end='...', leeway=0) }}][{{ '' | truncate(3) }}]", {}),
    ("filter/wordwrap", "[{{ 'The quick brown fox jumps over the lazy dog' | wordwrap(10) }}]"
                        "[{{ 'a well-known long-established multi-part-word test' | wordwrap(12) }}]"
                        "[{{ 'a well-known long-established' | wordwrap(12, break_on_hyphens=false) }}]"
                        "[{{ 'supercalifragilistic and more' | wordwrap(6) }}][{{ 'supercalifragilistic x' | wordwrap(6, false) }}]"
                        "[{{ 'one two\n\nthree   four  five' | wordwrap(9) }}][{{ 'a b c d' | wordwrap(3, wrapstring='<br>') }}]"
                        "[{{ '  lead  and trail  ' | wordwrap(6) }}][{{ 'x--y -- z---w a---' | wordwrap(3) }}]"
                        "[{{ 'ab-cd-ef-gh' | wordwrap(5) }}][{{ 'héllo wörld ünïcode ça' | wordwrap(7) }}][{{ '' | wordwrap(5) }}]"
                        "[{{ 'tabs\there\tand there' | wordwrap(8) }}][{{ 'a\r\nb c d e f g' | wordwrap(3) }}]"
                        "[{{ 'word-with-hyphens-everywhere-in-it' | wordwrap(10) }}][{{ '---- a' | wordwrap(2) }}]", {}),
    ("filter/groupby", "{% for g in users | groupby('admin', default=false) %}{{ g.grouper }}:{{ g.list | map(attribute='name') | join(',') }};{% endfor %}|"
                       "{% for key, items in [{'c': 'B', 'n': 1}, {'c': 'a', 'n': 2}, {'c': 'b', 'n': 3}] | groupby('c') %}"
                       "{{ key }}={{ items | map(attribute='n') | list }};{% endfor %}|"
                       "{% for key, items in [{'c': 'B', 'n': 1}, {'c': 'a', 'n': 2}, {'c': 'b', 'n': 3}] | groupby('c', case_sensitive=true) %}"
                       "{{ key }}={{ items | map(attribute='n') | list }};{% endfor %}|"
                       "{{ [[1, 'a'], [2, 'b'], [1, 'c']] | groupby(0) }}|{{ [{'a': {'b': 2}}, {'a': {'b': 1}}] | groupby('a.b') | map(attribute='grouper') | list }}|"
                       "{{ (users | groupby('age') | first).list[0].name }}|{{ [] | groupby('x') }}", V),
    ("filter/case_fold_unicode", "{% for key, items in [{'c': 'Émile', 'n': 1}, {'c': 'émile', 'n': 2}, {'c': 'STRASSE', 'n': 3}, {'c': 'straße', 'n': 4}, "
                                 "{'c': 'ΣΑΣ', 'n': 5}, {'c': 'σας', 'n': 6}, {'c': 'Zed', 'n': 7}] | groupby('c') %}{{ key }}={{ items | map(attribute='n') | list }};{% endfor %}|"
                                 "{{ ['b', 'Ä', 'a', 'ä', 'Z', 'é', 'E'] | sort }}|{{ ['Ä', 'ä', 'Ǆ', 'ǆ', 'ǅ', 'x'] | unique | list }}|"
                                 "{{ {'Éa': 1, 'éb': 2, 'Z': 3} | dictsort }}|{{ ['ä', 'B', 'Á'] | max }}|{{ ['ä', 'B', 'Á'] | min }}|"
                                 "{{ [['B'], ['a']] | sort }}|{{ ['İ', 'i̇', 'I'] | unique | list }}", {}),
    ("filter/slice", "{{ l | slice(2) | list }}|{{ range(10) | slice(3) | list }}|{{ range(10) | slice(3, 'x') | list }}|"
                     "{{ [1] | slice(3) | list }}|{{ [1] | slice(3, 0) | list }}|{{ range(4) | slice(-1) | list }}|{{ 'abcde' | slice(2) | list }}|"
                     "{% for col in range(7) | slice(3) %}[{{ col | join(' ') }}]{% endfor %}", V),
    ("filter/striptags", "[{{ '<p>Hello <b>World</b></p>' | striptags }}][{{ 'a <!-- c <b> -->b' | striptags }}][{{ '  x \n\t y  ' | striptags }}]"
                         "[{{ 'a < b' | striptags }}][{{ 'a <b c' | striptags }}][{{ 'x<!--y' | striptags }}][{{ '<!--> a -->b' | striptags }}]"
                         "[{{ '&amp; &lt;x&gt; &#65;&#x42; &quot;q&quot; &apos;' | striptags }}][{{ '<<b>b>' | striptags }}][{{ '<!<!-- x -->-- y -->z' | striptags }}]"
                         "[{{ 42 | striptags }}][{{ 'é\xa0 ü' | striptags }}][{{ 'a&b' | striptags }}]", {}),
    ("filter/striptags_entities", "[{{ '&eacute;&Eacute; &hellip; &rarr;&nbsp;x &NotEqualTilde; &fjlig; &amp &ampx &notit; &notin; &copy2' | striptags }}]"
                                  "[{{ '&#128;&#x81;&#150;&#0;&#13;&#x110000;&#xD800;&#1;&#x7f;&#xFFFE;&#12345678901234567890;&#65' | striptags }}]"
                                  "[{{ '&; &#; &#x; &# 1 &unknown; &lt&gt &LT;&GT &abcdefghijklmnopqrstuvwxyzabcdefghij; &é; &ampé' | striptags }}]"
                                  "[{{ '<b>&lt;b&gt;</b> a&amp;b &quot;q&quot; &apos;' | striptags }}][{{ 'x &AMP;y &Amp; &AElig &aeligx' | striptags }}]", {}),
    ("filter/urlencode", "{{ 'a b/c?d=é&' | urlencode }}|{{ {'q': 'a b', 'n': 1, 'x': 'é/&'} | urlencode }}|"
                         "{{ [['k', 'v 1'], ['z', none]] | urlencode }}|{{ 42 | urlencode }}|{{ '~_.-' | urlencode }}|{{ {} | urlencode }}", {}),
    ("filter/filesizeformat", "{% for v in [0, 1, 2, 999, 1000, 1023, 1024, 1500, 999999, 1000000, 123456789, 10**12, 10**15, 10**18,"
                              " 9223372036854775807, 1e21, 1.0, 1.5, 999.9, 999.99999, 1e24, 999999999999999983222784.0,"
                              " 1e27, 1e30, 1e308, -5, -0.5, -1.5, -1e20, true, false, '1500', ' 2_048 ', '1e6', 'inf', 'nan',"
                              " '-nan', 'Infinity', 1180591620717411303424.0, 1208925819614629174706176.0] %}[{{ v | filesizeformat }}|{{ v | filesizeformat(true) }}"
                              "|{{ v | filesizeformat(binary=1) }}]{% endfor %}[{{ 1024 | filesizeformat('') }}]"
                              "[{{ (2**60) | filesizeformat(true) }}][{{ big | filesizeformat }}]", {"big": 1e300}),
    ("filter/tojson_args", "{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(indent=1, separators=(',', ' = ')) }}|"
                           "{{ 'é😀\\u00ff' | tojson(ensure_ascii=true) }}|{{ {'ключ': 'значение'} | tojson(true) }}|"
                           "{{ l | tojson(false, 2) }}|{{ d | tojson(false, none, none, true) }}|{{ [1, [2]] | tojson(separators=['; ', '=']) }}|"
                           "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}", V),
    ("filter/tojson_indent_str", "{{ d | tojson(indent='  ') }}|{{ l | tojson(indent='\t') }}|{{ d | tojson(indent='') }}|"
                                 "{{ {'a': [1, {'b': []}]} | tojson(indent='->', separators=(',', ': ')) }}|{{ [] | tojson(indent='x') }}|"
                                 "{{ [1] | tojson(indent=true) }}|{{ [1] | tojson(indent=-1) }}|{{ [1, 2] | tojson(indent='é') }}", V),
    ("call/star_args", "{% macro f(a, b=2) %}{{ a }}/{{ b }}/{{ varargs }}/{{ kwargs }}{% endmacro %}"
                       "[{{ f(*[1, 2, 3]) }}][{{ f(**{'a': 5}) }}][{{ f(0, *[9], z=1, **{'y': 2}) }}][{{ f(*'xy') }}]"
                       "[{{ f(*(1,), b=7) }}][{{ f(**{'b': 3, 'a': 4, 'q': 5}) }}][{{ f(*[], **{}) }}]"
                       "[{{ l | join(*['-']) }}][{{ l | sort(**{'reverse': true}) }}][{{ '%s=%s' | format(*['k', 'v']) }}]"
                       "[{{ 3 is divisibleby(*[3]) }}][{{ range(*[1, 7, 2]) | list }}][{{ dict(b=2, **{'a': 1}) }}]"
                       "[{{ namespace(**{'x': 1}).x }}]", V),
    ("macro/arguments", "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ a is defined }}]{% endmacro %}{{ m() }}{{ m(b=1) }}{{ m(1, b=2) }}{{ m(b=3, a=4) }}"
                        "{% macro k(a) %}{{ a }}{{ kwargs }}{{ varargs }}{% endmacro %}{{ k(1, a=2) }}{{ k(1, 2, 3, z=4) }}{{ k(z=1) }}"
                        "{% macro v(a) %}{{ a }}{{ varargs | list }}{% endmacro %}{{ v(1, 2, 3) }}"
                        "{% macro n() %}{% macro inner() %}{{ kwargs }}{% endmacro %}{{ inner(q=1) }}{% endmacro %}{{ n(p=2) }}"
                        "{% macro p(kwargs) %}{{ kwargs }}{% endmacro %}{{ p(5) }}"
                        "{% macro c() %}<{{ caller() }}>{% endmacro %}{% call c() %}body{% endcall %}"
                        "{% macro c2(x) %}<{{ caller(x) }}>{% endmacro %}{% call(y) c2(7) %}{{ y }}{% endcall %}", {}),
    ("lit/dict_keys", "{% set d = {1: 'one', 2.5: 'f', true: 't', none: 'n', 'a': 'A', 2.0: 'two'} %}{{ d }}|{{ d[1] }}{{ d[true] }}"
                      "{{ d[1.0] }}{{ d[none] }}{{ d[2] }}{{ d[2.5] }}{{ d['a'] }}{{ d[3] is defined }}|{{ d | length }}|"
                      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys() | list }}|{{ 1 in d }} {{ 7 in d }} {{ none in d }}|"
                      "{{ d | tojson }}|{{ d.get(2.5) }} {{ d.get(9, 'x') }}|{{ {0: 'a', false: 'b'} }}|{{ {false: 'a', 0.0: 'b'} }}|"
                      "{{ {1: 'x'} == {1.0: 'x'} }}|{% for k in {3: 'c', 1: 'a'} %}{{ k + 1 }}{% endfor %}|"
                      "{{ {-0.0: 1, 0: 2} }}|{{ {1e20: 'big', 0.1: 'tenth'} }}|{{ {1: 'a'} | list }}|{{ [{0: 'z'}] | map(attribute='0') | list }}", {}),
    ("undefined/filters9", "[{{ missing | truncate }}][{{ missing | groupby('a') }}][{{ missing | slice(2) | list }}]"
                           "[{{ missing | striptags }}][{{ missing | urlencode }}]", {}),
    ("undefined/lenient", "[{{ missing }}][{{ missing | length }}][{{ missing ~ 'x' }}][{{ d.nope }}]"
                          "[{{ missing is none }}][{{ missing == none }}][{% if missing %}t{% else %}f{% endif %}]", V),
    ("filter/keyword_args", "[{{ 'aba' | trim(chars='a') }}][{{ 'a' | center(width=5) }}][{{ [3, 1, 2] | sort(reverse=true) }}]"
                            "[{{ 'xx' | replace('x', 'y', count=1) }}][{{ x | default(default_value='d') }}]"
                            "[{{ [1, 2] | join(d='-') }}][{{ 'a b' | wordcount }}][{{ 2.567 | round(precision=1) }}]"
                            "[{{ {'a': 1} | tojson(indent=1) }}][{{ 'abc' | truncate(length=2, end='', leeway=0) }}]"
                            "[{{ [1, 2, 3] | batch(linecount=2) | list }}][{{ [1, 2] | select('divisibleby', 2) | list }}]"
                            "[{{ [1, 2, 3] | batch(2, fill_with=0) | list }}][{{ 'abc' | replace(old='b', new='x') }}]"
                            "[{{ 4 is divisibleby(num=2) }} {{ 1 is in(seq=[1]) }} {{ none is sameas(other=none) }}]"
                            "[{{ [{'a': 2}, {'a': 1}] | sum(attribute='a', start=1) }}][{{ 'ab cd' | wordwrap(width=2, wrapstring='|') }}]"
                            "[{{ '12' | int(base=16) }}][{{ 'x' | float(default=1.5) }}][{{ 'a\nb' | indent(width=1, first=true) }}]", {}),
    # jinja2 Macro attributes: name, arguments (a tuple), catch_kwargs / catch_varargs / caller; others undefined
    ("macro/attrs", "{% macro m(a, b=1) %}{% endmacro %}[{{ m.name }}][{{ m.arguments }}][{{ m.arguments | length }}]"
                    "[{{ m.catch_kwargs }}][{{ m.catch_varargs }}][{{ m.caller }}][{{ m.nope }}][{{ m['name'] }}]"
                    "{% macro v() %}{{ varargs }}{{ kwargs }}{{ caller() }}{% endmacro %}[{{ v.name | upper }}][{{ v.arguments }}]"
                    "[{{ v.catch_kwargs }}{{ v.catch_varargs }}{{ v.caller }}][{{ m.arguments[0] }}{{ m.arguments is sequence }}]"
                    "{% macro w(x) %}[{{ caller.name }}][{{ caller.arguments }}]{% endmacro %}{% call(p, q) w(1) %}{% endcall %}"
                    "{% call w(1) %}{% endcall %}{% for a in m.arguments %}{{ a }};{% endfor %}"
                    "{% macro one(x) %}{% endmacro %}[{{ one.arguments }}]", {}),
    # {% with %}: values read the enclosing scope (b = a + 1 sees the outer a), set inside stays inside, tuple targets
    ("stmt/with", "{% set a = 5 %}{% with a = 1, b = a + 1 %}{{ a }},{{ b }}{% set c = 3 %}{{ c }}{% endwith %}[{{ a }}{{ c }}]"
                  "{% with %}e{% endwith %}{% with x, y = [1, 2] %}{{ x }}{{ y }}{% endwith %}"
                  "{% with (p, q) = ('a', 'b') %}{{ q }}{{ p }}{% endwith %}"
                  "{% for i in [1, 2] %}{% with a = i * 10 %}{% set i = 9 %}{{ a }}{{ i }}{% endwith %}{{ i }}"
                  "{% if i == 1 %}{% with %}{% continue %}{% endwith %}{% endif %}!{% endfor %}"
                  "{% set ns = namespace(n=0) %}{% with m = ns %}{% set m.n = 4 %}{% endwith %}{{ ns.n }}"
                  "{% with z = l | length %}{{ z }}{% endwith %}"
                  "{% with a = 7 %}{% with b = a %}{{ a }}{{ b }}{% endwith %}{% endwith %}", V),
]

ERRORS = [
    ("error/raise", "{% if messages | length > 1 %}{{ raise_exception('Too many messages: ' ~ messages | length) }}{% endif %}ok",
     {"messages": [1, 2, 3]}),
    ("error/syntax_unclosed_if", "line one\n{% if x %}\nbody\n", {}),
    ("error/syntax_bad_token", "ok\n{{ 1 + }}\n", {}),
    ("error/syntax_unknown_tag", "a\nb\n  {% frobnicate %}\n", {}),
    ("error/syntax_unclosed_var", "{{ x ", {}),
    ("error/syntax_stray_end", "x\n{% endfor %}", {}),
    # the sandbox: in-place list/dict methods are refused (SecurityError), as transformers' environment does
    ("error/sandbox_list_append", "{% set acc = [] %}{% for i in l %}{% set _ = acc.append(i) %}{% endfor %}{{ acc }}",
     {"l": [1, 2]}),
    ("error/sandbox_list_pop", "{{ l.pop() }}", {"l": [1, 2]}),
    # printf-style formatting errors (TypeError / KeyError in Python) and the int filter on a float infinity
    ("error/format_type", "{{ '%d' % 'x' }}", {}),
    ("error/format_int_float", "{{ '%x' % 2.5 }}", {}),
    ("error/format_not_enough", "{{ '%s %s' % (1,) }}", {}),
    ("error/format_not_all", "{{ '%s' % (1, 2) }}", {}),
    ("error/format_not_all_single", "{{ 'abc' % 5 }}", {}),
    ("error/format_key", "{{ '%(a)s' % {'b': 1} }}", {}),
    ("error/format_filter_mixed", "{{ '%s' | format(1, x=2) }}", {}),
    ("error/format_float_str", "{{ '%f' % 'x' }}", {}),
    ("error/int_inf", "{% set x = 1e308 %}{{ (x * 10) | int }}", {}),
    ("error/format_incomplete", "{{ '%' % 1 }}", {}),
    ("error/format_bad_char", "{{ '%y' % 1 }}", {}),
    ("error/format_mapping_list", "{{ '%(a)s' % [1] }}", {}),
    ("error/format_c_str", "{{ '%c' % 'ab' }}", {}),
    ("error/format_c_range", "{{ '%c' % 1114112 }}", {}),
    ("error/format_star", "{{ '%*d' % ('a', 1) }}", {}),
    ("error/attr_name_int", "{{ 'a' | attr(1) }}", {}),
    ("error/center_width", "{{ 'a' | center('x') }}", {}),
    ("error/loop_cycle_empty", "{% for x in [1] %}{{ loop.cycle() }}{% endfor %}", {}),
    ("error/cycler_empty", "{{ cycler() }}", {}),
    ("error/joiner_args", "{% set j = joiner() %}{{ j(1) }}", {}),
    ("error/loop_call_no_items", "{% for x in [[1]] recursive %}{{ loop() }}{% endfor %}", {}),
    ("error/loop_not_recursive", "{% for x in [1] %}{{ loop([2]) }}{% endfor %}", {}),
    ("error/bracket_mismatch", "{{ [[[ }}", {}),
    # a lone surrogate from a string escape renders in Python but the prompt cannot be encoded (transformers then
    # tokenizes str -> UTF-8): an error for us too
    ("error/lone_surrogate", "x{{ '\\ud800' }}y", {}),
    ("error/surrogate_pair_escapes", "{{ '\\ud83d\\ude00' }}", {}),
    ("error/loop_changed_kwargs", "{% for x in [1] %}{{ loop.changed(a=1) }}{% endfor %}", {}),
    ("error/str_fill_long", "{{ 'a'.ljust(3, 'xy') }}", {}),
    ("error/str_fill_type", "{{ 'a'.center(3, 1) }}", {}),
    ("error/str_width_type", "{{ 'a'.zfill('3') }}", {}),
    ("error/str_index_missing", "{{ 'abc'.index('z') }}", {}),
    ("error/str_rindex_missing", "{{ 'abc'.rindex('a', 1) }}", {}),
    ("error/str_partition_empty", "{{ 'abc'.partition('') }}", {}),
    ("error/str_find_int", "{{ 'abc'.find(1) }}", {}),
    ("error/str_find_start_type", "{{ 'abc'.find('a', 'x') }}", {}),
    ("error/str_removeprefix_int", "{{ 'abc'.removeprefix(1) }}", {}),
    ("error/truncate_length", "{{ 'abcdef' | truncate(2) }}", {}),
    ("error/truncate_leeway", "{{ 'abcdef' | truncate(4, leeway=-1) }}", {}),
    ("error/wordwrap_width", "{{ 'abc' | wordwrap(0) }}", {}),
    ("error/slice_zero", "{{ [1] | slice(0) | list }}", {}),
    ("error/groupby_mixed", "{{ [{'a': 1}, {'a': 'x'}] | groupby('a') }}", {}),
    ("error/urlencode_pairs", "{{ [1, 2] | urlencode }}", {}),
    ("error/tojson_unknown_kwarg", "{{ [1] | tojson(foo=1) }}", {}),
    ("error/tojson_too_many", "{{ [1] | tojson(false, none, none, false, 1) }}", {}),
    ("error/tojson_separators", "{{ [1, 2] | tojson(separators=(',',)) }}", {}),
    ("error/star_kwargs_mapping", "{% macro f() %}{% endmacro %}{{ f(**[1]) }}", {}),
    ("error/star_kwargs_twice", "{% macro f(a) %}{% endmacro %}{{ f(a=1, **{'a': 2}) }}", {}),
    ("error/star_args_order", "{{ range(*[1], 2) }}", {}),
    ("error/star_kwargs_order", "{{ dict(**{'a': 1}, *[1]) }}", {}),
    ("error/positional_after_keyword", "{{ dict(a=1, 2) }}", {}),
    ("error/dict_key_unhashable", "{{ {[1]: 2} }}", {}),
    ("error/dict_key_sort_mixed", "{{ {1: 'a', 'b': 2} | dictsort }}", {}),
    ("error/truncate_unknown_kwarg", "{{ 'abc' | truncate(killword=true) }}", {}),
    ("error/wordwrap_too_many", "{{ 'abc' | wordwrap(5, true, '-', true, 1) }}", {}),
    ("error/groupby_twice", "{{ [] | groupby('a', attribute='b') }}", {}),
    ("error/striptags_arg", "{{ 'abc' | striptags(1) }}", {}),
    ("error/str_method_keyword", "{{ 'abc'.find('b', start=1) }}", {}),
    ("error/str_method_bad_keyword", "{{ 'a\tb'.expandtabs(size=2) }}", {}),
    ("error/format_index", "{{ '{} {}'.format(1) }}", {}),
    ("error/format_key_missing", "{{ '{a}'.format(b=1) }}", {}),
    ("error/format_manual_auto", "{{ '{0} {}'.format(1, 2) }}", {}),
    ("error/format_auto_manual", "{{ '{} {1}'.format(1, 2) }}", {}),
    ("error/format_single_brace", "{{ 'a } b'.format() }}", {}),
    ("error/format_unclosed", "{{ 'a { b'.format() }}", {}),
    ("error/format_str_code", "{{ '{:d}'.format('x') }}", {}),
    ("error/format_str_sign", "{{ '{:+}'.format('x') }}", {}),
    ("error/format_int_precision", "{{ '{:.2}'.format(5) }}", {}),
    ("error/format_int_code", "{{ '{:s}'.format(5) }}", {}),
    ("error/format_none_spec", "{{ '{:>5}'.format(none) }}", {}),
    ("error/format_bad_spec", "{{ '{:5q5}'.format(1) }}", {}),
    ("error/format_conversion", "{{ '{!x}'.format(1) }}", {}),
    ("error/format_group_both", "{{ '{:,_}'.format(1) }}", {}),
    ("error/format_group_type", "{{ '{:,x}'.format(1) }}", {}),
    ("error/format_map_positional", "{{ '{0}'.format_map({'0': 1}) }}", {}),
    ("error/format_map_kwargs", "{{ '{a}'.format_map(a=1) }}", {}),
    ("error/format_c_range", "{{ '{:c}'.format(-1) }}", {}),
    ("error/str_rsplit_empty", "{{ 'abc'.rsplit('') }}", {}),
    ("error/str_rsplit_kwarg", "{{ 'abc'.rsplit(sepx=',') }}", {}),
    ("error/str_istitle_arg", "{{ 'abc'.istitle(1) }}", {}),
    ("error/macro_too_many", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("error/macro_unknown_kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}", {}),
    ("error/macro_kwarg_twice", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}", {}),
    ("error/macro_no_args", "{% macro m() %}x{% endmacro %}{{ m(1) }}", {}),
    ("error/macro_call_no_caller", "{% macro m() %}x{% endmacro %}{% call m() %}b{% endcall %}", {}),
    ("error/caller_too_many", "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(x) m() %}{{ x }}{% endcall %}", {}),
    ("error/macro_star_kwargs_unknown", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(**{'a': 1, 'q': 2}) }}", {}),
    ("error/tojson_indent_float", "{{ [1] | tojson(indent=2.5) }}", {}),
    ("error/round_method", "{{ 2.5 | round(0, 'up') }}", {}),
    ("error/round_precision_float", "{{ 2.5 | round(1.0) }}", {}),
    ("error/concat_then_add", "{{ 'a' ~ 1 + 2 }}", {}),
    ("error/add_then_concat", "{{ 1 + 2 ~ 'a' }}", {}),
    ("error/list_add_concat", "{{ [1] + [2] ~ 'x' }}", {}),
    ("error/with_unclosed", "{% with a = 1 %}\n{{ a }}\n", {}),
    ("error/with_no_comma", "{% with a = 1 b = 2 %}{% endwith %}", {}),
    ("error/with_const_target", "{% with a, b = 1, 2 %}{% endwith %}", {}),
    ("error/with_inner_value", "{% with a = 1, b = a + 1 %}{{ b }}{% endwith %}", {}),
    # filter and test arguments bound as Python binds them to jinja2's signatures (TypeError)
    ("error/sig_trim_extra", "{{ 'ab' | trim('a', 'b') }}", {}),
    ("error/sig_center_fill", "{{ 'a' | center(10, 'x') }}", {}),
    ("error/sig_upper_arg", "{{ 'a' | upper(1) }}", {}),
    ("error/sig_unknown_kw", "{{ [1] | join(sep=',') }}", {}),
    ("error/sig_repeated_kw", "{{ 'a' | trim('b', chars='c') }}", {}),
    ("error/sig_missing", "{{ 'a' | replace('a') }}", {}),
    ("error/sig_default_extra", "{{ x | default(1, true, 3) }}", {}),
    ("error/sig_abs_kw", "{{ -1 | abs(x=1) }}", {}),
    ("error/sig_length_arg", "{{ [1] | length(2) }}", {}),
    ("error/sig_test_extra", "{{ 1 is odd(2) }}", {}),
    ("error/sig_test_missing", "{{ 4 is divisibleby }}", {}),
    ("error/sig_test_eq_kw", "{{ 1 is eq(b=1) }}", {}),
    ("error/sig_select_test_args", "{{ [1, 2] | select('even', 3) | list }}", {}),
    ("error/sig_map_filter_args", "{{ ['a'] | map('lower', 1) | list }}", {}),
    ("error/sig_tojson_kw", "{{ 1 | tojson(indnt=2) }}", {}),
    ("error/sig_filter_block", "{% filter upper(1) %}x{% endfilter %}", {}),
    ("error/sandbox_dict_update", "{% set d = {'a': 1} %}{{ d.update({'b': 2}) }}{{ d }}", {}),
]

# Tuples as Python keeps them (review11 item 10): tuple + tuple, tuple * n and a tuple's slice are tuples, printed
# as Python's repr wherever jinja2 prints them; a tuple never equals or orders against a list; count() / index().
FEATURES += [
    ("tuple/concat", "{{ (1,2) + (3,) }}|{{ () + () }}|{{ (1,) + ('a', none) }}|{{ 'a b'.partition(' ') + ('x',) }}|"
                     "{% set t = () %}{% for i in range(3) %}{% set t = t + (i,) %}{% endfor %}{{ t }}", {}),
    ("tuple/print", "{{ () }}|{{ (1,) }}|{{ (1, 'a', none, true, 1.5) }}|{{ ((),) }}|{{ (1,2)|string }}|"
                    "{{ [(1,2), ()] }}|{{ {'a': (1,)} }}|{{ (1,2) ~ '' }}|{{ '{}'.format((1,2)) }}|{{ (1,2)|tojson }}", {}),
    ("tuple/repeat_slice", "{{ (1,2) * 2 }}|{{ 2 * (1,) }}|{{ () * 3 }}|{{ (1,) * 0 }}|{{ (1,2,3)[1:] }}|"
                           "{{ (1,2,3)[::-1] }}|{{ (1,2,3)[:1] }}|{{ (1,2)[2:] }}|{{ [1,2][:1] }}|{{ [1] * 2 }}", {}),
    ("tuple/access", "{{ (1,2)[0] }}|{{ (1,2)[-1] }}|{{ (1,2)[5] }}|{{ 1 in (1,2) }}|{{ 3 in (1,2) }}|"
                     "{{ (1,2) in [(1,2)] }}|{{ [1,2] in [(1,2)] }}|{{ (1,2)|list }}|{{ (1,2)|length }}|"
                     "{% for a, b in ((1,2),(3,4)) %}{{ a }}{{ b }}{% endfor %}|{{ not () }}", {}),
    ("tuple/compare", "{{ (1,2) == [1,2] }}|{{ (1,2) == (1,2) }}|{{ () == [] }}|{{ [(1,)] == [[1]] }}|"
                      "{{ (1,2) < (1,3) }}|{{ () < (1,) }}|{{ ((1,2),(0,5))|sort }}|{{ ((1,2),(0,5))|max }}", {}),
    ("tuple/methods", "{{ (1,2,1).count(1) }}|{{ (1,2).index(2) }}|{{ [1,2,1].count(1) }}|{{ [[1],(1,)].count([1]) }}|"
                      "{{ ({'a': 1}|dictsort)[0] + (5,) }}|{{ {'a': 1}.items()|list }}", {}),
]
# Unpacking any iterable (review12 item 10): a string's characters, a dict's keys, in set, for and with targets.
FEATURES += [
    ("unpack/iterables", "{% set a, b = 'xy' %}{{ b }}{{ a }}|{% set p, q = {'k': 1, 'm': 2} %}{{ p }}{{ q }}|"
                         "{% for x, y in ['ab', 'cd'] %}{{ y }}{{ x }}{% endfor %}|"
                         "{% with u, v = 'é€' %}{{ v }}{{ u }}{% endwith %}", {}),
]
# Nested unpacking (review12 item 10): parenthesised tuples inside for / set / with targets, to any depth, and
# a trailing comma inside parentheses (at the top level jinja2 refuses it); a tuple target of one name.
FEATURES += [
    ("unpack/nested", "{% for a, (b, c) in [[1, [2, 3]], ['x', 'yz']] %}{{ a }}{{ b }}{{ c }};{% endfor %}|"
                      "{% set (p, q), r = ('ab', 3) %}{{ q }}{{ p }}{{ r }}|"
                      "{% for ((a, b), c) in [[[1, 2], 3]] %}{{ a + b + c }}{% endfor %}|"
                      "{% for k, (x, y) in {'m': [4, 5]}.items() %}{{ k }}{{ y }}{{ x }}{% endfor %}|"
                      "{% with u, (v, w) = [1, 'vw'] %}{{ w }}{{ v }}{{ u }}{% endwith %}|"
                      "{% set (s) = 'one' %}{{ s }}|{% set (t,) = 'z' %}{{ t }}|"
                      "{% for i, (a, (b, c)) in [[0, [1, [2, 3]]]] %}{{ i }}{{ a }}{{ b }}{{ c }}{% endfor %}|"
                      "{% set a, (b, c,) = 1, (2, 3) %}{{ a }}{{ b }}{{ c }}|"
                      "{% for a, () in [[1, []], [2, '']] %}{{ a }}{% endfor %}|{% set () = [] %}", {}),
]
ERRORS += [
    ("error/unpack_nested_length", "{% for a, (b, c) in [[1, [2, 3, 4]]] %}{% endfor %}", {}),
    ("error/unpack_nested_int", "{% set a, (b, c) = [1, 2] %}", {}),
    ("error/unpack_nested_syntax", "{% for a, (b, 1) in x %}{% endfor %}", {}),
    ("error/unpack_top_trailing_comma", "{% for a, in [[7], [8]] %}{{ a }}{% endfor %}", {}),
    ("error/unpack_empty_group", "{% for a, () in [[1, [3]]] %}{{ a }}{% endfor %}", {}),
]
ERRORS += [
    ("error/unpack_str_length", "{% set a, b = 'xyz' %}", {}),
    ("error/tuple_plus_list", "{{ (1,2) + [3] }}", {}),
    ("error/list_plus_tuple", "{{ [1,2] + (3,) }}", {}),
    ("error/tuple_lt_list", "{{ (1,2) < [1,3] }}", {}),
    ("error/tuple_index_missing", "{{ (1,2).index(5) }}", {}),
    ("error/escape_N_malformed", "x\n{{ 'a\\N' }}", {}),
    ("error/escape_x_truncated", "{{ '\\x4' }}", {}),
    ("error/escape_u_truncated", "{{ '\\u12g4' }}", {}),
    ("error/escape_U_too_large", "{{ '\\U00110000' }}", {}),
]

# String filters on any value (review13 item 3): jinja2 applies them to soft_str(value) / str(value) (filters.py
# do_upper, do_replace, ...); indent and truncate work on the value itself; forceescape is escape(str(value)).
FEATURES += [
    ("filters/soft_str", "{{ true|lower }}|{{ none|upper }}|{{ 42|replace('4', 'x') }}|{{ 5|capitalize }}|"
                         "{{ [1, 'a']|upper }}|{{ ('ab', none)|title }}|{{ {'k': 1.5}|wordcount }}|{{ 1.0|replace(1, 2) }}|"
                         "{{ false|replace('a', 'b', 1) }}|{{ -3|center(6) }}|{{ 1e20|trim('1') }}|{{ x|upper }}|"
                         "{{ x|replace('a', 'b') }}|{{ x|wordcount }}|{{ [1]|length|upper }}|{{ 'abc'|replace('b', none) }}|"
                         "{{ x|center(3) }}|{{ [none]|map('upper')|list }}|{{ (1, 2)|lower }}", {}),
    ("filters/truncate_indent_nonstr", "{{ [1, 2]|truncate(3) }}|{{ {'a': 1}|truncate(3) }}|{{ (1,)|truncate(3, true) }}|"
                                       "{{ 'a\nb'|indent(1) }}", {}),
    ("filters/forceescape", "{{ '<a href=\"x\">&'|forceescape }}|{{ 5|forceescape }}|{{ '<'|e|forceescape }}|"
                            "{{ '<'|safe|forceescape }}|{{ ['<']|forceescape }}|{{ x|forceescape }}", {}),
    ("filters/safe_str", "[{{ x|safe }}]{{ x|safe is defined }}|{{ [1, 2]|safe|length }}|{{ 5|safe is string }}|"
                         "{{ none|safe ~ 'x' }}|{{ (1,)|safe }}", {}),
]
ERRORS += [
    ("error/indent_int", "{{ 5|indent }}", {}),
    ("error/indent_list", "{{ [1]|indent }}", {}),
    ("error/indent_tuple", "{{ (1,)|indent }}", {}),
    ("error/truncate_int", "{{ 5|truncate(3) }}", {}),
    ("error/truncate_long_list", "{{ range(20)|list|truncate(3) }}", {}),
    ("error/truncate_long_list_kill", "{{ range(20)|list|truncate(3, true) }}", {}),
]
# Float floor division and modulo as CPython's float_divmod (fmod, then the floor of (a - mod) / b with its 0.5
# correction), and float ** as CPython's float_pow: overflow and 0.0 ** negative raise (review13 item 4).
FEATURES += [
    ("math/float_floordiv", "{{ 3 // 0.1 }}|{{ 1e3 // 0.1 }}|{{ 3 % 0.1 }}|{{ -3 // 0.1 }}|{{ 3 // -0.1 }}|{{ -3 % 0.1 }}|"
                            "{{ 7.5 // 2 }}|{{ -7.5 // 2 }}|{{ 7 // -2.0 }}|{{ -0.0 // 1 }}|{{ 0.0 // -1 }}|{{ 1e308 // 1e-10 }}|"
                            "{{ 2.5 % -1 }}|{{ -1e-300 // 1e300 }}|{{ 1 // 3.0 }}|{{ 0.7 // 0.1 }}|{{ 0.7 % 0.1 }}|{{ 1e300 % 3 }}|"
                            "{{ true // 0.5 }}|{{ -5 // 2.5 }}|{{ 5 % -2.5 }}", {}),
    ("math/float_pow", "{{ 2 ** 0.5 }}|{{ 10 ** -400 }}|{{ 2 ** -1 }}|{{ (-2.0) ** 3 }}|{{ (-8.0) ** -1 }}|{{ 1e308 * 10 }}|"
                       "{{ 0.0 ** 0 }}|{{ 1e-300 ** 2 }}|{{ (-1e-300) ** 3 }}", {}),
]
ERRORS += [
    ("error/float_pow_overflow", "{{ 1e3 ** 1e3 }}", {}),
    ("error/float_pow_overflow_neg", "{{ (-2.0) ** 1e300 }}", {}),
    ("error/float_pow_overflow_sq", "{{ 1e300 ** 2 }}", {}),
    ("error/float_pow_zero_negative", "{{ 0 ** -1 }}", {}),
    ("error/float_pow_zero_negative_f", "{{ 0.0 ** -1.5 }}", {}),
    ("error/float_floordiv_zero", "{{ 1.0 // 0 }}", {}),
    ("error/float_mod_zero", "{{ 1 % 0.0 }}", {}),
]

# Namespace attributes in a set tag's tuple target (jinja2 parse_tuple(with_namespace=True): top level only) and a
# block set into one (review13 item 8).
FEATURES += [
    ("set/ns_tuple", "{% set ns = namespace(a=0, b=5) %}{% set ns.a, b = 1, 2 %}{{ ns.a }}{{ b }}|"
                     "{% set c, ns.a, ns.b = 'xyz' %}{{ c }}{{ ns.a }}{{ ns.b }}|{% set ns.a, ns.a = 3, 4 %}{{ ns.a }}|"
                     "{% for p, q in [[1, 2]] %}{% set ns.a, ns.b = q, p %}{% endfor %}{{ ns.a }}{{ ns.b }}|"
                     "{% set ns.a %}blk{{ ns.b }}{% endset %}{{ ns.a }}", {}),
]
ERRORS += [
    ("error/ns_tuple_paren", "{% set ns = namespace(a=0) %}{% set (ns.a, b) = 1, 2 %}", {}),
    ("error/ns_tuple_nested", "{% set ns = namespace(a=0) %}{% set b, (ns.a, c) = 1, (2, 3) %}", {}),
    ("error/ns_tuple_not_ns", "{% set x = 5 %}{% set x.a, b = 1, 2 %}", {}),
    ("error/ns_for_target", "{% set ns = namespace(a=0) %}{% for ns.a in [1] %}{% endfor %}", {}),
    ("error/filesizeformat_str", "{{ 'abc' | filesizeformat }}", {}),
    ("error/filesizeformat_none", "{{ none | filesizeformat }}", {}),
    ("error/filesizeformat_list", "{{ [1] | filesizeformat }}", {}),
    ("error/filesizeformat_undefined", "{{ missing | filesizeformat }}", {}),
    ("error/filesizeformat_neg_inf", "{{ '-inf' | filesizeformat }}", {}),
    ("error/filesizeformat_kwarg", "{{ 5 | filesizeformat(base=2) }}", {}),
    ("error/filesizeformat_args", "{{ 5 | filesizeformat(true, 2) }}", {}),
    ("error/ns_tuple_length", "{% set ns = namespace(a=0) %}{% set ns.a, b = 1, 2, 3 %}", {}),
]


def render(env, src, ctx):
    out = env.from_string(src).render(**ctx)
    out.encode("utf-8")  # the prompt is tokenized as UTF-8: a lone surrogate fails here (UnicodeEncodeError)
    return out


def main():
    env = environment()
    cases = []
    for case in family_cases():
        if "template_shared" in case:
            with open(os.path.join(SHARED, "data", case["template_shared"])) as f:
                src = json.load(f)["chat_template"]
        else:
            with open(os.path.join(DATA, case["template_path"])) as f:
                src = f.read()
        try:
            case["expected"] = render(env, src, case["context"])
        except TemplateRaised as e:
            case["error"] = "raise"
            case["message"] = str(e)
        except (TypeError, jinja2.UndefinedError) as e:  # the template itself fails on this input
            case["error"] = "runtime"
            case["message"] = str(e)
        cases.append(case)
    for name, src, ctx in FEATURES:
        cases.append({"name": name, "template": src, "context": ctx, "expected": render(env, src, ctx)})
    for name, src, ctx in ERRORS:
        case = {"name": name, "template": src, "context": ctx}
        try:
            render(env, src, ctx)
            sys.exit(f"{name}: expected an error")
        except TemplateRaised as e:
            case.update(error="raise", message=str(e))
        except jinja2.TemplateSyntaxError as e:
            case.update(error="syntax", line=e.lineno)
        except jinja2.exceptions.SecurityError as e:
            case.update(error="runtime", message=str(e))
        except (TypeError, KeyError, IndexError, ValueError, OverflowError, AttributeError, UnicodeEncodeError, RuntimeError, AssertionError,
                ZeroDivisionError, jinja2.exceptions.TemplateRuntimeError) as e:
            case.update(error="runtime", message=str(e))
        cases.append(case)
    os.makedirs(DATA, exist_ok=True)
    with open(os.path.join(DATA, "cases.json"), "w") as f:
        json.dump({"generator": "scripts/template/make_refs.py", "jinja2": jinja2.__version__, "cases": cases}, f,
                  indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases written")


if __name__ == "__main__":
    main()
