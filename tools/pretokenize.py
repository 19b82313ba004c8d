#!/usr/bin/env python3
"""Tokenize text into the token shards `linac train --data DIR` reads through mmap.

Input: text files (.txt: paragraphs, i.e. runs of non-blank lines, are documents, as linac's own
.txt reader splits them), JSONL (.jsonl: one document per line, the string in --field) and
Parquet (.parquet: the column --field; needs pyarrow, used only when it is importable); a file or
a directory of them (sorted path order). Each document's ids are followed by the tokenizer's
document separator, as linac joins a corpus: SentencePiece's </s> (else <unk>); for a Hugging
Face tokenizer.json the first of --eos-token / </s> / <|endoftext|> / <eos> it holds.

Output: OUT/NAME-00000.bin (ids, little-endian --dtype), .idx (each document's first position,
little-endian uint64) and .json (the header: format, dtype, vocab_size, tokens, documents,
document_separator, tokenizer kind / path / sha256, sources). A shard is closed after
--shard-tokens tokens at a document boundary (documents are never split); files are written
under .tmp names and renamed, the header last, so a shard without its header is unfinished.

  python3 tools/pretokenize.py corpus/ --tokenizer bench/tokenizer32k.model --out shards/
  python3 tools/pretokenize.py data.jsonl --field content --tokenizer tokenizer.json --workers 8 --dtype uint32 --out shards/

Needs `sentencepiece` for a .model and `tokenizers` for a tokenizer.json (tools/setup.sh installs both).
"""
import argparse
import array
import hashlib
import json
import multiprocessing
import os
import sys
import time

FORMAT = "linac-token-shard"
DTYPES = {"uint16": ("H", 2), "uint32": ("I", 4)}
UINT16_IDS = 1 << 16
DEFAULT_SHARD_TOKENS = 1 << 28          # 512 MiB of uint16 ids per shard
DOCUMENTS_PER_TASK = 256                # documents a worker tokenizes per task
PROGRESS_EVERY_S = 5.0
HF_EOS_CANDIDATES = ("</s>", "<|endoftext|>", "<eos>")
BLANK = " \t\r\f\v"
INPUT_EXTENSIONS = (".txt", ".jsonl", ".parquet")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Tokenizer:
    """A SentencePiece .model or a Hugging Face tokenizer.json, loaded once per process."""

    def __init__(self, path, eos_token=None):
        self.path = os.path.abspath(path)
        if path.endswith(".json"):
            try:
                from tokenizers import Tokenizer as HfTokenizer
            except ImportError:
                sys.exit("pretokenize: reading a tokenizer.json needs the `tokenizers` package (tools/setup.sh installs it)")
            self.kind = "huggingface"
            self.hf = HfTokenizer.from_file(path)
            self.vocab_size = self.hf.get_vocab_size(with_added_tokens=True)
            names = [eos_token] if eos_token else list(HF_EOS_CANDIDATES)
            ids = [self.hf.token_to_id(n) for n in names]
            found = [i for i in ids if i is not None]
            if not found:
                sys.exit(f"pretokenize: {path} holds none of {', '.join(names)}; name its end-of-document token with --eos-token")
            self.separator = found[0]
        else:
            try:
                import sentencepiece
            except ImportError:
                sys.exit("pretokenize: reading a SentencePiece model needs the `sentencepiece` package (tools/setup.sh installs it)")
            self.kind = "sentencepiece"
            self.sp = sentencepiece.SentencePieceProcessor(model_file=path)
            self.vocab_size = self.sp.get_piece_size()
            # As linac's runtime: </s>, or <unk> for a model trained without one.
            self.separator = self.sp.eos_id() if self.sp.eos_id() >= 0 else self.sp.unk_id()

    def encode(self, texts):
        if self.kind == "huggingface":
            return [e.ids for e in self.hf.encode_batch(texts, add_special_tokens=False)]
        return self.sp.encode(texts)


