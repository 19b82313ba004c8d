#!/usr/bin/env python3
"""tools/pretokenize.py end to end, with `linac train` reading its shards.

  pretokenize_test.py LINAC LINAC_DATA_TESTS

On generated paragraphs and a small SentencePiece model trained here: pretokenize (2 workers,
several shards) -> linac_data_tests checks the shards hold exactly the ids linac's own
SentencePiece reader makes of the text; `linac train --data SHARDS` refuses a model of another
vocabulary, another model of the same size and a --data-dtype the headers do not hold; a
Hugging Face tokenizer.json's shards (from JSONL, uint32) hold its ids; a run resumed from its step-2 checkpoint
logs the same losses for steps 3 and 4 as the run that went straight through, and that
checkpoint records the data position (windows consumed). Needs `sentencepiece` and `tokenizers`.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORDS = ("the cat dog sees a small red big house river stone runs over under near blue green "
         "tree bird sings loud quiet morning evening light dark and then because while").split()
PARAGRAPHS = 300
VOCAB = 200
SEQ_LEN, BATCH, STEPS = 32, 2, 4


def run(cmd, env=None, expect_rc=0):
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if expect_rc is not None and result.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {result.returncode} (expected {expect_rc})\n"
                 f"{result.stdout}\n{result.stderr}")
    return result


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return {j["step"]: j["loss"] for j in map(json.loads, f) if "loss" in j}


def main():
    linac, data_tests = sys.argv[1], sys.argv[2]
    import sentencepiece
    tmp = tempfile.mkdtemp(prefix="linac_pretokenize_test_")
    try:
        rng = random.Random(3)
        text = "\n\n".join(
            "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(rng.randint(1, 3)))
            for _ in range(PARAGRAPHS)) + "\n"
        text_path = os.path.join(tmp, "corpus.txt")
        with open(text_path, "w") as f:
            f.write(text)
        model_prefix = os.path.join(tmp, "spm")
        sentencepiece.SentencePieceTrainer.train(input=text_path, model_prefix=model_prefix, vocab_size=VOCAB,
                                                 model_type="bpe", minloglevel=2)
        model = model_prefix + ".model"
        shards = os.path.join(tmp, "shards")
        out = run([sys.executable, os.path.join(ROOT, "tools", "pretokenize.py"), text_path, "--tokenizer", model,
                   "--out", shards, "--workers", "2", "--shard-tokens", "1500"]).stdout
        bins = sorted(n for n in os.listdir(shards) if n.endswith(".bin"))
        if len(bins) < 2:
            sys.exit(f"FAIL: expected several shards, got {bins}\n{out}")
        header = json.load(open(os.path.join(shards, bins[0][:-4] + ".json")))
        assert header["dtype"] == "uint16" and header["vocab_size"] == VOCAB, header

        env = dict(os.environ, LINAC_PRETOKENIZED=f"{shards};{text_path};{model}")
        result = run([data_tests, "--gtest_filter=TokenShards.PretokenizedShardsHoldTheRuntimeTokenizersIds"], env)
        if "[  PASSED  ] 1 test." not in result.stdout:
            sys.exit(f"FAIL: the round-trip test did not run\n{result.stdout}")

        spec = os.path.join(ROOT, "specs", "gated_deltanet.yaml")
        base = [linac, "train", spec, "--schedule", "3:1", "--preset", "tiny", "--seq-len", str(SEQ_LEN),
                "--batch", str(BATCH), "--device", "cpu", "--data", shards]
        wrong = run(base + ["--steps", "1", "--out", os.path.join(tmp, "wrong")], expect_rc=1)
        if f"{VOCAB}-entry vocabulary, but the model's is 256" not in wrong.stderr:
            sys.exit(f"FAIL: no vocabulary error\n{wrong.stderr}")
        dtype = run(base + ["--tokenizer", model, "--data-dtype", "uint32", "--steps", "1",
                            "--out", os.path.join(tmp, "dtype")], expect_rc=1)
        if "uint16 ids" not in dtype.stderr or "uint32 was asked for" not in dtype.stderr:
            sys.exit(f"FAIL: no dtype error\n{dtype.stderr}")

        # A model of the same size trained on other text: the same vocabulary size, other pieces.
        other_text = os.path.join(tmp, "other.txt")
        with open(other_text, "w") as f:
            f.write(text.upper())
        sentencepiece.SentencePieceTrainer.train(input=other_text, model_prefix=model_prefix + "-other",
                                                 vocab_size=VOCAB, model_type="bpe", minloglevel=2)
        other = run(base + ["--tokenizer", model_prefix + "-other.model", "--steps", "1",
                            "--out", os.path.join(tmp, "other")], expect_rc=1)
        if "made with another tokenizer" not in other.stderr:
            sys.exit(f"FAIL: no tokenizer mismatch error\n{other.stderr}")

        # A Hugging Face tokenizer.json, JSONL input, uint32: the shards hold its ids, linac maps them.
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        hf = Tokenizer(models.BPE(unk_token="<unk>"))
        hf.pre_tokenizer = pre_tokenizers.Whitespace()
        hf.train([text_path], trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "</s>"], show_progress=False))
        hf_path = os.path.join(tmp, "tokenizer.json")
        hf.save(hf_path)
        jsonl = os.path.join(tmp, "docs.jsonl")
        paragraphs = text.strip("\n").split("\n\n")
        with open(jsonl, "w") as f:
            for p in paragraphs:
                f.write(json.dumps({"body": p}) + "\n")
        hf_shards = os.path.join(tmp, "hf")
        run([sys.executable, os.path.join(ROOT, "tools", "pretokenize.py"), jsonl, "--field", "body",
             "--tokenizer", hf_path, "--dtype", "uint32", "--out", hf_shards])
        with open(os.path.join(hf_shards, "shard-00000.bin"), "rb") as f:
            got = list(struct.unpack(f"<{os.path.getsize(f.name) // 4}I", f.read()))
        eos = hf.token_to_id("</s>")
        expected = [i for e in hf.encode_batch(paragraphs, add_special_tokens=False) for i in e.ids + [eos]]
        if got != expected:
            sys.exit("FAIL: the tokenizer.json shard does not hold the tokenizer's ids")
        hf_train = run(base[:-1] + [hf_shards, "--steps", "1", "--out", os.path.join(tmp, "hf-run")], expect_rc=1)
        if "uint32" not in hf_train.stderr or "-entry vocabulary" not in hf_train.stderr:
            sys.exit(f"FAIL: linac did not read the tokenizer.json shards' header\n{hf_train.stderr}")

        straight = os.path.join(tmp, "straight")
        trained = run(base + ["--tokenizer", model, "--steps", str(STEPS), "--log-every", "1",
                              "--checkpoint-every", "2", "--eval-every", str(STEPS), "--out", straight]).stdout
        if "memory-mapped" not in trained:
            sys.exit(f"FAIL: the shards were not read as token shards\n{trained}")
        with open(os.path.join(straight, "ckpt-2.json")) as f:
            position = json.load(f)["data_position"]
        if position != 2 * BATCH:
            sys.exit(f"FAIL: ckpt-2 records data position {position}, expected {2 * BATCH} windows")
        # Resume from step 2: the step-4 checkpoint removed, as if the run had stopped there.
        resumed = os.path.join(tmp, "resumed")
        shutil.copytree(straight, resumed)
        for name in ("ckpt-4.pt", "ckpt-4.json"):
            os.remove(os.path.join(resumed, name))
        with open(os.path.join(resumed, "latest"), "w") as f:
            f.write("ckpt-2.pt")
        run([linac, "train", "--resume", "--out", resumed, "--device", "cpu"])
        a, b = losses(straight), losses(resumed)
        for step in range(1, STEPS + 1):
            if a.get(step) != b.get(step):
                sys.exit(f"FAIL: step {step}: loss {a.get(step)} straight, {b.get(step)} resumed from step 2")
        print(f"ok: {len(bins)} shards round-trip; vocabulary and dtype checked; resume by position exact "
              f"(losses {[a[s] for s in range(1, STEPS + 1)]})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
