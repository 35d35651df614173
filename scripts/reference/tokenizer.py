#!/usr/bin/env python3
"""Tokenizer reference fixtures for hydragen's tokenizer tests.

Trains tiny tokenizers on tests/fixtures/tokenizer/corpus.txt and records what the reference
libraries make of a fixed set of test strings:
  bytelevel/  byte-level BPE, Llama-3 regex Split + ByteLevel, ignore_merges   (`tokenizers`)
  sp_bpe/     SentencePiece-style BPE with byte fallback, Llama-2 layout:
              normalizer Prepend+Replace, decoder Replace/ByteFallback/Fuse/Strip (`tokenizers`)
  metaspace/  the same model behind a Metaspace pre-tokenizer (prepend_scheme first) and a
              Metaspace decoder                                                     (`tokenizers`)
  spm/        a SentencePiece BPE tokenizer.model with byte fallback           (`sentencepiece`)
  qwen2/      byte-level BPE as Qwen2.5 / Qwen3 ship it: an NFC normalizer, Qwen's regex Split
              (single digits) + ByteLevel, <|endoftext|> / <|im_start|> / <|im_end|>, no BOS;
              its strings add decomposed and composed forms (NFC_STRINGS)      (`tokenizers`)
Each folder gets the tokenizer files and expected.json: for every string its ids without and
with special tokens and the decodings, plus decodings of random id sequences.

Standalone: python3 scripts/reference/tokenizer.py --out DIR
From scripts/make-reference.py: make_tokenizer_fixtures(out_dir).
Needs `tokenizers` and `sentencepiece`; `transformers` is optional (a cross-check).
"""
import argparse
import json
import random
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "tokenizer" / "corpus.txt"

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
META = "\u2581"  # ▁
# Text that NFC changes: combining marks, decomposed Hangul, singletons, and text it keeps.
NFC_STRINGS = [
    "e\u0301", "cafe\u0301", "A\u030a", "\u212b", "\u2126 ohm", "o\u0308\u0304", "a\u0323\u0302",
    "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165", "\u0041\u0301\u0301",
    "\u0958 \u0915\u093c", "\u00c5 A\u030a \u212b", "\uf900\uf901", "\u1e9b\u0323", "q\u0307\u0323",
    "\u0344", "\u0f73", "\ufb01 \u00bd \u2460", "Zaz\u0307o\u0301\u0142c\u0301", "Vie\u0323\u0302t",
    "<|im_start|>user\nCafe\u0301?<|im_end|>", "\u00e9\u0301\u0301\u0301", "\u0301 leading mark",
]

# Strings chosen to hit the edges: whitespace runs, digits, contractions, scripts, emoji with
# ZWJ and modifiers, characters missing from the training corpus, special-token text.
HAND_WRITTEN = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t  \n\n  x", "a", "A", "é", "中",
    "Hello, world!", "hello world", " hello world", "  hello  world  ", "hello\tworld", "hello\nworld",
    "Hello\n\n\nWorld\n", "trailing space ", "trailing spaces    ", "   leading spaces",
    "It's", "it's", "IT'S", "They'll we've I'm you're he'd it'd", "don't DON'T Don'T", "'s 's 'S",
    "rock'n'roll", "O'Neil's café", "123", "1234", "12345", "1234567890", "3.14159",
    "3141592653589793238462643383279502884197169399375105820974944",
    "9,223,372,036,854,775,807", "0.000000001", "1e-10", "-42", "+7", "2024-05-02T13:07:55Z",
    "v1.2.3-rc.4", "x=1;y=2", "a+b=c", "(a)", "[1, 2, 3]", "{\"key\": \"value\"}",
    "def f(x):\n    return x * 2\n", "int main() {\n\treturn 0;\n}\n", "    indented four", "\tindented tab",
    "if (a && b || !c) { x->y = z[0]; }", "fn main() { println!(\"{}\", 42); }",
    "SELECT * FROM t WHERE id = 7;", "#!/bin/sh\necho $HOME | grep -v ~", "<div class=\"a\">b</div>",
    "snake_case camelCase PascalCase kebab-case", "https://example.org/a/b?c=d&e=f#g",
    "naïve façade résumé jalapeño Ångström", "Zażółć gęślą jaźń", "Tiếng Việt", "Ελληνικά",
    "Привет, мир!", "Съешь же ещё этих мягких булок", "Київ", "مرحبا بالعالم", "שלום עולם",
    "你好，世界！", "计算机科学", "日本語のテキスト", "カタカナ", "한국어 텍스트", "नमस्ते", "สวัสดี",
    "😀", "😀😀😀", "👍🏽", "👨‍👩‍👧‍👦", "👩🏽‍💻 codes", "🏳️‍🌈", "🇩🇪🇯🇵", "🐈‍⬛", "❤️", "a😀b", " 😀 ",
    "𝄞 𝐀𝐁𝐂 𐌰𐌱", "ＡＢＣ１２３", "ｶﾀｶﾅ", "x² H₂O", "∑∫∂√∞≈≠", "“quotes” ‘single’ — – …",
    "a\u00a0b", "a\u200bb", "a\u3000b", "e\u0301", "\u2581", "\u2581\u2581x", "▁hello▁world",
    "Ġ", "Ċ", "ĠĠ", "\u0000", "\u007f", "\ufeffbom", "\ufffd", "Ꙭ ꙮ ᚠᛇᚻ ⴰⵣⵓⵍ",  # rare scripts
    "龘 䨻 𪚥", "🦩🦒🪿🫎", "ǅ ǈ ǋ", "ﬁ ﬂ", "İstanbul ıi", "ß ẞ ſ", "ſt 'S 'ſ",
    "<s>", "</s>", "<unk>", "<s>hello", "hello</s>", "<s> hello </s>", "<s><s></s>", "< s>", "<s",
    "<|begin_of_text|>", "<|begin_of_text|>Hello", "text<|end_of_text|>more", "<|eot_id|>\n\n",
    "<|begin_of_text|><|begin_of_text|>", "<|begin_of_text", "<|tool|>", "call <|tool|> now",
    "call   <|tool|>   now", "hydragen", "hydragen is fast", "the hydragen engine", "xhydragen",
    "hydragen_x", "hydragen's", "(hydragen)", "HYDRAGEN", "hydragenhydragen", "hydragen hydragen",
    "<s>hydragen</s>", "Ünïcödé <|eot_id|> and 😀 <s> mixed\n\t ",
]


