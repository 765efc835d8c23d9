// make_refs.mjs — reference encodings from Hugging Face tokenizers itself: the npm package `tokenizers` is the
// official Node binding of the Rust crate (its native library ships inside the package), so the ids and decoded
// strings written here are exactly what HF tokenizers' encode/decode give. Writes tests/tokenizer/data/
// hf_refs_<name>.json (and the small synthetic tokenizer.json files), read by tests/tokenizer/test_hf_refs.c.
//
// Usage (node_modules kept outside the repository):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y && npm install tokenizers@0.23.2
//   node scripts/tokenizer/make_refs.mjs ../shared tests/tokenizer/data     (from the repository root)
// The package is resolved from $TOKREF_DIR (default /tmp/tokref).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [shared = "../shared", outDir = "tests/tokenizer/data"] = process.argv.slice(2);
const refDir = process.env.TOKREF_DIR || "/tmp/tokref";
const require = createRequire(path.join(refDir, "package.json"));
const { Tokenizer } = require("tokenizers");
const pkg = JSON.parse(fs.readFileSync(path.join(refDir, "node_modules/tokenizers/package.json"), "utf8"));

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
  "def f(x):\n    return x * 2  # comment\n", "a\u180eb \ufeffc \u0085d\u200be", "'S 'ſ 'K 'Ll 'VE", "\u0301abc \u0301",
  "İstanbul STRASSE Straße ΣΑΣ ǅ", "\t \t\n\n \u3000\u3000x", " " + "ab ".repeat(30) + "   \n", "https://example.com/path?q=1&r=2#frag", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ",
];

const cases = [
  ["qwen3", "qwen3/tokenizer.json"],
  ["llama3", "llama3/tokenizer.json"],
  ["mistral", "mistral/tokenizer.json"],
];