_worker_tokenizer = None


def _init_worker(path, eos_token):
    global _worker_tokenizer
    _worker_tokenizer = Tokenizer(path, eos_token)


def _encode_batch(texts):
    return _worker_tokenizer.encode(texts)


def text_documents(path):
    """Paragraphs of a text file, exactly as linac's .txt reader forms them."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    paragraph = []
    for line in text.split("\n"):
        if line.strip(BLANK) == "":
            if paragraph:
                yield "\n".join(paragraph)
            paragraph = []
        else:
            paragraph.append(line)
    if paragraph:
        yield "\n".join(paragraph)


def jsonl_documents(path, field):
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip(BLANK + "\n") == "":
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"pretokenize: {path}:{number}: invalid JSON ({e})")
            if not isinstance(record, dict) or not isinstance(record.get(field), str):
                sys.exit(f"pretokenize: {path}:{number}: expected an object with a string field \"{field}\" (see --field)")
            yield record[field]


def parquet_documents(path, field):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        sys.exit(f"pretokenize: {path}: reading Parquet needs pyarrow, which is not installed")
    table = pq.ParquetFile(path)
    if field not in table.schema_arrow.names:
        sys.exit(f"pretokenize: {path}: no column \"{field}\" (columns: {', '.join(table.schema_arrow.names)}; see --field)")
    for batch in table.iter_batches(columns=[field]):
        for value in batch.column(0).to_pylist():
            if value is not None:
                yield value


def input_files(path):
    if os.path.isdir(path):
        files = sorted(os.path.join(root, name) for root, dirs, names in os.walk(path, followlinks=True)
                       for name in names if not name.startswith(".") and name.lower().endswith(INPUT_EXTENSIONS))
        if not files:
            sys.exit(f"pretokenize: {path}: no {', '.join(INPUT_EXTENSIONS)} files below it")
        return files
    if not os.path.isfile(path):
        sys.exit(f"pretokenize: {path}: no such file or directory")
    if not path.lower().endswith(INPUT_EXTENSIONS):
        sys.exit(f"pretokenize: {path}: unknown extension (expected {', '.join(INPUT_EXTENSIONS)})")
    return [path]


def documents(files, field):
    for path in files:
        lower = path.lower()
        if lower.endswith(".txt"):
            yield from text_documents(path)
        elif lower.endswith(".jsonl"):
            yield from jsonl_documents(path, field)
        else:
            yield from parquet_documents(path, field)


def batches(iterable, size):
    batch = []
    for item in iterable:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class ShardWriter:
    """Appends documents to OUT/NAME-NNNNN.{bin,idx,json}, closing a shard past shard_tokens."""

    def __init__(self, out, name, dtype, shard_tokens, tokenizer, sources):
        self.out, self.name, self.dtype, self.shard_tokens = out, name, dtype, shard_tokens
        self.typecode, self.width = DTYPES[dtype]
        self.header = {
            "format": FORMAT, "dtype": dtype, "vocab_size": tokenizer.vocab_size,
            "document_separator": tokenizer.separator,
            "tokenizer": {"kind": tokenizer.kind, "path": tokenizer.path, "sha256": sha256(tokenizer.path)},
            "sources": [os.path.abspath(s) for s in sources],
        }
        self.shards = 0
        self.total_tokens = 0
        self.total_documents = 0
        self._open()

    def _open(self):
        self.stem = os.path.join(self.out, f"{self.name}-{self.shards:05d}")
        self.bin = open(self.stem + ".bin.tmp", "wb")
        self.idx = open(self.stem + ".idx.tmp", "wb")
        self.tokens = 0
        self.documents = 0

    def add(self, ids):
        ids = array.array(self.typecode, ids)
        assert ids.itemsize == self.width, "the platform's array item size differs from the dtype's"
        starts = array.array("Q", [self.tokens])
        if sys.byteorder == "big":
            ids.byteswap()
            starts.byteswap()
        ids.tofile(self.bin)
        starts.tofile(self.idx)
        self.tokens += len(ids)
        self.documents += 1
        if self.tokens >= self.shard_tokens:
            self._close()
            self._open()

    def _close(self):
        self.bin.close()
        self.idx.close()
        if self.documents == 0:
            os.remove(self.stem + ".bin.tmp")
            os.remove(self.stem + ".idx.tmp")
            return
        os.replace(self.stem + ".bin.tmp", self.stem + ".bin")
        os.replace(self.stem + ".idx.tmp", self.stem + ".idx")
        header = dict(self.header, tokens=self.tokens, documents=self.documents)
        with open(self.stem + ".json.tmp", "w") as f:
            json.dump(header, f, indent=1)
            f.write("\n")
        os.replace(self.stem + ".json.tmp", self.stem + ".json")
        self.shards += 1
        self.total_tokens += self.tokens
        self.total_documents += self.documents

    def finish(self):
        self._close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="a .txt / .jsonl / .parquet file or a directory of them")
    parser.add_argument("--tokenizer", required=True, help="a SentencePiece .model or a Hugging Face tokenizer.json")
    parser.add_argument("--out", required=True, help="the directory the shards are written to (created)")
    parser.add_argument("--field", default="text", help="the JSONL field / Parquet column holding the text")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="id width (default uint16 when the vocabulary fits)")
    parser.add_argument("--workers", type=int, default=1, help="tokenizing processes")
    parser.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS, help="tokens per shard (at least)")
    parser.add_argument("--name", default="shard", help="shard file name prefix")
    parser.add_argument("--eos-token", help="a tokenizer.json's end-of-document token")
    args = parser.parse_args()
    if args.workers < 1 or args.shard_tokens < 1:
        sys.exit("pretokenize: --workers and --shard-tokens must be >= 1")

    tokenizer = Tokenizer(args.tokenizer, args.eos_token)
    dtype = args.dtype or ("uint16" if tokenizer.vocab_size <= UINT16_IDS else "uint32")
    if dtype == "uint16" and tokenizer.vocab_size > UINT16_IDS:
        sys.exit(f"pretokenize: {args.tokenizer} has {tokenizer.vocab_size} ids, more than uint16 holds; use --dtype uint32")
    files = input_files(args.input)
    os.makedirs(args.out, exist_ok=True)
    if any(n.endswith(".json") for n in os.listdir(args.out)):
        sys.exit(f"pretokenize: {args.out} already holds shards; write to an empty directory")
    writer = ShardWriter(args.out, args.name, dtype, args.shard_tokens, tokenizer, files)

    start = last = time.monotonic()
    tasks = batches(documents(files, args.field), DOCUMENTS_PER_TASK)
    pool = multiprocessing.Pool(args.workers, _init_worker, (args.tokenizer, args.eos_token)) if args.workers > 1 else None
    encoded = pool.imap(_encode_batch, tasks) if pool else map(tokenizer.encode, tasks)
    try:
        for batch in encoded:
            for ids in batch:
                if ids:  # as linac's readers: an empty document is dropped, separator and all
                    writer.add(list(ids) + [tokenizer.separator])
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                last = now
                done = writer.total_tokens + writer.tokens
                print(f"pretokenize: {writer.total_documents + writer.documents} documents, {done} tokens, "
                      f"{done / (now - start):.0f} tokens/s", file=sys.stderr, flush=True)
    finally:
        if pool:
            pool.close()
            pool.join()
    writer.finish()
    elapsed = time.monotonic() - start
    print(f"pretokenize: {writer.shards} shards, {writer.total_documents} documents, {writer.total_tokens} tokens "
          f"({dtype}, vocab {tokenizer.vocab_size}, {tokenizer.kind}) in {elapsed:.1f} s -> {args.out}")


if __name__ == "__main__":
    main()
