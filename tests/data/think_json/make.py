#!/usr/bin/env python3
"""make.py - the tokenizer of tests/server/test_think_json.c: a small Qwen3-style tokenizer whose reply template
leaves <think> open and whose vocabulary makes `</think>` frequent, so a random model closes its reasoning within
a few dozen tokens and the JSON-mode path after `</think>` runs.

Writes tokenizer.json and tokenizer_config.json here from the real Qwen3 tokenizer (shared/data/tokenizers/qwen3):
  - ids 0..899: the first 900 entries of Qwen3's byte-level BPE vocabulary, with the merges among them;
  - ids 900..: pieces that hold `</think>` with what models write after it (blank lines, spaces, `{`), and pieces
    that split the tag across two tokens ("x</th" + "ink>..."), so the tag arrives whole, followed by whitespace,
    followed by the object's first byte, or in two tokens;
  - ids 1000..1006: the added tokens <|endoftext|>, <|im_start|>, <|im_end|> (special), <think>, </think>,
    <tool_call>, </tool_call> (not special, as in Qwen3's tokenizer.json);
  - the chat template: Qwen3's, with the generation prompt `<|im_start|>assistant\\n<think>\\n` (DeepSeek-R1 / QwQ
    style: the template opens the reasoning).
Deterministic. Usage: python3 tests/data/think_json/make.py [SHARED_DIR] (default ../shared, as CMF_SHARED)."""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
shared = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CMF_SHARED", os.path.join(here, "../../../../shared"))
src = os.path.join(shared, "data/tokenizers/qwen3")
tok = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
cfg = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))

vocab = {piece: i for piece, i in tok["model"]["vocab"].items() if i < 900}
merges = []
for m in tok["model"]["merges"]:
    a, b = m if isinstance(m, list) else m.split(" ")
    if a in vocab and b in vocab and a + b in vocab:
        merges.append([a, b])

NL, SP = "\u010a", "\u0120"  # byte-level BPE's newline and space
extra = ["</think>{", "</think>" + SP + "{", "</think>" + SP + "{" + SP]
for k in range(30):  # the tag, then whitespace (what Qwen-family models write), sometimes the object's start
    extra += ["</think>" + NL + NL + SP * k]
for k in range(21):  # a newline and up to 20 spaces before the object: still JSON's whitespace (json_fsm.h)
    extra += ["</think>" + NL + SP * k + "{", "</think>" + NL + SP * k]
for c in "abcdefghijkl":  # the tag in two tokens
    extra.append(c + "</th")
extra += ["ink>", "ink>" + NL + NL, "ink>{", "ink>" + SP + "{", "ink>" + NL + "{"]
nid = 900
for piece in extra:
    if piece not in vocab and nid < 1000:
        vocab[piece] = nid
        nid += 1

names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]
added = [{"id": 1000 + k, "content": n, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
          "special": k < 3} for k, n in enumerate(names)]
out = dict(tok)
out["model"] = dict(tok["model"], vocab=vocab, merges=merges)
out["added_tokens"] = added
json.dump(out, open(os.path.join(here, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)

c = {k: v for k, v in cfg.items() if k != "added_tokens_decoder"}
c["added_tokens_decoder"] = {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}
c["additional_special_tokens"] = ["<|im_start|>", "<|im_end|>"]
old = "{{- '<|im_start|>assistant\\n' }}"
assert old in cfg["chat_template"], "Qwen3's generation prompt not found"
c["chat_template"] = cfg["chat_template"].replace(old, "{{- '<|im_start|>assistant\\n<think>\\n' }}")
json.dump(c, open(os.path.join(here, "tokenizer_config.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
print(f"vocab {len(vocab)} + {len(added)} added; {nid - 900} pieces with </think>")