def test_strings(corpus: str):
    rng = random.Random(20240502)
    strings = list(HAND_WRITTEN)
    lines = [l for l in corpus.split("\n") if l.strip()]
    strings += rng.sample(lines, 80)
    for _ in range(70):  # random windows, crossing lines and cutting emoji sequences
        start = rng.randrange(len(corpus))
        strings.append(corpus[start:start + rng.randint(1, 120)])
    specials = ["<s>", "</s>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|tool|>",
                " <|tool|> ", "hydragen", " hydragen "]
    for _ in range(25):  # special-token text inside ordinary text
        parts = []
        for _ in range(rng.randint(2, 5)):
            parts.append(rng.choice(specials) if rng.random() < 0.4 else rng.choice(lines)[:40])
        strings.append(rng.choice(["", " ", "\n"]).join(parts))
    seen, unique = set(), []
    for s in strings:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def write_json(path: Path, obj):
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def random_id_sequences(vocab_size: int, seed: int):
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(rng.randint(1, 12))] for _ in range(40)]


def record_hf(tok_dir: Path, strings):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    cases = []
    for s in strings:
        ids = tok.encode(s, add_special_tokens=False).ids
        ids_special = tok.encode(s, add_special_tokens=True).ids
        cases.append({
            "text": s, "ids": ids, "ids_with_special": ids_special,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_with_special": tok.decode(ids_special, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids_special, skip_special_tokens=True),
        })
    random_decodes = []
    for ids in random_id_sequences(tok.get_vocab_size(with_added_tokens=True), 7):
        random_decodes.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                               "text_skip_special": tok.decode(ids, skip_special_tokens=True)})
    expected = {"library": "tokenizers", "cases": cases, "random_decodes": random_decodes,
                "transformers_check": transformers_check(tok_dir, cases)}
    write_json(tok_dir / "expected.json", expected)


def transformers_check(tok_dir: Path, cases):
    """Counts where transformers' AutoTokenizer disagrees with `tokenizers` (expected: none)."""
    try:
        from transformers import AutoTokenizer
        import transformers
        hf = AutoTokenizer.from_pretrained(str(tok_dir))
        mismatches = []
        for c in cases:
            if hf.encode(c["text"], add_special_tokens=False) != c["ids"]:
                mismatches.append(["encode", c["text"]])
            if hf.encode(c["text"], add_special_tokens=True) != c["ids_with_special"]:
                mismatches.append(["encode_special", c["text"]])
        return {"transformers": transformers.__version__, "class": type(hf).__name__,
                "mismatches": mismatches[:20], "mismatch_count": len(mismatches)}
    except Exception as e:  # the cross-check is optional
        return {"error": repr(e)[:500]}


