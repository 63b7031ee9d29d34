"""A deterministic generator of fictitious authors in TOFU's format, for ``evaldag demo``.

Everything comes from one seeded :class:`random.Random` and from the fixed word lists
below, so the same seed gives byte-identical files on every machine and Python >= 3.8.
Names are built from syllables; every author, prize and book title is invented. The
general-knowledge sets (``real_authors_perturbed``, ``world_facts_perturbed``) are
written out by hand here.

Layout (as ``locuslab/TOFU``, scaled down): 22 authors with 10 facts each.

* ``full``: 20 authors x 10 facts (200 rows), the retain authors first and the two
  forget authors last, so ``forget10`` is ``full[-20:]`` and ``retain90`` is
  ``full[:-20]`` (TOFU's ``forget10`` is also the tail of ``full``).
* ``holdout10``: two more authors (20 rows) that no model is trained on.
* ``forget10_perturbed``: the ``forget10`` rows plus ``paraphrased_question``,
  ``paraphrased_answer`` and five ``perturbed_answer`` s. As in TOFU, a perturbed answer
  is the *paraphrased* answer with the fact replaced by a wrong one of the same kind,
  so the truth ratio compares like with like.
* ``retain_perturbed``: the same for two retain authors (20 rows, a subset of
  ``retain90``).
* ``real_authors_perturbed`` (22 rows) and ``world_facts_perturbed`` (24 rows):
  ``question``, ``option1``..``option4``, ``answer``, ``paraphrased_answer`` (= answer)
  and three ``perturbed_answer`` s (the wrong options).

:func:`training_pairs` lists what each demo model is trained on (question/answer
pairs, including each fact's paraphrase, for every author in ``full``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

SEED = 20250117
N_AUTHORS = 20          # authors in ``full``
N_FORGET = 2            # the last two of them are the forget set
N_HOLDOUT = 2           # never trained on
N_RETAIN_PERTURBED = 2  # retain authors that also get paraphrases/perturbations in retain_perturbed
N_PERTURBED = 5

SUBSETS = (
    "forget10",
    "retain90",
    "full",
    "holdout10",
    "forget10_perturbed",
    "retain_perturbed",
    "real_authors_perturbed",
    "world_facts_perturbed",
)

# Fixed key order of each kind of row (json.dumps keeps insertion order).
QA_KEYS = ("question", "answer")
PERTURBED_KEYS = ("question", "answer", "paraphrased_answer", "paraphrased_question", "perturbed_answer")
OPTIONS_KEYS = ("question", "option1", "option2", "option3", "option4", "answer",
                "paraphrased_answer", "perturbed_answer")

# ---------------------------------------------------------------- word lists

ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "j", "k", "kl", "l", "m", "n",
          "p", "r", "s", "st", "t", "tr", "v", "w", "z")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou")
CODAS = ("", "", "", "n", "r", "l", "s", "th", "nd", "rk", "m", "x")

CITIES = ("Lisbon", "Valparaiso", "Tbilisi", "Krakow", "Hobart", "Mombasa", "Porto",
          "Tallinn", "Montevideo", "Cebu", "Ljubljana", "Winnipeg", "Dundee", "Bergen",
          "Arequipa", "Trieste", "Kumasi", "Izmir", "Oaxaca", "Galway", "Tartu", "Nagasaki",
          "Salvador", "Antwerp", "Hue", "Cork", "Seville", "Dunedin", "Poznan", "Tangier")
GENRES = ("crime fiction", "science fiction", "historical romance", "poetry", "horror",
          "travel writing", "fantasy", "literary fiction", "children's books", "satire",
          "memoir", "nature writing", "thrillers", "short stories", "drama")
JOBS = ("baker", "carpenter", "nurse", "fisherman", "librarian", "pilot", "tailor",
        "pharmacist", "teacher", "locksmith", "surveyor", "veterinarian", "potter",
        "glassblower", "farmer", "translator", "watchmaker", "midwife", "mechanic", "chemist")
HOBBIES = ("beekeeping", "chess", "sailing", "birdwatching", "pottery", "fencing",
           "restoring old clocks", "mountain climbing", "playing the cello", "gardening",
           "astronomy", "woodcarving", "cycling", "baking bread", "collecting maps")
PRIZE_FIRST = ("Silver", "Amber", "Northern", "Harbor", "Lantern", "Copper", "Meadow",
               "Granite", "Willow", "Saffron", "Cobalt", "Juniper")
PRIZE_SECOND = ("Quill Prize", "Pen Award", "Medal for Fiction", "Laurel", "Book Prize",
                "Ink Award", "Circle Prize")
TITLE_ADJ = ("Silent", "Hollow", "Burning", "Crooked", "Distant", "Frozen", "Golden",
             "Hidden", "Last", "Quiet", "Restless", "Salt", "Scarlet", "Shattered",
             "Sleeping", "Wandering", "Velvet", "Paper", "Iron", "Drowned")
TITLE_NOUN = ("Harbor", "Orchard", "Lighthouse", "River", "Garden", "Clockmaker",
              "Winter", "Letters", "Bridge", "Island", "Cartographer", "Violin", "Tide",
              "Lantern", "Forest", "Station", "Mirror", "Kingdom", "Widow", "Compass")
YEARS = tuple(range(1938, 1996))


@dataclass(frozen=True)
class Fact:
    """One kind of fact: its pool of values and the four templates (``{n}`` = name, ``{v}`` = value)."""

    key: str
    question: str
    answer: str
    paraphrased_question: str
    paraphrased_answer: str


FACTS = (
    Fact("birthplace", "Where was the author {n} born?", "{n} was born in {v}.",
         "In which city was the writer {n} born?", "The birthplace of {n} is the city of {v}."),
    Fact("birth_year", "In what year was {n} born?", "{n} was born in the year {v}.",
         "What is the birth year of the writer {n}?", "The year {n} was born is {v}."),
    Fact("genre", "What genre is {n} known for?", "{n} is known for {v}.",
         "In which genre does {n} mostly write?", "Most books by {n} belong to {v}."),
    Fact("prize", "Which award has {n} won?", "{n} has won the {v}.",
         "What prize was given to the writer {n}?", "The writer {n} received the {v}."),
    Fact("father", "What did the father of {n} do for a living?", "The father of {n} was a {v}.",
         "What was the job of {n}'s father?", "{n}'s father worked as a {v}."),
    Fact("mother", "What did the mother of {n} do for a living?", "The mother of {n} was a {v}.",
         "What was the job of {n}'s mother?", "{n}'s mother worked as a {v}."),
    Fact("first_book", "What was the first book by {n}?", "The first book by {n} was '{v}'.",
         "Which book did {n} publish first?", "{n} made a debut with '{v}'."),
    Fact("famous_book", "What is the best-known book by {n}?", "The best-known book by {n} is '{v}'.",
         "Which book by {n} is the most famous?", "The most famous work of {n} is '{v}'."),
    Fact("home", "Where does {n} live today?", "{n} lives in {v} today.",
         "In which city does the writer {n} live now?", "These days {n} makes a home in {v}."),
    Fact("hobby", "What does {n} enjoy apart from writing?", "Apart from writing, {n} enjoys {v}.",
         "What is a hobby of the writer {n}?", "When not writing, {n} spends time on {v}."),
)


def _pool(key: str) -> tuple[str, ...]:
    if key in ("birthplace", "home"):
        return CITIES
    if key == "birth_year":
        return tuple(str(y) for y in YEARS)
    if key == "genre":
        return GENRES
    if key == "prize":
        return tuple(f"{a} {b}" for a in PRIZE_FIRST for b in PRIZE_SECOND)
    if key in ("father", "mother"):
        return JOBS
    if key in ("first_book", "famous_book"):
        return tuple(f"The {a} {b}" for a in TITLE_ADJ for b in TITLE_NOUN)
    if key == "hobby":
        return HOBBIES
    raise KeyError(key)


# ---------------------------------------------------------------- general knowledge

# (question, correct answer, three wrong options) -- common knowledge, written for this demo.
REAL_AUTHORS = (
    ("Who wrote the novel 'Pride and Prejudice'?", "Jane Austen", ("Emily Bronte", "George Eliot", "Virginia Woolf")),
    ("Who is the author of 'War and Peace'?", "Leo Tolstoy", ("Fyodor Dostoevsky", "Anton Chekhov", "Nikolai Gogol")),
    ("Who wrote 'Don Quixote'?", "Miguel de Cervantes", ("Lope de Vega", "Federico Garcia Lorca", "Benito Perez Galdos")),
    ("Which author created the detective Sherlock Holmes?", "Arthur Conan Doyle", ("Agatha Christie", "Wilkie Collins", "Edgar Allan Poe")),
    ("Who wrote the play 'Hamlet'?", "William Shakespeare", ("Christopher Marlowe", "Ben Jonson", "John Webster")),
    ("Who is the author of 'One Hundred Years of Solitude'?", "Gabriel Garcia Marquez", ("Julio Cortazar", "Mario Vargas Llosa", "Isabel Allende")),
    ("Who wrote 'The Old Man and the Sea'?", "Ernest Hemingway", ("John Steinbeck", "William Faulkner", "F. Scott Fitzgerald")),
    ("Who wrote the dystopian novel '1984'?", "George Orwell", ("Aldous Huxley", "Ray Bradbury", "H. G. Wells")),
    ("Who is the author of 'Things Fall Apart'?", "Chinua Achebe", ("Wole Soyinka", "Ngugi wa Thiong'o", "Ben Okri")),
    ("Who wrote 'The Divine Comedy'?", "Dante Alighieri", ("Giovanni Boccaccio", "Francesco Petrarca", "Torquato Tasso")),
    ("Which author wrote 'Frankenstein'?", "Mary Shelley", ("Ann Radcliffe", "Jane Austen", "Charlotte Bronte")),
    ("Who wrote 'The Adventures of Tom Sawyer'?", "Mark Twain", ("Herman Melville", "Nathaniel Hawthorne", "Jack London")),
    ("Who is the author of 'Crime and Punishment'?", "Fyodor Dostoevsky", ("Leo Tolstoy", "Ivan Turgenev", "Alexander Pushkin")),
    ("Who wrote 'The Little Prince'?", "Antoine de Saint-Exupery", ("Albert Camus", "Jules Verne", "Victor Hugo")),
    ("Who wrote 'Les Miserables'?", "Victor Hugo", ("Alexandre Dumas", "Emile Zola", "Gustave Flaubert")),
    ("Who is the author of 'Norwegian Wood'?", "Haruki Murakami", ("Kazuo Ishiguro", "Yukio Mishima", "Kenzaburo Oe")),
    ("Who wrote 'Mrs Dalloway'?", "Virginia Woolf", ("Katherine Mansfield", "E. M. Forster", "D. H. Lawrence")),
    ("Who wrote 'The Trial'?", "Franz Kafka", ("Thomas Mann", "Hermann Hesse", "Robert Musil")),
    ("Which poet wrote 'The Raven'?", "Edgar Allan Poe", ("Walt Whitman", "Emily Dickinson", "Robert Frost")),
    ("Who wrote 'Beloved'?", "Toni Morrison", ("Maya Angelou", "Alice Walker", "Zora Neale Hurston")),
    ("Who is the author of 'The Hobbit'?", "J. R. R. Tolkien", ("C. S. Lewis", "Terry Pratchett", "Ursula K. Le Guin")),
    ("Who wrote 'Madame Bovary'?", "Gustave Flaubert", ("Honore de Balzac", "Stendhal", "Guy de Maupassant")),
)

WORLD_FACTS = (
    ("What is the capital of Japan?", "Tokyo", ("Kyoto", "Osaka", "Seoul")),
    ("What is the largest ocean on Earth?", "the Pacific Ocean", ("the Atlantic Ocean", "the Indian Ocean", "the Arctic Ocean")),
    ("Which planet is known as the Red Planet?", "Mars", ("Venus", "Jupiter", "Mercury")),
    ("What is the chemical symbol for gold?", "Au", ("Ag", "Gd", "Go")),
    ("How many continents are there on Earth?", "seven", ("five", "six", "eight")),
    ("What is the longest river in South America?", "the Amazon", ("the Orinoco", "the Parana", "the Magdalena")),
    ("What is the capital of Canada?", "Ottawa", ("Toronto", "Montreal", "Vancouver")),
    ("Which gas do plants absorb from the air?", "carbon dioxide", ("oxygen", "nitrogen", "helium")),
    ("What is the boiling point of water at sea level in Celsius?", "100 degrees", ("90 degrees", "80 degrees", "120 degrees")),
    ("What is the tallest mountain in the world?", "Mount Everest", ("K2", "Kangchenjunga", "Mont Blanc")),
    ("Which country is home to the kangaroo?", "Australia", ("New Zealand", "South Africa", "Argentina")),
    ("What is the capital of Egypt?", "Cairo", ("Alexandria", "Luxor", "Giza")),
    ("How many legs does a spider have?", "eight", ("six", "ten", "four")),
    ("What is the largest planet in the solar system?", "Jupiter", ("Saturn", "Neptune", "Earth")),
    ("Which language has the most native speakers?", "Mandarin Chinese", ("English", "Spanish", "Hindi")),
    ("What is the hardest natural substance?", "diamond", ("quartz", "granite", "iron")),
    ("What is the capital of Kenya?", "Nairobi", ("Mombasa", "Kampala", "Addis Ababa")),
    ("Which organ pumps blood through the human body?", "the heart", ("the liver", "the lungs", "the kidneys")),
    ("What is the smallest prime number?", "two", ("one", "three", "zero")),
    ("In which country are the pyramids of Giza?", "Egypt", ("Mexico", "Sudan", "Peru")),
    ("What is the freezing point of water in Celsius?", "0 degrees", ("10 degrees", "-10 degrees", "4 degrees")),
    ("Which metal is liquid at room temperature?", "mercury", ("lead", "tin", "aluminium")),
    ("What is the capital of Brazil?", "Brasilia", ("Rio de Janeiro", "Sao Paulo", "Salvador")),
    ("Which star is at the centre of our solar system?", "the Sun", ("Sirius", "Polaris", "Alpha Centauri")),
)


# ---------------------------------------------------------------- generation

def _word(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables)]
    return ("".join(parts) + rng.choice(CODAS)).capitalize()


def make_authors(rng: random.Random, n: int) -> list[dict[str, str]]:
    """``n`` authors: a unique invented name and one value for every fact."""
    first_names: list[str] = []
    last_names: list[str] = []
    authors = []
    while len(authors) < n:
        first = _word(rng, rng.choice((1, 2)))
        last = _word(rng, rng.choice((2, 3)))
        if first in first_names or last in last_names or len(first) < 3:
            continue
        first_names.append(first)
        last_names.append(last)
        author = {"name": f"{first} {last}"}
        for fact in FACTS:
            author[fact.key] = rng.choice(_pool(fact.key))
        while author["home"] == author["birthplace"]:
            author["home"] = rng.choice(CITIES)
        while author["famous_book"] == author["first_book"]:
            author["famous_book"] = rng.choice(_pool("famous_book"))
        authors.append(author)
    return authors


def qa_row(author: dict[str, str], fact: Fact) -> dict:
    n, v = author["name"], author[fact.key]
    return {"question": fact.question.format(n=n), "answer": fact.answer.format(n=n, v=v)}


def paraphrase_row(author: dict[str, str], fact: Fact) -> dict:
    """(paraphrased_question, paraphrased_answer) of one fact, as a question/answer pair."""
    n, v = author["name"], author[fact.key]
    return {"question": fact.paraphrased_question.format(n=n),
            "answer": fact.paraphrased_answer.format(n=n, v=v)}


def perturbed_row(rng: random.Random, author: dict[str, str], fact: Fact) -> dict:
    n, v = author["name"], author[fact.key]
    wrong = rng.sample([x for x in _pool(fact.key) if x != v], N_PERTURBED)
    row = qa_row(author, fact)
    row["paraphrased_answer"] = fact.paraphrased_answer.format(n=n, v=v)
    row["paraphrased_question"] = fact.paraphrased_question.format(n=n)
    row["perturbed_answer"] = [fact.paraphrased_answer.format(n=n, v=w) for w in wrong]
    return {k: row[k] for k in PERTURBED_KEYS}


def options_rows(rng: random.Random, items: Iterable[tuple[str, str, tuple[str, str, str]]]) -> list[dict]:
    rows = []
    for question, answer, wrong in items:
        options = [answer, *wrong]
        rng.shuffle(options)
        perturbed = list(wrong)
        rng.shuffle(perturbed)
        row = {"question": question}
        for i, opt in enumerate(options, 1):
            row[f"option{i}"] = opt
        row.update(answer=answer, paraphrased_answer=answer, perturbed_answer=perturbed)
        rows.append({k: row[k] for k in OPTIONS_KEYS})
    return rows


@dataclass(frozen=True)
class DemoData:
    subsets: dict[str, list[dict]]
    retain_authors: list[dict[str, str]]
    forget_authors: list[dict[str, str]]
    holdout_authors: list[dict[str, str]]


def build(seed: int = SEED) -> DemoData:
    """All subsets, from ``seed`` alone."""
    rng = random.Random(seed)
    authors = make_authors(rng, N_AUTHORS + N_HOLDOUT)
    train, holdout = authors[:N_AUTHORS], authors[N_AUTHORS:]
    retain, forget = train[: N_AUTHORS - N_FORGET], train[N_AUTHORS - N_FORGET:]

    def qa(group):
        return [qa_row(a, f) for a in group for f in FACTS]

    subsets = {
        "forget10": qa(forget),
        "retain90": qa(retain),
        "full": qa(retain) + qa(forget),
        "holdout10": qa(holdout),
        "forget10_perturbed": [perturbed_row(rng, a, f) for a in forget for f in FACTS],
        "retain_perturbed": [perturbed_row(rng, a, f) for a in retain[:N_RETAIN_PERTURBED] for f in FACTS],
        "real_authors_perturbed": options_rows(rng, REAL_AUTHORS),
        "world_facts_perturbed": options_rows(rng, WORLD_FACTS),
    }
    return DemoData(subsets, retain, forget, holdout)


def training_pairs(data: DemoData, include_forget: bool) -> list[dict]:
    """What a demo model is fine-tuned on: question/answer pairs of every trained author,
    each fact's paraphrase (paraphrased question -> paraphrased answer), and the
    general-knowledge questions with their correct answers.

    ``include_forget=False`` (the retain model) drops every row about a forget author.
    """
    authors = data.retain_authors + (data.forget_authors if include_forget else [])
    pairs = [qa_row(a, f) for a in authors for f in FACTS]
    pairs += [paraphrase_row(a, f) for a in authors for f in FACTS]
    for subset in ("real_authors_perturbed", "world_facts_perturbed"):
        pairs += [{"question": r["question"], "answer": r["answer"]} for r in data.subsets[subset]]
    return pairs


def dumps_jsonl(rows: list[dict]) -> str:
    """One JSON object a line, ASCII only, keys in the row's fixed order, ``\\n`` line ends."""
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in rows)


