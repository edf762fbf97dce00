"""Drive the demo app in a real headless Chromium through its three tabs, each with a bad input before a good one,
and render a model card to HTML; save screenshots.

    apt-get install -y chromium                      # Debian's Chromium (Playwright downloads no browser here)
    .venv/bin/pip install playwright==1.65.2
    GAUSSCSE_MODEL=outputs/quickstart .venv/bin/python scripts/browser_check.py --card outputs/quickstart/README.md \
        --readme_image docs/demo.png --examples_image docs/demo_examples.png

Writes ``direction.png``, ``direction_error.png``, ``direction_fixed.png``, ``direction_example_<i>.png`` (each of
the app's Direction examples, chosen from its Examples table), ``similarity.png``, ``search.png`` and
``model_card.png`` (with ``model_card.html``) into ``--output`` (default ``outputs/browser_check``). The app runs as
``python app.py`` on a free port, exactly as a user starts it. Each step waits for the page to show the answer, or a bad
input's message in the tab's error box, and fails if it does not; after every good answer it also fails if any error
is still shown (error box, toast, an output's "Error" badge) or a number has more than ``DISPLAY_DIGITS`` decimals.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from markdown_it import MarkdownIt
from PIL import Image
from playwright.sync_api import Page, expect, sync_playwright

from gausscse.demo.core import DIRECTION_EXAMPLES, DISPLAY_DIGITS
from gausscse.io import atomic_path, write_atomic

REPO_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_MS = 180_000  # the first search encodes the corpus
CARD_STYLE = """body { font-family: system-ui, sans-serif; max-width: 900px; margin: 2em auto; line-height: 1.45; }
pre { background: #f5f5f5; padding: 0.8em; overflow-x: auto; font-size: 12px; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; }
img { max-width: 100%; } .front-matter { color: #555; font-size: 12px; }"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_app(model: str, log: Path) -> tuple[subprocess.Popen, str]:
    """``python app.py`` on a free port; returns the process and its URL once it answers."""
    port = free_port()
    env = {
        **os.environ,
        "GAUSSCSE_MODEL": model,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    with log.open("w") as output:
        server = subprocess.Popen([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, stdout=output, stderr=output)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the app exited with {server.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return server, url
        except OSError:
            time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"the app did not answer at {url}; see {log}")


def assert_no_error(page: Page) -> None:
    """Fail if the page shows an error after a good answer: a tab's error box, a toast or an output's "Error" badge."""
    errors = {
        "an error box": page.locator(".demo-error"),
        "a toast": page.locator(".toast-body"),
        'an "Error" badge': page.get_by_text("Error", exact=True),
    }
    for name, error in errors.items():
        expect(error.locator("visible=true"), f"{name} is still shown after a good answer").to_have_count(0)


def assert_rounded(page: Page) -> None:
    """Fail if the page shows a number with more than ``DISPLAY_DIGITS`` decimals."""
    long_numbers = re.findall(rf"\d\.\d{{{DISPLAY_DIGITS + 1},}}", page.locator("body").inner_text())
    assert not long_numbers, f"numbers shown with more than {DISPLAY_DIGITS} decimals: {long_numbers[:5]}"


def show_error(page: Page, box: str, message: str, output: Path, screenshot: str | None = None) -> None:
    """Wait for ``message`` in the error box ``#box``; optionally take a screenshot of it."""
    expect(page.locator(f"#{box}")).to_contain_text(message, timeout=TIMEOUT_MS)
    if screenshot is not None:
        page.screenshot(path=output / screenshot, full_page=True)


def check_direction(page: Page, output: Path) -> None:
    """A good answer, a bad input (its message), the input fixed: the answer again and no error left."""
    button = page.get_by_role("button", name="Which entails which?")
    button.click()
    expect(page.locator("#direction-verdict")).to_contain_text("entails", timeout=TIMEOUT_MS)
    expect(page.locator("#direction-plot img")).to_be_visible(timeout=TIMEOUT_MS)
    assert_no_error(page)
    assert_rounded(page)
    page.screenshot(path=output / "direction.png", full_page=True)

    sentence_a = page.get_by_label("Sentence A")
    good_sentence = sentence_a.input_value()
    sentence_a.fill("")
    button.click()
    show_error(page, "direction-error", "sentence A is empty: type a sentence", output, "direction_error.png")
    expect(page.locator("#direction-verdict")).not_to_contain_text("entails")  # no stale answer beside it

    sentence_a.fill(good_sentence)
    button.click()
    expect(page.locator("#direction-verdict")).to_contain_text("entails", timeout=TIMEOUT_MS)
    expect(page.locator("#direction-plot img")).to_be_visible(timeout=TIMEOUT_MS)
    assert_no_error(page)
    page.screenshot(path=output / "direction_fixed.png", full_page=True)
    check_direction_examples(page, output)


def check_direction_examples(page: Page, output: Path) -> list[Path]:
    """Each of the app's Direction examples, chosen from its Examples table as a user does: its own verdict and
    its picture, shown at a readable shape (not a flat strip), no error;
    each picture is saved as ``direction_example_<i>.png``."""
    pictures = []
    for number, (sentence_a, sentence_b) in enumerate(DIRECTION_EXAMPLES, start=1):
        page.get_by_test_id(f"dataset-cell-{number - 1}-0").click()  # the row of the Examples table
        expect(page.get_by_label("Sentence A")).to_have_value(sentence_a)
        expect(page.get_by_label("Sentence B")).to_have_value(sentence_b)
        verdict = page.locator("#direction-verdict")
        previous = verdict.inner_text()
        page.get_by_role("button", name="Which entails which?").click()
        if number > 1:  # the first example is the pair already answered; each other pair has its own scores
            expect(verdict).not_to_have_text(previous, timeout=TIMEOUT_MS)
        for answer in (verdict, page.locator("#direction-plot")):  # Gradio's "processing" overlay gone: answered
            expect(answer).not_to_contain_text("processing", timeout=TIMEOUT_MS)
        expect(verdict).to_contain_text("entails", timeout=TIMEOUT_MS)
        assert number == 1 or verdict.inner_text() != previous, f"example {number}: the verdict did not change"
        picture = page.locator("#direction-plot img")
        expect(picture).to_be_visible(timeout=TIMEOUT_MS)
        box = picture.bounding_box()
        assert box and box["height"] >= 0.3 * box["width"], f"example {number}: the picture is a flat strip ({box})"
        assert_no_error(page)
        pictures.append(output / f"direction_example_{number}.png")
        picture.screenshot(path=pictures[-1])
    return pictures


def save_examples_strip(pictures: list[Path], target: Path, height: int = 320) -> None:
    """The examples' pictures side by side at ``height`` pixels (256-colour PNG), for docs/."""
    images = []
    for path in pictures:
        with Image.open(path) as image:
            images.append(image.convert("RGB").resize((round(image.width * height / image.height), height)))
    strip = Image.new("RGB", (sum(image.width for image in images), height), "white")
    left = 0
    for image in images:
        strip.paste(image, (left, 0))
        left += image.width
    with atomic_path(target) as temporary:
        strip.quantize(colors=256).save(temporary, format="PNG", optimize=True)


def check_similarity(page: Page, output: Path) -> None:
    """One sentence (its message), then the example's sentences: the heatmap and no error left."""
    page.get_by_role("tab", name="Similarity").click()
    sentences = page.get_by_label("Sentences, one per line")
    example = sentences.input_value()
    sentences.fill(example.splitlines()[0])
    button = page.get_by_role("button", name="Similarity matrix")
    button.click()
    show_error(page, "similarity-error", "give at least 2 sentences", output)
    sentences.fill(example)
    button.click()
    expect(page.locator("#similarity-plot img")).to_be_visible(timeout=TIMEOUT_MS)
    assert_no_error(page)
    assert_rounded(page)
    page.screenshot(path=output / "similarity.png", full_page=True)


def check_search(page: Page, output: Path) -> None:
    """An empty claim (its message), then the example claim: the entailing sentences and no error left."""
    page.get_by_role("tab", name="Search").click()
    claim = page.get_by_label("Claim")
    example = claim.input_value()
    claim.fill("")
    button = page.get_by_role("button", name="Find sentences that entail it")
    button.click()
    show_error(page, "search-error", "claim is empty: type a sentence", output)
    claim.fill(example)
    button.click()
    expect(page.locator("#search-help")).to_contain_text("Corpus:", timeout=TIMEOUT_MS)
    expect(page.locator("#search-hits")).to_contain_text(re.compile(r"\d\.\d+"), timeout=TIMEOUT_MS)  # a score
    assert_no_error(page)
    assert_rounded(page)
    page.screenshot(path=output / "search.png", full_page=True)


def check_app(page: Page, url: str, output: Path) -> None:
    """Each tab: a good answer, a bad input's message in the tab's error box, and no error left after the next good
    answer; every number shown with at most ``DISPLAY_DIGITS`` decimals."""
    page.goto(url)
    expect(page.get_by_role("tab", name="Direction")).to_be_visible(timeout=TIMEOUT_MS)
    check_direction(page, output)
    check_similarity(page, output)
    check_search(page, output)


def render_card(card: Path, output: Path) -> Path:
    """The card's Markdown as HTML (front matter shown as a code block, images relative to the card's folder)."""
    text = card.read_text(encoding="utf-8")
    front_matter = ""
    if text.startswith("---\n"):
        front_matter, text = text[4:].split("\n---\n", 1)
    body = MarkdownIt("commonmark").enable("table").render(text)
    html = (
        f'<!doctype html><html><head><meta charset="utf-8"><base href="{card.parent.resolve().as_uri()}/">'
        f"<style>{CARD_STYLE}</style></head><body>"
        f'<pre class="front-matter">---\n{front_matter}\n---</pre>{body}</body></html>'
    )
    page = output / "model_card.html"
    write_atomic(page, html)
    return page


def save_small_copy(screenshot: Path, target: Path, width: int = 900) -> None:
    """A small PNG (``width`` pixels, 256-colour palette) of a screenshot, for the README."""
    with Image.open(screenshot) as image:
        small = image.convert("RGB").resize((width, round(image.height * width / image.width)), Image.LANCZOS)
    with atomic_path(target) as temporary:
        small.quantize(colors=256).save(temporary, format="PNG", optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("GAUSSCSE_MODEL", "outputs/quickstart"))
    parser.add_argument("--card", type=Path, help="a model card (README.md) to render; none: skip")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "outputs" / "browser_check")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--readme_image", type=Path, help="small copy of direction.png (docs/demo.png)")
    parser.add_argument("--examples_image", type=Path, help="the Direction examples' pictures in one (docs/)")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    server, url = start_app(args.model, args.output / "app.log")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            check_app(page, url, args.output)
            if args.card is not None:
                page.goto(render_card(args.card, args.output).resolve().as_uri())
                page.wait_for_load_state("load")
                page.screenshot(path=args.output / "model_card.png", full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    if args.readme_image is not None:
        save_small_copy(args.output / "direction.png", args.readme_image)
    if args.examples_image is not None:
        pictures = [args.output / f"direction_example_{number}.png" for number in range(1, len(DIRECTION_EXAMPLES) + 1)]
        save_examples_strip(pictures, args.examples_image)
    print(f"screenshots in {args.output}")


if __name__ == "__main__":
    main()
