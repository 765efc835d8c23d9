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
    ("undefined/lenient", "[{{ missing }}][{{ missing | length }}][{{ missing ~ 'x' }}][{{ d.nope }}]"
                          "[{{ missing is none }}][{{ missing == none }}][{% if missing %}t{% else %}f{% endif %}]", V),
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
    ("error/sandbox_dict_update", "{% set d = {'a': 1} %}{{ d.update({'b': 2}) }}{{ d }}", {}),
]


def render(env, src, ctx):
    return env.from_string(src).render(**ctx)


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
        cases.append(case)
    os.makedirs(DATA, exist_ok=True)
    with open(os.path.join(DATA, "cases.json"), "w") as f:
        json.dump({"generator": "scripts/template/make_refs.py", "jinja2": jinja2.__version__, "cases": cases}, f,
                  indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases written")


if __name__ == "__main__":
    main()