// (HF's Strip decoder with stop > 0 panics on an empty string, an index underflow, so no synthetic uses stop.)
// Small synthetic tokenizer.json files for the components the real vocabularies above do not use (WordPiece with
// the BERT normalizer/pre-tokenizer/decoder, Unigram with Metaspace and NFKC, BPE with unk and the simple
// pre-tokenizers). Their inputs are made up here; the expected outputs are HF's.
const letters = "abcdefghijklmnopqrstuvwxyz".split("");
const digits = "0123456789".split("");
const special = (content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
function bert() {
  const words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "?", "'", "-", "(", ")", ...letters,
    ...letters.map((c) => "##" + c), ...digits, ...digits.map((c) => "##" + c), "the", "hello", "world", "un",
    "##aff", "##able", "play", "##ing", "##ed", "token", "##izer", "is", "fun", "cafe", "naive", "中", "文", "##s",
    "don", "##t", "n"];
  const vocab = Object.fromEntries(words.map((w, i) => [w, i]));
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].map((w) => special(w, vocab[w])),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: { type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
        { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } }],
      special_tokens: { "[CLS]": { id: "[CLS]", ids: [vocab["[CLS]"]], tokens: ["[CLS]"] }, "[SEP]": { id: "[SEP]", ids: [vocab["[SEP]"]], tokens: ["[SEP]"] } } },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
}
function unigram() {
  const pieces = [["<unk>", 0], ["<s>", 0], ["</s>", 0], ["\u2581", -2.0], ["\u2581the", -3.0], ["\u2581hello", -4.0],
    ["\u2581world", -4.5], ["hel", -6.0], ["lo", -5.0], ["wor", -6.0], ["ld", -6.0], ["ing", -5.0], ["\u2581play", -5.0],
    ["er", -5.5], ["s", -5.2], ["\u2581a", -4.0], ["an", -5.0], ["\u2581an", -4.8], ["12", -6.0], ["1", -7.0],
    ...letters.map((c, i) => [c, -8 - i * 0.1]), ...digits.map((c, i) => [c, -9 - i * 0.1]), [".", -6.0], [",", -6.0]];
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [special("<unk>", 0), special("<s>", 1), special("</s>", 2)],
    normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }] },
    pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
    post_processor: { type: "TemplateProcessing", single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }, { Sequence: { id: "B", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
      special_tokens: { "</s>": { id: "</s>", ids: [2], tokens: ["</s>"] } } },
    decoder: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
    model: { type: "Unigram", unk_id: 0, vocab: pieces, byte_fallback: false },
  };
}
function bpeMisc() {
  const words = ["[UNK]", ...letters, ...digits, ".", ",", "!", "-", "th", "the", "in", "ing", "er", "he", "hel", "hell", "hello", "wo", "wor", "worl", "world"];
  const vocab = Object.fromEntries(words.map((w, i) => [w, i]));
  const merges = [["t", "h"], ["th", "e"], ["i", "n"], ["in", "g"], ["e", "r"], ["h", "e"], ["he", "l"], ["hel", "l"], ["hell", "o"], ["w", "o"], ["wo", "r"], ["wor", "l"], ["worl", "d"]];
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [special("[UNK]", 0),
      { id: 100, content: "<mask>", single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
      { id: 101, content: "<r>", single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
      { id: 102, content: "word", single_word: true, lstrip: false, rstrip: false, normalized: true, special: false }],
    normalizer: { type: "Sequence", normalizers: [{ type: "NFD" }, { type: "StripAccents" }, { type: "Lowercase" }, { type: "Strip", strip_left: true, strip_right: true }] },
    pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "CharDelimiterSplit", delimiter: "q" }, { type: "WhitespaceSplit" }, { type: "Punctuation", behavior: "Isolated" },
      { type: "Digits", individual_digits: true }, { type: "Split", pattern: { Regex: "th|[0-9]x" }, behavior: "Isolated", invert: false },
      { type: "Split", pattern: { String: "z" }, behavior: "Removed", invert: false }] },
    post_processor: null,
    decoder: { type: "Sequence", decoders: [{ type: "Fuse" }, { type: "Strip", content: "h", start: 1, stop: 0 }] },
    model: { type: "BPE", dropout: null, unk_token: "[UNK]", continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: false, vocab, merges },
  };
}
// The other SplitDelimiterBehavior values and invert, over a WordLevel vocabulary of single characters and words.
function splitBehaviors(behavior, invert, pattern) {
  const words = ["[UNK]", ...letters, ...digits, " ", "-", ",", "!", ".", "the", "a-", "-b", "--", "he", "llo"];
  const vocab = Object.fromEntries(words.map((w, i) => [w, i]));
  return {
    version: "1.0", truncation: null, padding: null, added_tokens: [special("[UNK]", 0)], normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern, behavior, invert }, { type: "Digits", individual_digits: false }] },
    post_processor: null, decoder: null, model: { type: "WordLevel", vocab, unk_token: "[UNK]" },
  };
}
const synthTexts = ["", "Hello world", "  hello   the world  ", "Unaffable playing played tokenizer!", "Café naïve ÀÉÎ",
  "don't stop, ok?", "中文 and 中国", "x1234y 42", "the thethe thethe", "hello\tworld\nagain", "a-b-c (d) [e]",
  "ＦＵＬＬ ｗｉｄｔｈ ①②", "unknown ✓ glyph ✓✓", "playing an anthem", "[CLS] inside [SEP] text [MASK]", "qqq zzz 0x",
  "the  <mask> is <r>  here", "a <mask><mask>  <r> <r>b", "word words sword WORD word!", " <mask>word<r>",
  "a-b--c---d-", "--x-y 12--34 -", "he-llo the-a-b", "İSTANBUL Straße ΣΑΣ ǅ", "①② ¾ ٣ x²"];
// encode's truncation and padding, over the BERT vocabulary
const bertTrunc = Object.assign(bert(), {
  truncation: { direction: "Right", max_length: 6, strategy: "LongestFirst", stride: 0 },
  padding: { strategy: { Fixed: 10 }, direction: "Right", pad_to_multiple_of: null, pad_id: 0, pad_type_id: 0, pad_token: "[PAD]" } });
const bertTruncLeft = Object.assign(bert(), {
  truncation: { direction: "Left", max_length: 5, strategy: "LongestFirst", stride: 2 },
  padding: { strategy: "BatchLongest", direction: "Left", pad_to_multiple_of: 4, pad_id: 0, pad_type_id: 0, pad_token: "[PAD]" } });
