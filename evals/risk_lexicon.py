"""A general lexicon of the risk vocabulary in other languages, written blind, compiled for the readers.

Most events the pack misses on a writer it never saw carry their indicator in an attribute named in a language the
pack's translations do not hold (Turkish, romanised Japanese, Swahili, Polish ...): each writer brings new languages,
and an entry added for one writer's miss helps only that writer. So this lexicon is not grown from misses:
independent lexicographers, with no access to the project's sets, code or rules, translated the English words the
vocabulary is written in (the 310 most used words of the pack's names, phrases and lists) into the languages of the
EU, the G20 and the most spoken others, as bank systems write them in field names (base, plural and case forms,
participles, compounds). Their files are evals/data/risk_lexicon/lex*.json.

`compile_lexicon` keeps an entry when it can be read safely:
- its key is one folded word (policies/risk_vocabulary.py `folded_word`) of at least MIN_KEY letters;
- its English words are all words the pack's vocabulary uses (a translation to a word no entry reads is dead
  weight);
- no other language gives the same key another meaning (an ambiguous key is left out, as "jo" would be: yes in
  Luxembourgish, no in Albanian);
- no English word reads as the key (`policies.risk_vocabulary.keys_read_as`, as the vocabulary reads a word: the
  word itself, less a common inflection, or with its final vowel changed): not a word of the pack's vocabulary, nor a common English word
  (ENGLISH: those of wordfreq's English list at Zipf >= 3.0 that read a candidate key, refreshed by `--english`,
  which needs `pip install wordfreq`; the file is the result, so the compile needs no wordfreq).
The result is policies/risk_lexicon.json (`python -m evals.risk_lexicon`), read by the vocabulary under the pack's
own translations (the reader `translation_lexicon`); a test checks the file equals a fresh compile.
"""
from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from policies.risk_model import RiskRules
from policies.risk_text import key_name, text_words
from policies.risk_vocabulary import LEXICON, folded_word, keys_read_as, vowel_stems

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "evals" / "data" / "risk_lexicon"
ENGLISH = SOURCES / "english_words.txt"  # common English words that would read a candidate key (first line: how)
MIN_KEY = 4  # shorter keys collide across languages and with codes ("ano", "nie", "tak")
_KEY = re.compile(r"[a-z]+")


def english_vocabulary(rules: RiskRules) -> frozenset[str]:
    """Every word the pack's vocabulary reads: fact names and phrases, list words, its translations' English."""
    out: set[str] = set()
    for spec in rules.facts.values():
        for name in spec.names:
            out |= key_name(name.partition(":")[0].lstrip("!")).words
        for phrase in spec.words:
            out |= set(text_words(phrase))
    for attr in ("text_words", "qualifier_words", "scope_words", "listed_words", "identifier_words",
                 "location_words", "home_words", "goods_words", "document_words", "failed_words", "passed_words",
                 "score_words", "designation_words", "designation_parties", "country_words"):
        for item in getattr(rules, attr, ()):
            out |= set(text_words(str(item)))
    for english in rules.translations.values():
        out |= set(text_words(english))
    return frozenset(out)


def sources(folder: Path = SOURCES) -> list[tuple[str, Mapping[str, str]]]:
    """(language, {word: English}) of every lexicographer's file, in file and language order."""
    out = []
    for path in sorted(folder.glob("lex*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out += [(lang, words) for lang, words in doc["languages"].items()]
    return out


def english_words(path: Path = ENGLISH) -> frozenset[str]:
    return frozenset(w.strip() for w in path.read_text(encoding="utf-8").splitlines()[1:] if w.strip())


def compile_lexicon(langs: Sequence[tuple[str, Mapping[str, str]]], rules: RiskRules,
                    common_english: frozenset[str]) -> tuple[dict[str, str], dict[str, int]]:
    """The entries kept ({folded key: English words}, sorted by key) and how many were dropped, by reason."""
    vocab = english_vocabulary(rules)
    meanings: dict[str, set[str]] = {}
    dropped = dict.fromkeys(("not_one_word", "short", "unread_english", "ambiguous", "reads_english"), 0)
    for _lang, words in langs:
        for raw, english in words.items():
            key = folded_word(raw)
            value = " ".join(text_words(english))
            if not _KEY.fullmatch(key):
                dropped["not_one_word"] += 1
            elif len(key) < MIN_KEY:
                dropped["short"] += 1
            elif not value or any(w not in vocab for w in value.split()):
                dropped["unread_english"] += 1
            else:
                meanings.setdefault(key, set()).add(value)
    kept = {k: next(iter(v)) for k, v in meanings.items() if len(v) == 1}
    dropped["ambiguous"] = len(meanings) - len(kept)
    stems = vowel_stems(kept)
    clash: set[str] = set()
    for w in vocab | common_english:
        clash.update(keys_read_as(w, kept, stems))
    dropped["reads_english"] = len(clash)
    return {k: kept[k] for k in sorted(kept) if k not in clash}, dropped


def document(kept: Mapping[str, str], dropped: Mapping[str, int],
             langs: Sequence[tuple[str, Mapping[str, str]]]) -> dict[str, object]:
    return {"about": "Compiled by `python -m evals.risk_lexicon` from evals/data/risk_lexicon (written by independent "
                     "lexicographers without access to the project's sets, code or rules); do not edit.",
            "languages": [lang for lang, _ in langs], "dropped": dict(dropped), "entries": dict(kept)}


def _rules() -> RiskRules:
    from policies import load_policy
    policy = load_policy(None)
    return policy.get(policy.classification.routes["risk"]).risk_rules


def refresh_english(rules: RiskRules, min_zipf: float = 3.0) -> int:
    """Rewrite ENGLISH: the common English words (wordfreq's English list at Zipf frequency >= `min_zipf`, about
    once in 10^6 words) that would read a candidate key."""
    from wordfreq import top_n_list, zipf_frequency
    candidates, _ = compile_lexicon(sources(), rules, frozenset())
    stems = vowel_stems(candidates)
    words = sorted(w for w in top_n_list("en", 60000) if _KEY.fullmatch(w) and zipf_frequency(w, "en") >= min_zipf
                   and any(keys_read_as(w, candidates, stems)))
    ENGLISH.write_text(f"# English words (wordfreq 3.1 'en', Zipf >= {min_zipf}) that would read a lexicon key\n"
                       + "".join(w + "\n" for w in words), encoding="utf-8")
    return len(words)


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    rules = _rules()
    if "--english" in args:
        print(f"{refresh_english(rules)} common English words read a candidate key")
    langs = sources()
    kept, dropped = compile_lexicon(langs, rules, english_words())
    LEXICON.write_text(json.dumps(document(kept, dropped, langs), indent=0, ensure_ascii=True) + "\n",
                       encoding="utf-8")
    print(f"lexicon: {len(kept)} entries from {len(langs)} languages; dropped {dropped}")


if __name__ == "__main__":
    main()
