"""Byte-level BPE, GPT-2 style, trained and applied in plain Python; saved as a Hugging Face
tokenizer.json that the `tokenizers` library and hydragen's C++ tokenizer both load.

The encoder follows `tokenizers`' pipeline for that file: special tokens are cut out of the
text first (leftmost, longest), each remaining piece is split by the GPT-2 regex (the
ByteLevel pre-tokenizer with use_regex, no prefix space), every byte becomes its printable
stand-in character, and each word is merged by rank (the lowest-ranked adjacent pair first,
leftmost among equals) until no merge applies.
"""
import collections
import heapq
import json

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_SPLIT = regex.compile(GPT2_PATTERN)


def bytes_to_unicode():
    """GPT-2's table: each byte as a printable character (printable Latin-1 bytes as
    themselves, the rest shifted to U+0100 and up)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    shift = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + shift)
            shift += 1
    return dict(zip(printable, map(chr, chars)))


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def pre_tokenize(text):
    """The words BPE sees: regex pieces, each as its byte stand-in characters."""
    return ["".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8")) for piece in _SPLIT.findall(text)]


def train(texts, merges_wanted):
    """Learns merges_wanted merges from the word counts of texts. Each step merges the most
    frequent adjacent pair (ties: the smallest pair in string order), updating only the
    words that hold it; a heap holds the counts, entries gone stale are skipped when popped.
    Returns (vocab {token: id}, merges [(left, right)])."""
    counts = collections.Counter()
    for text in texts:
        counts.update(pre_tokenize(text))
    words = [list(w) for w in counts]
    freqs = list(counts.values())
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)  # pair -> indices of words holding it
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    heap = [(-c, pair) for pair, c in pair_counts.items()]
    heapq.heapify(heap)

    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    merges = []
    while len(merges) < merges_wanted and heap:
        negative_count, best = heapq.heappop(heap)
        if pair_counts.get(best, 0) != -negative_count or negative_count == 0:
            continue  # stale: the pair's count changed after this entry was pushed
        merged = best[0] + best[1]
        merges.append(best)
        vocab[merged] = len(vocab)
        changed = set()
        for i in sorted(where.pop(best)):
            w = words[i]
            for pair in zip(w, w[1:]):  # take the word's pairs out, put the merged word's in
                pair_counts[pair] -= freqs[i]
                changed.add(pair)
            words[i] = w = _merge_word(w, best, merged)
            for pair in zip(w, w[1:]):
                pair_counts[pair] += freqs[i]
                where[pair].add(i)
                changed.add(pair)
        del pair_counts[best]
        for pair in changed - {best}:
            if pair_counts[pair] > 0:
                heapq.heappush(heap, (-pair_counts[pair], pair))
    return vocab, merges


def _merge_word(symbols, pair, merged):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


class ByteLevelBpe:
    """Encoder and decoder of a trained vocabulary; special tokens get the ids after it."""

    def __init__(self, vocab, merges, special_tokens, bos_token, eos_token):
        self.vocab = dict(vocab)
        self.merges = [tuple(m) for m in merges]
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self.special = {}
        for token in special_tokens:
            self.special[token] = len(self.vocab) + len(self.special)
        self.bos_token, self.eos_token = bos_token, eos_token
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: t for t, i in self.special.items()})
        alternatives = sorted(self.special, key=len, reverse=True)
        self._special_split = regex.compile("(" + "|".join(regex.escape(t) for t in alternatives) + ")")
        self._cache = {}

    @property
    def vocab_size(self):
        return len(self.vocab) + len(self.special)

    def encode(self, text, add_special_tokens=True):
        ids = [self.special[self.bos_token]] if add_special_tokens else []
        for i, piece in enumerate(self._special_split.split(text)):
            if i % 2 == 1:
                ids.append(self.special[piece])
                continue
            for word in pre_tokenize(piece):
                ids.extend(self._word_ids(word))
        return ids

    def _word_ids(self, word):
        if word not in self._cache:
            symbols = list(word)
            while len(symbols) > 1:
                ranked = [(self.ranks.get(p, len(self.ranks)), i) for i, p in enumerate(zip(symbols, symbols[1:]))]
                rank, i = min(ranked)
                if rank == len(self.ranks):
                    break
                symbols = _merge_word(symbols, self.merges[rank], symbols[i] + symbols[i + 1])
            self._cache[word] = [self.vocab[s] for s in symbols]
        return self._cache[word]

    def decode(self, ids, skip_special_tokens=False):
        """As `tokenizers`' ByteLevel decoder: the bytes of every token (a special token's
        own text when kept) joined, then read as UTF-8 with U+FFFD for invalid bytes."""
        data = bytearray()
        for i in ids:
            token = self.id_to_token[i]
            if token in self.special:
                if not skip_special_tokens:
                    data.extend(token.encode("utf-8"))
            else:
                data.extend(CHAR_TO_BYTE[c] for c in token)
        return data.decode("utf-8", errors="replace")

    def tokenizer_json(self):
        """The Hugging Face tokenizer.json of this tokenizer, as GPT-2's is laid out, with a
        template post-processor that puts BOS first."""
        bos = self.bos_token
        added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for t, i in self.special.items()]
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        template = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [self.special[bos]], "tokens": [bos]}}}
        return {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": byte_level,
            "post_processor": {"type": "Sequence", "processors": [dict(byte_level, trim_offsets=False), template]},
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": self.vocab, "merges": [list(m) for m in self.merges]}}

    def save(self, path):
        path.write_text(json.dumps(self.tokenizer_json(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def load(path, bos_token, eos_token):
    """A ByteLevelBpe from a tokenizer.json that tokenizer_json() wrote."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    added = sorted(spec["added_tokens"], key=lambda t: t["id"])
    tokenizer = ByteLevelBpe(spec["model"]["vocab"], spec["model"]["merges"], [t["content"] for t in added],
                             bos_token, eos_token)
    if [tokenizer.special[t["content"]] for t in added] != [t["id"] for t in added]:
        raise ValueError(f"{path}: the added tokens do not follow the vocabulary")
    return tokenizer
