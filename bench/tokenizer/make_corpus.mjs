// make_corpus.mjs — the benchmark text for compare.sh: ~10 MB of UTF-8, built deterministically (fixed seed) from
// files of the shared data folder plus generated text. Same arguments -> byte-identical output.
//
// Usage: node bench/tokenizer/make_corpus.mjs SHARED_DIR OUT_FILE [TARGET_BYTES=10000000]
//
// Contents, in order:
//  1. Real text, once, verbatim: data/tokenizer-vectors/*.inp (llama.cpp's tokenizer test strings, with their
//     __ggml_vocab_test__ separator lines), data/models/stories260K/stories260K.md, data/tokenizers/*/
//     tokenizer_config.json (chat templates, special tokens), data/tokenizer-vectors/LICENSE-llama.cpp,
//     data/SOURCES.md, README.md, spec/CMF_FORMAT.md, spec/DORY.md, docs/*.md (files in sorted order) — ~160 KB.
//  2. Generated paragraphs until TARGET_BYTES, each chosen at random (mulberry32, seed 20250101):
//     - 45%: "English-like" prose: sentences of 5-24 words drawn with a Zipf(1.0) law from the distinct
//       whitespace-separated words of part 1 without the JSON files (so markdown, code identifiers, numbers and punctuation recur with a
//       natural-looking frequency), capitalised, ending in . ! or ?;
//     - 30%: multilingual prose: words of 1-8 random letters from one script per paragraph — Cyrillic, Greek,
//       Latin with diacritics, Arabic, Hebrew, Devanagari, Thai, Hangul syllables, Hiragana/Katakana, CJK
//       ideographs (U+4E00..U+9FFF, written without spaces), plus numbers and emoji sprinkled in;
//     - 25%: a random 200-3000 byte slice of part 1 (cut at line boundaries), i.e. real text again.
//     Paragraphs end with "\n\n" or "\n"; the output is cut at the last newline before TARGET_BYTES.
import fs from "node:fs";
import path from "node:path";

const [shared, outFile, targetArg] = process.argv.slice(2);
if (!shared || !outFile) {
  console.error("usage: make_corpus.mjs SHARED_DIR OUT_FILE [TARGET_BYTES]");
  process.exit(2);
}
const target = targetArg ? parseInt(targetArg, 10) : 10_000_000;

const files = [];
const add = (dir, pred) => {
  const d = path.join(shared, dir);
  for (const f of fs.readdirSync(d).sort()) if (pred(f)) files.push(path.join(d, f));
};
add("data/tokenizer-vectors", (f) => f.endsWith(".inp"));
files.push(path.join(shared, "data/models/stories260K/stories260K.md"));
for (const t of ["llama3", "mistral", "qwen3"]) files.push(path.join(shared, "data/tokenizers", t, "tokenizer_config.json"));
files.push(path.join(shared, "data/tokenizer-vectors/LICENSE-llama.cpp"), path.join(shared, "data/SOURCES.md"),
  path.join(shared, "README.md"), path.join(shared, "spec/CMF_FORMAT.md"), path.join(shared, "spec/DORY.md"));
add("docs", (f) => f.endsWith(".md"));
const real = files.map((f) => fs.readFileSync(f, "utf8")).join("\n");
// the word pool of the English-like prose: the files of part 1 except the JSON configs
const prose = files.filter((f) => !f.endsWith(".json")).map((f) => fs.readFileSync(f, "utf8")).join("\n");
const realLines = real.split("\n");

let seed = 20250101 >>> 0; // mulberry32
const rnd = () => {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const ri = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1)); // inclusive
const pick = (a) => a[Math.floor(rnd() * a.length)];

// Zipf(1) sampler over the distinct words of part 1, most frequent first.
const counts = new Map();
for (const w of prose.split(/\s+/)) if (w) counts.set(w, (counts.get(w) || 0) + 1);
const words = [...counts.keys()].sort((a, b) => counts.get(b) - counts.get(a) || (a < b ? -1 : a > b ? 1 : 0));
const cdf = [];
let acc = 0;
for (let i = 0; i < words.length; i++) cdf.push((acc += 1 / (i + 1)));
const zipfWord = () => {
  const x = rnd() * acc;
  let lo = 0, hi = cdf.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cdf[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return words[lo];
};

const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => String.fromCodePoint(a + i));
const scripts = [
  { name: "cyrillic", letters: range(0x430, 0x44f), space: true },
  { name: "greek", letters: range(0x3b1, 0x3c9), space: true },
  { name: "latin-diacritics", letters: [...range(0x61, 0x7a), ..."àáâäçèéêëíîïñóôöúûüßøåæœ"], space: true },
  { name: "arabic", letters: range(0x627, 0x64a), space: true },
  { name: "hebrew", letters: range(0x5d0, 0x5ea), space: true },
  { name: "devanagari", letters: [...range(0x915, 0x939), ...range(0x93e, 0x94c)], space: true },
  { name: "thai", letters: range(0xe01, 0xe2e), space: false },
  { name: "hangul", letters: range(0xac00, 0xac00 + 600), space: true },
  { name: "kana", letters: [...range(0x3041, 0x3093), ...range(0x30a1, 0x30f3)], space: false },
  { name: "cjk", letters: range(0x4e00, 0x4e00 + 3000), space: false },
];
const emoji = ["😀", "🦙", "👍🏽", "🎉", "❤️", "🚀", "👩‍💻", "🇫🇷", "✨", "🤔"];
const puncts = [".", ",", "!", "?", ";", ":", "。", "、", "—", "…"];

function english() {
  const out = [];
  for (let s = ri(2, 8); s > 0; s--) {
    const n = ri(5, 24), ws = [];
    for (let i = 0; i < n; i++) ws.push(zipfWord());
    ws[0] = ws[0].charAt(0).toUpperCase() + ws[0].slice(1);
    out.push(ws.join(" ") + pick([".", ".", ".", "!", "?"]));
  }
  return out.join(" ");
}
function multilingual() {
  const sc = pick(scripts), out = [];
  for (let n = ri(20, 120); n > 0; n--) {
    const r = rnd();
    let w;
    if (r < 0.05) w = String(ri(0, 99999));
    else if (r < 0.08) w = pick(emoji);
    else {
      w = "";
      for (let k = ri(1, 8); k > 0; k--) w += pick(sc.letters);
    }
    out.push(w);
    if (rnd() < 0.1) out.push(pick(puncts));
  }
  return sc.space ? out.join(" ") : out.join(rnd() < 0.5 ? "" : " ");
}
function realSlice() {
  const want = ri(200, 3000);
  let i = ri(0, realLines.length - 1), s = "";
  while (s.length < want && i < realLines.length) s += realLines[i++] + "\n";
  return s.trimEnd();
}

const parts = [real, "\n\n"];
let size = Buffer.byteLength(real) + 2;
while (size < target) {
  const r = rnd();
  const p = (r < 0.45 ? english() : r < 0.75 ? multilingual() : realSlice()) + (rnd() < 0.7 ? "\n\n" : "\n");
  parts.push(p);
  size += Buffer.byteLength(p);
}
let buf = Buffer.from(parts.join(""), "utf8");
if (buf.length > target) buf = buf.subarray(0, buf.lastIndexOf(0x0a, target - 1) + 1);
fs.writeFileSync(outFile, buf);
console.error(`make_corpus: ${outFile}: ${buf.length} bytes (${Buffer.byteLength(real)} bytes of real text first)`);
