#!/usr/bin/env python3
"""tools/tasks/convert_lm_eval.py on documents in each dataset's published layout (written here
for the test, not taken from the datasets): lm-eval's prompt for each task, local .jsonl / .json
input, piqa's separate labels file, and the output file."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "tasks")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, TOOLS)
import convert_lm_eval as conv  # noqa: E402


class Formats(unittest.TestCase):
    def test_arc_both_layouts(self):
        hf = {"question": "Which is a liquid?", "answerKey": "C",
              "choices": {"text": ["rock", "ice", "water"], "label": ["A", "B", "C"]}}
        original = {"question": {"stem": "Which is a liquid?", "choices": [
            {"text": "rock", "label": "1"}, {"text": "ice", "label": "2"}, {"text": "water", "label": "3"}]},
            "answerKey": "3"}
        expected = {"context": "Question: Which is a liquid?\nAnswer:", "choices": ["rock", "ice", "water"], "gold": 2}
        self.assertEqual(conv.arc(hf), expected)
        self.assertEqual(conv.arc(original), expected)

    def test_piqa(self):
        doc = {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "shout at it", "label": 0}
        self.assertEqual(conv.piqa(doc), {"context": "Question: Open a jar\nAnswer:",
                                          "choices": ["twist the lid", "shout at it"], "gold": 0})

    def test_hellaswag_preprocessing(self):
        doc = {"activity_label": "Baking", "ctx_a": "A man mixes flour. [header] Then", "ctx_b": "he",
               "endings": ["puts it in the oven [title] Done.", " bakes  bread. "], "label": "1"}
        self.assertEqual(conv.hellaswag(doc), {
            "context": "Baking: A man mixes flour. Then He",
            "choices": ["puts it in the oven. Done.", "bakes bread."], "gold": 1})

    def test_winogrande_partial_contexts(self):
        doc = {"sentence": "The ball broke the window because the _ was hard.", "option1": "ball",
               "option2": "window", "answer": "1"}
        self.assertEqual(conv.winogrande(doc), {
            "contexts": ["The ball broke the window because the ball", "The ball broke the window because the window"],
            "continuation": "was hard.", "gold": 0})

    def test_lambada_last_word(self):
        self.assertEqual(conv.lambada({"text": "she opened the door and saw her brother"}),
                         {"context": "she opened the door and saw her", "target": "brother"})


class CommandLine(unittest.TestCase):
    def run_tool(self, *args):
        subprocess.run([sys.executable, os.path.join(TOOLS, "convert_lm_eval.py"), *args], check=True,
                       capture_output=True, text=True)

    def test_piqa_original_release_with_labels_file(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "valid.jsonl"), "w") as f:
                f.write(json.dumps({"goal": "g1", "sol1": "a", "sol2": "b"}) + "\n")
                f.write(json.dumps({"goal": "g2", "sol1": "c", "sol2": "d"}) + "\n")
            with open(os.path.join(d, "valid-labels.lst"), "w") as f:
                f.write("1\n0\n")
            self.run_tool("piqa", "--input", os.path.join(d, "valid.jsonl"), "--labels",
                          os.path.join(d, "valid-labels.lst"), "--out", os.path.join(d, "out"))
            with open(os.path.join(d, "out", "piqa.jsonl")) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual([line["gold"] for line in lines], [1, 0])
            self.assertEqual(lines[1]["context"], "Question: g2\nAnswer:")

    def test_json_list_input(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "l.json"), "w") as f:
                json.dump([{"text": "one two three"}], f)
            self.run_tool("lambada_openai", "--input", os.path.join(d, "l.json"), "--out", d)
            with open(os.path.join(d, "lambada_openai.jsonl")) as f:
                self.assertEqual(json.loads(f.readline()), {"context": "one two", "target": "three"})


if __name__ == "__main__":
    unittest.main()