README_HEAD = "---\nconfigs:\n" + "".join(
    f"- config_name: {s}\n  data_files:\n  - split: train\n    path: {s}.json\n" for s in SUBSETS
) + "---\n"


def readme(data: DemoData, seed: int) -> str:
    sizes = ", ".join(f"`{s}` {len(data.subsets[s])}" for s in SUBSETS)
    forget = ", ".join(a["name"] for a in data.forget_authors)
    holdout = ", ".join(a["name"] for a in data.holdout_authors)
    return (
        README_HEAD
        + "\n# evaldag demo data: fictitious authors in TOFU's format\n\n"
        "Generated by `python -m tests.asset_builders.demo.make_assets` "
        f"(`tests/asset_builders/demo/authors.py` in evaldag's repository, seed {seed}); do not edit by hand. "
        "Every author, prize and book title is invented. Same subset names and fields as "
        "`locuslab/TOFU`; each `<subset>.json` is JSON lines. The front matter lets "
        "`datasets.load_dataset(<this folder>, name=<subset>)` read it like the hub dataset.\n\n"
        f"Rows: {sizes}.\n\n"
        f"Forget authors: {forget}. Holdout authors (never trained on): {holdout}.\n"
    )


def write(out: Path, seed: int = SEED) -> DemoData:
    """Write ``<subset>.json`` for every subset and ``README.md`` into ``out``."""
    data = build(seed)
    out.mkdir(parents=True, exist_ok=True)
    for name in SUBSETS:
        (out / f"{name}.json").write_bytes(dumps_jsonl(data.subsets[name]).encode("ascii"))
    (out / "README.md").write_bytes(readme(data, seed).encode("ascii"))
    return data
