#!/usr/bin/env python3
"""Small Hugging Face tokenizer directories for oscar's tokenizer_data_from_hf test.

    /root/.cache/oscar/venv/bin/python tests/reference/make_hf_tokenizer_fixture.py

(tokenizers 0.23.3, see scripts/requirements.txt). The real vocabularies are several
MB, so instead this trains a tiny byte-level BPE (vocab_size 600: the 256 byte
characters, the special tokens and ~330 merges) on tests/data/tokenizer_corpus.txt and
tests/data/ppl_text.txt, once per pre-tokenizer style oscar maps:

  smollm  Sequence[Digits(individual_digits), ByteLevel(use_regex)]  (SmolLM2's design)
  gpt2    ByteLevel(use_regex), merges written as "left right" strings (GPT-2's design)
  llama3  Sequence[Split(<Llama 3 regex>, isolated), ByteLevel(no regex)],
          model.ignore_merges = true, TemplateProcessing that prepends
          <|begin_of_text|>                                          (Llama 3's design)
  qwen2   Sequence[Split(<Qwen2 regex>, isolated), ByteLevel(no regex)], NFC normalizer
                                                                     (Qwen2's design)

and writes tests/data/hf_tok_<style>/{tokenizer.json, tokenizer_config.json,
expected.json}. expected.json holds, for every line of tests/data/tokenizer_corpus.txt
(the file split on "\\n", the "\\n" not included) and for the whole file:
  "ids":      tok.encode(text, add_special_tokens=False)  (added tokens are still
              matched in the text: oscar's parse_special=true)
  "ids_post": tok.encode(text, add_special_tokens=True)   (plus the post-processor,
              i.e. the BOS of the llama3 style: oscar's add_bos())
  "normalized": the text after the normalizer, only where it differs (qwen2's NFC;
              oscar does not normalize, so its test encodes this text instead)
Training is deterministic for a fixed corpus and tokenizers version.
Nothing here imports oscar.
"""
import json
import pathlib

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/data/tokenizer_corpus.txt"
TRAIN_FILES = [CORPUS, ROOT / "tests/data/ppl_text.txt"]

# The patterns of the Llama 3 and Qwen2 tokenizer.json files (Split, behavior Isolated).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Short Jinja templates in the two families oscar recognises (written for this fixture).
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a tiny test assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


def byte_level(use_regex):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=use_regex)


def split(pattern):
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


STYLES = {
    "smollm": dict(
        pre=pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level(True)]),
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        config={"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                "add_bos_token": False, "chat_template": CHATML_TEMPLATE}),
    "gpt2": dict(
        pre=byte_level(True),
        specials=["<|endoftext|>"],
        merges_as_strings=True,
        config={"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}),
    "llama3": dict(
        pre=pre_tokenizers.Sequence([split(LLAMA3_PATTERN), byte_level(False)]),
        specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>"],
        ignore_merges=True,
        bos="<|begin_of_text|>",
        # The object form of a token, as many tokenizer_config.json files write it.
        config={"bos_token": {"content": "<|begin_of_text|>", "lstrip": False, "normalized": False,
                              "rstrip": False, "single_word": False},
                "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE}),
    "qwen2": dict(
        pre=pre_tokenizers.Sequence([split(QWEN2_PATTERN), byte_level(False)]),
        normalizer=normalizers.NFC(),
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        # A non-special added token (USER_DEFINED in oscar), added after training so
        # that its id lies past the trained vocabulary.
        extra_tokens=["<tool_call>"],
        config={"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "chat_template": CHATML_TEMPLATE}),
}


def train(style):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = style["pre"]
    if "normalizer" in style:
        tok.normalizer = style["normalizer"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, show_progress=False,
                                  special_tokens=style["specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(f) for f in TRAIN_FILES], trainer)
    if "bos" in style:
        bos = style["bos"]
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                          special_tokens=[(bos, tok.token_to_id(bos))]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if "extra_tokens" in style:
        tok.add_tokens(style["extra_tokens"])
    if style.get("ignore_merges"):
        j = json.loads(tok.to_str())
        j["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(j))
    return tok


def main():
    text = CORPUS.read_bytes().decode("utf-8")
    lines = text.split("\n")
    for name, style in STYLES.items():
        tok = train(style)
        out = ROOT / f"tests/data/hf_tok_{name}"
        out.mkdir(exist_ok=True)
        tok.save(str(out / "tokenizer.json"), pretty=False)
        if style.get("merges_as_strings"):
            # The older "left right" form of the file (tokenizers saves pairs), then
            # reload, so that the expected ids come from the file as written.
            j = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
            j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
            (out / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False, separators=(",", ":")),
                                                encoding="utf-8")
            tok = Tokenizer.from_file(str(out / "tokenizer.json"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, **style["config"]}
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")

        def entry(s):
            ids = tok.encode(s, add_special_tokens=False).ids
            e = {"text": s, "ids": ids, "ids_post": tok.encode(s, add_special_tokens=True).ids}
            # oscar does not normalize: where NFC changes the text, the C++ test
            # encodes the normalized text (what the BPE model saw) instead.
            normalized = tok.normalizer.normalize_str(s) if tok.normalizer else s
            if normalized != s:
                e["normalized"] = normalized
            assert tok.decode(ids, skip_special_tokens=False) == normalized, (name, s)
            return e

        expected = {
            "style": name,
            "n_vocab": tok.get_vocab_size(with_added_tokens=True),
            "lines": [entry(s) for s in lines],
            "whole_file": entry(text),
        }
        (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, separators=(",", ":")) + "\n",
                                           encoding="utf-8")
        size = sum(f.stat().st_size for f in out.iterdir())
        assert size < 100_000, (out, size)
        print(f"{out.relative_to(ROOT)}: {expected['n_vocab']} tokens, {size} bytes")


if __name__ == "__main__":
    main()
