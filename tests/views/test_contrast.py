"""The dashboard's colours meet WCAG AA (4.5:1 for text) in the light theme
and in the dark one (prefers-color-scheme): computed from static/queueadmin/app.css,
for every rule that sets both a text colour and a background, and for the
text colours used on the page, panel and sidebar backgrounds."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = (Path(__file__).resolve().parents[2] / "static" / "queueadmin" / "app.css").read_text()
AA = 4.5
# text colour -> the backgrounds it is drawn on (by inheritance, not in one rule)
INHERITED = {
    "--ink": ("--bg", "--panel", "--panel-2", "--hover", "--field"),
    "--ink-2": ("--bg", "--panel", "--panel-2"),
    "--ink-3": ("--bg", "--panel", "--panel-2", "--hover", "--wait-bg"),
    "--accent": ("--bg", "--panel", "--panel-2", "--hover", "--accent-2"),
    "--bad": ("--panel", "--hover", "--stuck-bg"),
    "--ok": ("--panel",),
    "--run": ("--panel",),
    "--sched": ("--panel",),
    "--side-ink": ("--side", "--side-2", "--side-3"),
    "--side-ink-2": ("--side", "--side-2"),
}


def _block_after(text: str, start: int) -> str:
    """The {...} block opening at or after `start` (nested braces allowed)."""
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    raise ValueError("unbalanced braces")


def _props(block: str) -> dict[str, str]:
    return dict(re.findall(r"(--[\w-]+)\s*:\s*([^;]+);", block))


def themes() -> dict[str, dict[str, str]]:
    css = re.sub(r"/\*.*?\*/", "", CSS, flags=re.S)
    light = _props(_block_after(css, css.index(":root")))
    media = css.index("@media (prefers-color-scheme: dark)")
    dark_root = _block_after(css, media)
    dark = {**light, **_props(_block_after(dark_root, dark_root.index(":root")))}
    return {"light": light, "dark": dark}


def resolve(value: str, theme: dict[str, str]) -> str | None:
    value = value.strip()
    for _ in range(5):
        m = re.fullmatch(r"var\((--[\w-]+)\)", value)
        if not m:
            break
        value = theme.get(m[1], "").strip()
    return value.lower() if re.fullmatch(r"#[0-9a-fA-F]{3}|#[0-9a-fA-F]{6}", value) else None


def luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(h[i:i + 2], 16) / 255) for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ratio(fg: str, bg: str) -> float:
    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def rule_pairs() -> list[tuple[str, str, str]]:
    """(selector, color value, background value) of rules that set both."""
    css = re.sub(r"/\*.*?\*/", "", CSS, flags=re.S)
    pairs = []
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        color = re.search(r"(?:^|;)\s*color\s*:\s*([^;]+)", body)
        background = re.search(r"(?:^|;)\s*background(?:-color)?\s*:\s*([^;]+)", body)
        if color and background:
            pairs.append((" ".join(selector.split()), color[1], background[1]))
    return pairs


def test_the_formula_matches_known_ratios():
    assert ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert ratio("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # the classic just-fails grey


def test_both_themes_define_every_colour_the_light_one_does():
    t = themes()
    assert t["dark"]["--bg"] != t["light"]["--bg"]
    overridden = set(_props(_block_after(CSS, CSS.index(":root", CSS.index("prefers-color-scheme: dark")))))
    colours = {k for k, v in t["light"].items() if v.strip().startswith(("#", "rgb"))}
    assert colours - overridden == set(), "colours the dark theme leaves light"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_rules_with_text_and_background_meet_aa(theme):
    palette = themes()[theme]
    checked, failures = 0, []
    for selector, color, background in rule_pairs():
        fg, bg = resolve(color, palette), resolve(background, palette)
        if not fg or not bg:
            continue  # transparent, currentColor, gradients: covered by INHERITED
        checked += 1
        if ratio(fg, bg) < AA:
            failures.append(f"{selector}: {fg} on {bg} = {ratio(fg, bg):.2f}")
    assert checked >= 15
    assert not failures, failures


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_colours_on_their_backgrounds_meet_aa(theme):
    palette = themes()[theme]
    failures = [f"{fg} on {bg}: {ratio(palette[fg], palette[bg]):.2f}"
                for fg, bgs in INHERITED.items() for bg in bgs
                if ratio(resolve(palette[fg], palette), resolve(palette[bg], palette)) < AA]
    assert not failures, failures