const synthetic = [["bert", bert()], ["bert_trunc", bertTrunc], ["bert_trunc_left", bertTruncLeft], ["unigram", unigram()], ["bpe_misc", bpeMisc()],
  ["split_prev", splitBehaviors("MergedWithPrevious", false, { String: "-" })],
  ["split_next", splitBehaviors("MergedWithNext", false, { Regex: "-+" })],
  ["split_contig", splitBehaviors("Contiguous", false, { String: "-" })],
  ["split_invert", splitBehaviors("Removed", true, { Regex: "[a-z]+" })]];

fs.mkdirSync(outDir, { recursive: true });
// Variants of the real files with some top-level components replaced ("override" in the output, applied by the
// C test too): GPT-2 style ByteLevel(use_regex, add_prefix_space) over the qwen3 vocab, and the newer
// SentencePiece layout (Metaspace pre-tokenizer/decoder, prepend_scheme "first", no normalizer) over mistral's.
const variants = [
  ["qwen3_gpt2", "qwen3/tokenizer.json", {
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } }],
  ["mistral_metaspace", "mistral/tokenizer.json", {
    normalizer: null,
    pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
    decoder: { type: "Sequence", decoders: [{ type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false }, { type: "ByteFallback" }, { type: "Fuse" }] } }],
];
const jobs = [...cases.map(([n, r]) => [n, r, null]), ...variants].map(([name, rel, override]) => {
    const tj = JSON.parse(fs.readFileSync(path.join(shared, "data/tokenizers", rel), "utf8"));
  if (override) Object.assign(tj, override);
  return { name, tj, rel, override, list: texts };
});
// The tokenizer.json stored in the vocab section of the reference's own CMF file (envelope: vocab_off, vocab_len
// as u64 at 0x50 and 0x58, CMF_FORMAT.md §1.2); the C test reads it from the same file.
{
  const cmf = fs.readFileSync(path.join(shared, "data/cmf-reference/tiny-F16.cmf"));
  const off = Number(cmf.readBigUInt64LE(0x50)), len = Number(cmf.readBigUInt64LE(0x58));
  const tj = JSON.parse(cmf.subarray(off, off + len).toString("utf8"));
  // The reference's writer leaves out fields the Rust deserializer requires; fill them with the defaults that
  // cmf's loader assumes (those of AddedToken::from(content, special)) so that HF can load the same tokenizer.
  for (const a of tj.added_tokens ?? []) {
    for (const k of ["single_word", "lstrip", "rstrip"]) a[k] ??= false;
    a.normalized ??= !a.special;
  }
  jobs.push({ name: "cmf_tiny", tj, rel: "cmf-reference/tiny-F16.cmf", cmf_vocab: true,
    list: synthTexts.concat(["Hello, World! 0123456789 ~{}|", "<|endoftext|>text<pad>"]) });
}
for (const [name, tj] of synthetic) {
  const file = `synth_${name}.tokenizer.json`;
  fs.writeFileSync(path.join(outDir, file), JSON.stringify(tj) + "\n");
  jobs.push({ name: "synth_" + name, tj, rel: file, local: true, list: synthTexts });
}
for (const { name, tj, rel, local, override, cmf_vocab, list } of jobs) {
  const tok = Tokenizer.fromString(JSON.stringify(tj));
  const out = [];
  for (const text of list) {
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const ids_special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    const decoded = await tok.decode(ids, false);
    const decoded_skip = await tok.decode(ids_special, true);
    out.push({ text, ids, ids_special, decoded, decoded_skip });
  }
  // decode skips ids that have no token: one case with such an id inserted
  const base = out.find((c) => c.ids.length > 1) ?? out[0];
  const withUnknown = [base.ids[0] ?? 0, 10000000, ...base.ids.slice(1)];
  const doc = { generator: `scripts/tokenizer/make_refs.mjs with ${pkg.name}@${pkg.version}`, tokenizer: rel, cases: out };
  doc.unknown_id_decode = { ids: withUnknown, decoded: await tok.decode(withUnknown, false) };
  if (local) doc.tokenizer_in_data_dir = true;
  if (override) doc.override = override;
  if (cmf_vocab) doc.tokenizer_in_cmf_vocab = true;
  const file = path.join(outDir, `hf_refs_${name}.json`);
  fs.writeFileSync(file, JSON.stringify(doc, null, 1) + "\n");
  console.log(`${file}: ${out.length} cases`);
}
