// hf_bench.mjs — encoding speed of Hugging Face's tokenizers on the same text as tok_bench (the cmf side).
//
// Usage: node bench/tokenizer/hf_bench.mjs TOKENIZER_JSON TEXT_FILE [--runs N] [--lines] [--special]
//                                          [--impl rust|js] [--per-call]
//                                          [--dump IDS_FILE]
//   --impl rust (default): the npm package `tokenizers` (HF's official Node binding of the Rust crate; its native
//          library ships in the package). Run with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false: a single
//          encode() call does not use rayon anyway, but this rules it out.
//   --lines: as tok_bench --lines; for rust the lines go to one encodeBatch call (HF's batch API; serial under
//          TOKENIZERS_PARALLELISM=false, so no per-call Promise overhead), or to one encode call each with
//          --per-call.
//   --impl js: `@huggingface/tokenizers` (the pure-JS tokenizer of transformers.js), constructed from the same
//          tokenizer.json (and the tokenizer_config.json next to it, when present).
// The packages are resolved from $TOKREF_DIR (default /tmp/tokref; see compare.sh for the install command).
// Timing: wall time of the encode call(s) only (for rust, await encode(...) including the Encoding it returns;
// reading ids out of it for the hash is not timed). One warm-up encode, then N timed ones, median reported.
// Output: one line of key=value pairs with the same meaning as tok_bench's (hash: FNV-1a 32 over each id as 4
// little-endian bytes).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
let runs = 5, lines = false, perCall = false, special = false, impl = "rust", dump = null;
const pos = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--runs") runs = parseInt(args[++i], 10);
  else if (args[i] === "--lines") lines = true;
  else if (args[i] === "--special") special = true;
  else if (args[i] === "--per-call") perCall = true;
  else if (args[i] === "--impl") impl = args[++i];
  else if (args[i] === "--dump") dump = args[++i];
  else pos.push(args[i]);
}
if (pos.length !== 2 || !(runs >= 1) || !["rust", "js"].includes(impl)) {
  console.error("usage: hf_bench.mjs TOKENIZER_JSON TEXT_FILE [--runs N] [--lines] [--special] [--impl rust|js] [--per-call] [--dump F]");
  process.exit(2);
}
const [tjPath, textPath] = pos;
const refDir = process.env.TOKREF_DIR || "/tmp/tokref";
const require = createRequire(path.join(refDir, "package.json"));
const textBuf = fs.readFileSync(textPath);
const text = textBuf.toString("utf8");
const bytes = textBuf.length;
// the same cut as tok_bench --lines: after every "\n", the newline kept at the end of its line
const pieces = lines ? text.split(/(?<=\n)/) : [text];

let encodeAll; // () => Promise<array of id arrays or typed arrays>
const t0 = process.hrtime.bigint();
if (impl === "rust") {
  const { Tokenizer } = require("tokenizers");
  const tok = Tokenizer.fromString(fs.readFileSync(tjPath, "utf8"));
  // lines: one encodeBatch call over all lines (serial with TOKENIZERS_PARALLELISM=false), unless --per-call
  encodeAll = lines && !perCall
    ? async () => await tok.encodeBatch(pieces, { addSpecialTokens: special })
    : async () => {
      const encs = [];
      for (const p of pieces) encs.push(await tok.encode(p, null, { addSpecialTokens: special }));
      return encs;
    };
  encodeAll.ids = (encs) => encs.map((e) => e.getIds());
} else {
  const mod = await import(require.resolve("@huggingface/tokenizers"));
  const cfgPath = path.join(path.dirname(tjPath), "tokenizer_config.json");
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  const Tok = mod.Tokenizer ?? mod.default.Tokenizer;
  const tok = new Tok(JSON.parse(fs.readFileSync(tjPath, "utf8")), cfg);
  encodeAll = async () => pieces.map((p) => tok.encode(p, { add_special_tokens: special }).ids);
  encodeAll.ids = (encs) => encs;
}
const loadS = Number(process.hrtime.bigint() - t0) / 1e9;

let last = await encodeAll(); // warm-up
const mbs = [];
for (let r = 0; r < runs; r++) {
  const s = process.hrtime.bigint();
  last = await encodeAll();
  const sec = Number(process.hrtime.bigint() - s) / 1e9;
  mbs.push(bytes / 1e6 / sec);
}
mbs.sort((a, b) => a - b);
const med = runs % 2 ? mbs[(runs - 1) / 2] : 0.5 * (mbs[runs / 2 - 1] + mbs[runs / 2]);

let h = 2166136261 >>> 0, n = 0;
const all = [];
for (const ids of encodeAll.ids(last)) {
  for (const id of ids) {
    const v = Number(id) >>> 0;
    for (let b = 0; b < 4; b++) h = Math.imul(h ^ ((v >>> (8 * b)) & 0xff), 16777619) >>> 0;
    n++;
    if (dump) all.push(v);
  }
}
if (dump) fs.writeFileSync(dump, Buffer.from(new Int32Array(all).buffer));
console.log(`impl=hf-${impl} bytes=${bytes} ids=${n} hash=${h.toString(16).padStart(8, "0")} runs=${runs} ` +
  `median_mbs=${med.toFixed(3)} best_mbs=${mbs[runs - 1].toFixed(3)} load_s=${loadS.toFixed(3)} mode=${lines ? "lines" : "whole"}`);
