#!/usr/bin/env python3
"""Convert zero-shot evaluation sets into the JSONL files `linac eval --task-dir` reads.

Each document is formatted with the prompt lm-evaluation-harness uses for the task (its task YAML
and utils at the time of writing), so linac's acc / acc_norm are comparable with lm-eval's:

  arc_easy, arc_challenge  "Question: {question}\\nAnswer:"; choices: the choice texts; gold: the
                           index of answerKey among the labels            (allenai/ai2_arc, test)
  piqa                     "Question: {goal}\\nAnswer:"; choices: sol1, sol2; gold: label
                                                                          (baber/piqa, validation)
  hellaswag                "{activity_label}: {ctx_a} {ctx_b capitalised}" and the endings, both
                           through lm-eval's preprocess (strip, " [title]" -> ". ", drop "[...]",
                           "  " -> " "); gold: label               (Rowan/hellaswag, validation)
  winogrande               contexts: the sentence up to "_" with option1 / option2; continuation:
                           the rest after "_", stripped; gold: answer - 1
                                                   (allenai/winogrande winogrande_xl, validation)
  lambada_openai           context: the text without its last space-separated word; target: that
                           word                                      (EleutherAI/lambada_openai, test)

Input: --input FILE, a local copy in the dataset's published format (.jsonl, .json, or .parquet /
.arrow through the `datasets` package); piqa's original release keeps labels apart (--labels
FILE, one per line). Without --input the `datasets` package downloads the split named above
(--split to change it). Output: OUT_DIR/TASK.jsonl. Standard library only, except `datasets`.

  python3 tools/tasks/convert_lm_eval.py arc_easy --out tasks/
  python3 tools/tasks/convert_lm_eval.py hellaswag --input hellaswag_val.jsonl --out tasks/
"""
import argparse
import json
import os
import re
import sys

# task -> (Hugging Face dataset, configuration, split lm-eval evaluates)
SOURCES = {
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy", "test"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge", "test"),
    "piqa": ("baber/piqa", None, "validation"),
    "hellaswag": ("Rowan/hellaswag", None, "validation"),
    "winogrande": ("allenai/winogrande", "winogrande_xl", "validation"),
    "lambada_openai": ("EleutherAI/lambada_openai", "default", "test"),
}


def arc(doc):
    # Hugging Face layout: question str, choices {text: [...], label: [...]}; the original ARC
    # release: question {stem, choices: [{text, label}]}.
    question, choices = doc["question"], doc.get("choices")
    if isinstance(question, dict):
        choices = {"text": [c["text"] for c in question["choices"]], "label": [c["label"] for c in question["choices"]]}
        question = question["stem"]
    return {"context": f"Question: {question}\nAnswer:", "choices": list(choices["text"]),
            "gold": list(choices["label"]).index(doc["answerKey"])}


def piqa(doc):
    return {"context": f"Question: {doc['goal']}\nAnswer:", "choices": [doc["sol1"], doc["sol2"]], "gold": int(doc["label"])}


def hellaswag_preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")  # brackets are artifacts of the WikiHow part
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag(doc):
    ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    return {"context": hellaswag_preprocess(doc["activity_label"] + ": " + ctx),
            "choices": [hellaswag_preprocess(e) for e in doc["endings"]], "gold": int(doc["label"])}


def winogrande(doc):
    sentence = doc["sentence"]
    blank = sentence.index("_")
    return {"contexts": [sentence[:blank] + doc["option1"], sentence[:blank] + doc["option2"]],
            "continuation": sentence[blank + 1:].strip(), "gold": int(doc["answer"]) - 1}


def lambada(doc):
    words = doc["text"].split(" ")
    return {"context": " ".join(words[:-1]), "target": words[-1]}


CONVERT = {"arc_easy": arc, "arc_challenge": arc, "piqa": piqa, "hellaswag": hellaswag,
           "winogrande": winogrande, "lambada_openai": lambada}


def read_local(path):
    if path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, list) else data["data"]
    import datasets  # parquet, arrow, csv: the datasets package reads its own published files
    kind = os.path.splitext(path)[1].lstrip(".")
    return list(datasets.load_dataset(kind, data_files=path, split="train"))


def read_remote(task, split):
    import datasets
    name, config, default_split = SOURCES[task]
    return list(datasets.load_dataset(name, config, split=split or default_split))


def convert(task, docs, labels=None):
    out = []
    for i, doc in enumerate(docs):
        doc = dict(doc)
        if labels is not None:
            doc["label"] = labels[i]
        out.append(CONVERT[task](doc))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task", choices=sorted(CONVERT))
    parser.add_argument("--input", help="a local file in the dataset's published format")
    parser.add_argument("--labels", help="piqa's original release: the labels file, one per line")
    parser.add_argument("--split", help="with the datasets package: the split (default: lm-eval's)")
    parser.add_argument("--out", required=True, help="directory for TASK.jsonl")
    args = parser.parse_args(argv)
    docs = read_local(args.input) if args.input else read_remote(args.task, args.split)
    labels = None
    if args.labels:
        with open(args.labels, encoding="utf-8") as f:
            labels = [int(line) for line in f if line.strip()]
        if len(labels) != len(docs):
            sys.exit(f"{args.labels}: {len(labels)} labels for {len(docs)} documents")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, args.task + ".jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for doc in convert(args.task, docs, labels):
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    print(f"{path}: {len(docs)} documents")


if __name__ == "__main__":
    main()
