#!/usr/bin/env python3
"""Writes tests/chat/data/chat_refs.json: reference renderings for the chat API (cmf_chat_render) and `cmf chat`.

Run once from the repository root:  CMF_SHARED=../shared python3 scripts/template/make_chat_refs.py

Each family is a real tokenizer bundle from $CMF_SHARED/data/tokenizers (qwen3 and llama3 with their chat templates;
mistral has none, so the runtime falls back to ChatML). The test builds a tiny random model around each bundle and
renders every case through the model API. References come from Python jinja2 set up as Hugging Face transformers
sets it up (render_jinja_template: ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, strftime_now and a json.dumps tojson), called the way apply_chat_template calls it:
    render(messages=..., tools=tools or None, documents=None, add_generation_prompt=...,
           **special_tokens_map, **kwargs)
with special_tokens_map holding the bos_token / eos_token strings of tokenizer_config.json that are not null, and
kwargs holding enable_thinking (when the case sets it) and the case's extra variables.

Content given as a list of parts: "parts" passes it as is (what transformers does); "auto"/"string" join the text
parts with "\\n" first (vLLM's "string" content format), which is what cmf does for templates that do not loop over
content (none of these three does). The ChatML fallback is written out here with Python string formatting, not with
a template. Per family the file also records the token ids the converter is expected to find for bos/eos, taken from
tokenizer.json's added tokens."""
import json
import os
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "chat", "data", "chat_refs.json")
SHARED = os.environ.get("CMF_SHARED", os.path.join(ROOT, "..", "shared"))


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def load_family(name):
    d = os.path.join(SHARED, "data", "tokenizers", name)
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
    tok = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    vocab_size = max(max(tok["model"]["vocab"].values()), max(ids.values())) + 1
    special = {}
    for key in ("bos_token", "eos_token"):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            special[key] = v
    return {"template": cfg.get("chat_template"), "special": special, "vocab_size": vocab_size,
            "bos_token_id": ids.get(special.get("bos_token"), -1),
            "eos_token_id": ids.get(special.get("eos_token"), -1)}


def chatml(messages, add_generation_prompt):
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def flatten(messages):
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        out.append(m)
    return out


def render(fam, case):
    messages = case["messages"]
    if case["content"] == "string" or (case["content"] == "auto" and not case.get("loops_over_content")):
        messages = flatten(messages)
    template = case.get("template_src", fam["template"])
    if template is None:
        return chatml(messages, case["add_generation_prompt"])
    kwargs = dict(fam["special"])
    if case["enable_thinking"] >= 0:
        kwargs["enable_thinking"] = bool(case["enable_thinking"])
    kwargs.update(case.get("extra", {}))
    t = environment().from_string(template)
    return t.render(messages=messages, tools=case.get("tools"), documents=None,
                    add_generation_prompt=case["add_generation_prompt"], **kwargs)


SYSTEM = {"role": "system", "content": "You are a terse assistant."}
USER1 = {"role": "user", "content": "Hello! What's 2+2?"}
ASSIST1 = {"role": "assistant", "content": "2+2 is 4."}
USER2 = {"role": "user", "content": "  And in French, s'il vous plaît? — «ça»  "}
PARTS = {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "text", "text": "a cat."}]}
REASONING = {"role": "assistant", "content": "It is 4.", "reasoning_content": "\nSimple sum.\n"}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
TOOL_CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
TOOL_RESULT = {"role": "tool", "content": "{\"temp\": 21}"}

# A template that handles part lists itself, and one that refuses system messages (as Gemma's does).
LOOPS_CONTENT = ("{% for message in messages %}<{{ message.role }}>{% if message.content is string %}"
                 "{{ message.content }}{% else %}{% for part in message.content %}[{{ part.text }}]{% endfor %}"
                 "{% endif %}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
NO_SYSTEM = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
             "{{ raise_exception('System role not supported') }}{% endif %}"
             "{{ message['role'] }}: {{ message['content'] | trim }}\n{% endfor %}")

CONVS = {
    "single": [USER1],
    "system": [SYSTEM, USER1],
    "multi": [SYSTEM, USER1, ASSIST1, USER2],
    "parts": [SYSTEM, PARTS],
}


def cases_for(name):
    out = []

    def add(cname, messages, agp=True, think=-1, content="auto", **more):
        out.append(dict(name=f"{name}/{cname}", family=name, messages=messages, add_generation_prompt=agp,
                        enable_thinking=think, content=content, **more))

    for cname, msgs in CONVS.items():
        for agp in (False, True):
            add(f"{cname}/agp={int(agp)}", msgs, agp)
    add("parts/string", CONVS["parts"], content="string")
    if name == "qwen3":
        add("multi/think=0", CONVS["multi"], think=0)
        add("multi/think=1", CONVS["multi"], think=1)
        add("reasoning", [USER1, REASONING, USER2])
        add("tools", [SYSTEM, USER1, TOOL_CALL, TOOL_RESULT], tools=[TOOL])
        add("extra/think=0", CONVS["single"], extra={"enable_thinking": False})
        add("parts/parts", CONVS["parts"], content="parts")  # transformers: str + list fails
        # templates given by the caller (cmf_chat_params.template_src)
        add("custom/loops_content", CONVS["parts"], template_src=LOOPS_CONTENT, loops_over_content=True)
        add("custom/loops_content_string", CONVS["parts"], content="string", template_src=LOOPS_CONTENT,
            loops_over_content=True)
        add("custom/raise", CONVS["system"], template_src=NO_SYSTEM)
        add("custom/no_raise", CONVS["single"], template_src=NO_SYSTEM)
    if name == "llama3":
        add("parts/parts", CONVS["parts"], content="parts")  # transformers prints the list's repr
        add("extra/bos", CONVS["system"], extra={"bos_token": "<BOS>"})
    return out


def main():
    families, cases = {}, []
    for name in ("qwen3", "llama3", "mistral"):
        fam = load_family(name)
        families[name] = {"tokenizer": f"tokenizers/{name}", "vocab_size": fam["vocab_size"],
                          "bos_token_id": fam["bos_token_id"], "eos_token_id": fam["eos_token_id"],
                          "has_template": fam["template"] is not None}
        for case in cases_for(name):
            try:
                case["expected"] = render(fam, case)
            except TemplateRaised as e:
                case["error"] = {"kind": "raise", "message": str(e)}
            except (TypeError, jinja2.exceptions.UndefinedError) as e:
                case["error"] = {"kind": "runtime", "python": str(e)}
            cases.append(case)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"generator": "scripts/template/make_chat_refs.py", "jinja2": jinja2.__version__,
                   "families": families, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
