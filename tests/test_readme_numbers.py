"""The README's prose that quotes a measured number says what the page that measured it says
(results pages are generated; a number typed into the README is checked here against its page)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_paragraph(starts: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(starts)
    return text[start:text.index("\n\n", start)]


def test_the_pruner_paragraph_quotes_results_pruning_validation():
    paragraph = " ".join(_readme_paragraph("A sweep file's protocol names it in `tuner.pruner`").split())
    page = (REPO / "results" / "pruning_validation.md").read_text()
    held = re.search(r"- FedBuff \(fedbuff\): .*?\((\d+\.\d+)x less time.*?the pruner holds", page)
    assert held and f"at {held.group(1)}× less time" in paragraph
    assert page.count("the pruner does not hold") == 2 and "one of three validated" in paragraph
    summed = re.search(r"summed over studies, (\d+\.\d+)x", page)
    assert summed and f"about {round(float(summed.group(1)))}×" in paragraph
    worse = re.search(r"more than 5% worse on the tuning seeds for (\d+) of (\d+) studies", page)
    assert worse and f"all {worse.group(2)} of FedBuff's studies" in paragraph and f"left {worse.group(1)} studies" in paragraph
