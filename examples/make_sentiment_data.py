"""Write the demo's small labelled sentiment set (examples/data/sentiment.tsv).

Short synthetic sentences from word lists, three classes: positive, negative,
neutral. Negation ("was not good") flips a polar sentence, so a classifier must look
at more than one word: its attention matters. Deterministic (seeded); run it again
to regenerate the shipped file bit for bit::

    python examples/make_sentiment_data.py
"""

from __future__ import annotations

import random
from pathlib import Path

OUT = Path(__file__).with_name("data") / "sentiment.tsv"
SEED = 7
SENTENCES_PER_CLASS = 200

SUBJECTS = ["the movie", "the film", "the food", "the service", "the hotel", "the book", "the show",
            "the concert", "the game", "the phone", "the song", "the trip", "the class", "the app"]
POSITIVE = ["good", "great", "excellent", "wonderful", "fantastic", "lovely", "brilliant", "superb",
            "delightful", "enjoyable"]
NEGATIVE = ["bad", "terrible", "awful", "boring", "horrible", "dreadful", "poor", "disappointing",
            "painful", "annoying"]
NEUTRAL = ["long", "new", "blue", "on time", "in english", "at noon", "about cities", "from spain",
           "on the list", "in the room"]
VERBS = ["was", "is", "seemed", "felt"]
INTENS = ["", "", "really", "very", "quite", "truly"]
TAILS = ["", "", "today", "overall", "to me", "this week", "i think"]


def _polar(rng: random.Random, positive: bool) -> str:
    negate = rng.random() < 0.3
    # "not <negative>" is positive, "not <positive>" is negative
    words = (NEGATIVE if negate else POSITIVE) if positive else (POSITIVE if negate else NEGATIVE)
    parts = [rng.choice(SUBJECTS), rng.choice(VERBS), "not" if negate else rng.choice(INTENS), rng.choice(words),
             rng.choice(TAILS)]
    return " ".join(p for p in parts if p)


def _neutral(rng: random.Random) -> str:
    parts = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(NEUTRAL), rng.choice(TAILS)]
    return " ".join(p for p in parts if p)


def make(seed: int = SEED, per_class: int = SENTENCES_PER_CLASS) -> list[tuple[str, str]]:
    """(label, sentence) rows, shuffled, without duplicates."""
    rng = random.Random(seed)
    rows: set[tuple[str, str]] = set()
    makers = {"positive": lambda: _polar(rng, True), "negative": lambda: _polar(rng, False),
              "neutral": lambda: _neutral(rng)}
    for label, fn in makers.items():
        n = 0
        while n < per_class:
            row = (label, fn())
            if row not in rows:
                rows.add(row)
                n += 1
    out = sorted(rows)
    rng.shuffle(out)
    return out


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = make()
    OUT.write_text("".join(f"{label}\t{text}\n" for label, text in rows))
    print(f"wrote {len(rows)} sentences to {OUT}")