def train_bytelevel(lines, out: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors, Regex
    from tokenizers import AddedToken
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(lines, trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True  # as in Llama 3
    tok = Tokenizer.from_str(json.dumps(spec))
    # Specials after the vocabulary, as Llama 3 has them; two non-special added tokens.
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<s>", "</s>"])
    tok.add_tokens([AddedToken("<|tool|>", lstrip=True, rstrip=True, normalized=False, special=False),
                    AddedToken("hydragen", single_word=True, normalized=True, special=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": False,
        "model_max_length": 8192})


def train_qwen2(lines, out: Path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, trainers, Regex
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "clean_up_tokenization_spaces": False, "model_max_length": 32768,
        "errors": "replace", "split_special_tokens": False})


def train_sp_bpe(lines, out_sp: Path, out_metaspace: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=800 - 256, min_frequency=2, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150)
    tok.train_from_iterator(lines, trainer)
    trained = json.loads(tok.to_str())["model"]
    # Llama 2 layout: <unk> <s> </s>, then the 256 byte tokens, then the learned pieces.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [m if isinstance(m, str) else " ".join(m) for m in trained["merges"]]

    def added(i, content):
        return {"id": i, "content": content, "single_word": False, "lstrip": False,
                "rstrip": False, "normalized": False, "special": True}

    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
             "ignore_merges": False, "vocab": vocab, "merges": merges}
    bos_template = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    n = len(vocab)
    added_tokens = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"), added(n, "<|begin_of_text|>")]
    llama2 = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META}]},
        "pre_tokenizer": None, "post_processor": bos_template,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": model}
    metaspace = dict(llama2)
    metaspace["normalizer"] = None
    metaspace["pre_tokenizer"] = {"type": "Metaspace", "replacement": META,
                                  "prepend_scheme": "first", "split": False}
    metaspace["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    merges_as_pairs = [m.split(" ") for m in merges]
    metaspace["model"] = dict(model, merges=merges_as_pairs)  # the newer pair format
    for out, spec, bos_form in ((out_sp, llama2, "dict"), (out_metaspace, metaspace, "str")):
        out.mkdir(parents=True, exist_ok=True)
        Tokenizer.from_str(json.dumps(spec))  # must load
        write_json(out / "tokenizer.json", spec)  # merges kept in the format chosen above
        bos = {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
               "rstrip": False, "single_word": False} if bos_form == "dict" else "<s>"
        write_json(out / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": "</s>",
            "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
            "clean_up_tokenization_spaces": False})


def train_spm(corpus_path: Path, out: Path, strings):
    import sentencepiece as spm
    out.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=str(corpus_path), model_prefix=str(out / "tokenizer"), model_type="bpe",
        vocab_size=900, hard_vocab_limit=False, byte_fallback=True, character_coverage=0.98,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        split_digits=True, allow_whitespace_only_pieces=True, max_sentence_length=100000,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=4, minloglevel=2)
    (out / "tokenizer.vocab").unlink(missing_ok=True)
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    bos = sp.bos_id()
    cases = []
    for s in strings:
        ids = sp.encode(s, out_type=int)
        with_bos = [bos] + ids
        cases.append({
            "text": s, "ids": ids, "ids_with_special": with_bos, "decoded": sp.decode(ids),
            "decoded_with_special": sp.decode(with_bos),
            "decoded_skip_special": sp.decode([i for i in with_bos if not sp.is_control(i)])})
    random_decodes = []
    for ids in random_id_sequences(sp.get_piece_size(), 11):
        random_decodes.append({"ids": ids, "text": sp.decode(ids),
                               "text_skip_special": sp.decode([i for i in ids if not sp.is_control(i)])})
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False})
    write_json(out / "expected.json", {"library": "sentencepiece " + spm.__version__,
                                       "cases": cases, "random_decodes": random_decodes})


def make_tokenizer_fixtures(out_dir, corpus_path=CORPUS):
    """Writes the five tokenizer folders under out_dir; returns the names of those that failed."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = Path(corpus_path).read_text(encoding="utf-8")
    # Chunks of a few lines, so that the trainers see newlines and whitespace runs.
    raw_lines = corpus.split("\n")
    lines = ["\n".join(raw_lines[i:i + 8]) + "\n" for i in range(0, len(raw_lines), 8)]
    strings = test_strings(corpus)
    write_json(out_dir / "strings.json", strings)
    steps = {
        "bytelevel": lambda: (train_bytelevel(lines, out_dir / "bytelevel"),
                              record_hf(out_dir / "bytelevel", strings)),
        "sp_bpe": lambda: (train_sp_bpe(lines, out_dir / "sp_bpe", out_dir / "metaspace"),
                           record_hf(out_dir / "sp_bpe", strings),
                           record_hf(out_dir / "metaspace", strings)),
        "spm": lambda: train_spm(Path(corpus_path), out_dir / "spm", strings),
        "qwen2": lambda: (train_qwen2(lines, out_dir / "qwen2"),
                          record_hf(out_dir / "qwen2", strings + NFC_STRINGS)),
    }
    failed = []
    for name, step in steps.items():
        try:
            step()
            print(f"tokenizer fixtures: {name} ok", flush=True)
        except Exception:
            failed.append(name)
            msg = traceback.format_exc()
            print(f"tokenizer fixtures: {name} FAILED\n{msg}", file=sys.stderr, flush=True)
            with open(out_dir / "errors.log", "a", encoding="utf-8") as log:
                log.write(f"== {name}\n{msg}\n")
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--corpus", default=str(CORPUS), help="training text")
    args = parser.parse_args()
    failed = make_tokenizer_fixtures(args.out, args.corpus)
    try:
        import tokenizers
        print("tokenizers", tokenizers.__version__)
    except ImportError:
        pass
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
