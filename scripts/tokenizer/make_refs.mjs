// make_refs.mjs — reference encodings from Hugging Face's own JavaScript tokenizers (npm @huggingface/tokenizers)
// for the tokenizer.json files in shared/data/tokenizers. Writes tests/tokenizer/data/hf_refs_<name>.json, read by
// tests/tokenizer/test_hf_refs.c.
//
// Usage (node_modules kept outside the repository):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y && npm install @huggingface/tokenizers@0.2.0
//   node scripts/tokenizer/make_refs.mjs ../shared tests/tokenizer/data     (from the repository root)
// The package is resolved from $TOKREF_DIR (default /tmp/tokref).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [shared = "../shared", outDir = "tests/tokenizer/data"] = process.argv.slice(2);
const refDir = process.env.TOKREF_DIR || "/tmp/tokref";
const require = createRequire(path.join(refDir, "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");
const pkg = JSON.parse(fs.readFileSync(path.join(refDir, "node_modules/@huggingface/tokenizers/package.json"), "utf8"));

// Strings that exercise the pre-tokenizer regexes, normalizers, byte fallback and added-token matching.
const long = "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(8);
const texts = [
  "", " ", "  ", "\t", "\n", "\r\n", "\r\n\r\n", " \n \n", "a\r\nb\rc\nd", "\t\tindented\n\t\ttwice",
  "Hello world", " Hello world", "  leading spaces", "trailing spaces   ", "multiple     inner   spaces",
  "tabs\tand\tspaces \t mixed", "line1\n\nline3\n\n\n", "x  \n  y",
  "I'm you're we've they'll she'd it's DON'T WE'LL", "'s 's' ''", "e.g. i.e. etc...",
  "Ünïcödé lëttërs: Ελληνικά, русский, עברית, العربية", "Caf\u00e9 vs Cafe\u0301 (NFC)",
  "数字 12345 and ١٢٣٤٥ and ½ ⅓ ²³", "3.14159 1,000,000 0x1F 1e-9", "123456789012345678901234567890",
  "emoji 😀😃😄 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽", "🦙🦙🦙 llama", "日本語のテキストと中文文本和한국어 텍스트",
  "ກ ຂ ຄ ງ ຈ ສ ຊ ຍ", "mixed:中文English日本語123", "symbols !@#$%^&*()_+-=[]{}|;':\",./<>?`~",
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "text<|endoftext|>more text",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<s> [INST] hi [/INST]</s>",
  "<think>\nreasoning\n</think>\n\nanswer", "<|im_start|><|im_start|>", "a<unk>b", "not<|special|>token",
  long, "word" + "!".repeat(40), " ".repeat(20) + "x", "\u00a0non-breaking\u00a0space\u2003em\u3000ideographic",
  "zero\u200bwidth\u200djoiner", "control\u0001\u0002chars\u007f", "\u2028line\u2029para\u0085nel",
  "def f(x):\n    return x * 2  # comment\n", "https://example.com/path?q=1&r=2#frag", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ",
];

const cases = [
  ["qwen3", "qwen3/tokenizer.json"],
  ["llama3", "llama3/tokenizer.json"],
  ["mistral", "mistral/tokenizer.json"],
];

fs.mkdirSync(outDir, { recursive: true });
for (const [name, rel] of cases) {
  const dir = path.join(shared, "data/tokenizers", path.dirname(rel));
  const tj = JSON.parse(fs.readFileSync(path.join(shared, "data/tokenizers", rel), "utf8"));
  const cfgPath = path.join(dir, "tokenizer_config.json");
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  const tok = new Tokenizer(tj, cfg);
  const out = [];
  for (const text of texts) {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const ids_special = tok.encode(text, { add_special_tokens: true }).ids;
    const dec = (x, o) => (x.length ? tok.decode(x, o) : ""); // the JS decode rejects an empty list
    const decoded = dec(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    const decoded_skip = dec(ids_special, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
    out.push({ text, ids, ids_special, decoded, decoded_skip });
  }
  const doc = { generator: `scripts/tokenizer/make_refs.mjs with ${pkg.name}@${pkg.version}`, tokenizer: rel, cases: out };
  const file = path.join(outDir, `hf_refs_${name}.json`);
  fs.writeFileSync(file, JSON.stringify(doc, null, 1) + "\n");
  console.log(`${file}: ${out.length} cases`);
}
