"""The statements issue 26 found wrong or stale (checked against the 0.33.0 and 0.24.0
sources) stay corrected: in the spec's preconditions table (docs/spec.md, from
publish/templates/preconditions.toml), the preconditions' texts (proofs/theorems.py, shown
in spec/lookup.md and report.md), the finding write-ups and the fix diffs.  Whether each
cited line holds its code is tests/test_citations.py's and tests/test_findings_citations.py's
check; this one pins the words."""

from __future__ import annotations

import re
from pathlib import Path

from proofs.theorems import PRECONDITIONS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FINDINGS = DOCS / "findings"
F001 = (FINDINGS / "001-mamba-state-past-hit-end.md").read_text()


def _row(name: str) -> str:
    """The spec's preconditions-table row of ``name``."""
    rows = [line for line in (DOCS / "spec.md").read_text().splitlines()
            if line.startswith(f"| `{name}`:")]
    assert len(rows) == 1, name
    return rows[0]


def _texts() -> list[tuple[str, str]]:
    texts = [(p.relative_to(ROOT).as_posix(), p.read_text())
             for p in [DOCS / "spec.md", *sorted((DOCS / "spec").glob("*.md"))]]
    return texts + [(f"PRECONDITIONS[{n!r}]", p.in_vllm) for n, p in PRECONDITIONS.items()]


def test_eagle_marking_lines_name_their_release() -> None:
    # 0.24.0's scheduler.py:169-180 is not where 0.33.0 marks EAGLE groups (:208)
    for where, text in _texts():
        for m in re.finditer(r"scheduler\.py:169-180", text):
            assert "0.24.0" in text[max(0, m.start() - 60):m.start()], where
    row = _row("no-eagle")
    assert "0.24.0 treats every group as one, 0.33.0 none" in row
    assert "no group marked, 0.24.0 treats every group as one, 0.33.0 none" in (
        PRECONDITIONS["no-eagle"].in_vllm)


def test_mamba_block_size_default_is_not_align_mode_only() -> None:
    # 0.24.0 model_executor/models/config.py:453 sets mamba_block_size under prefix
    # caching, for mode "all" and "align" alike
    for where, text in _texts():
        for m in re.finditer(r"models/config\.py:453|mamba_block_size_default|"
                             r"\[`config\.py:453`\]", text):
            before = text[max(0, m.start() - 200):m.start()]
            assert "in align mode" not in before, where
    assert "prefix caching on (Mamba mode `all` or `align`)" in _row("align-divides-blocks")


def test_window_row_states_033s_wider_window() -> None:
    row = _row("window-not-one-past-blocks")
    assert "extra_retained_tokens" in row and "[`scheduler.py:117`]" in row


def test_mode_all_row_says_033_has_no_all_mode_and_where_it_rounds() -> None:
    row = _row("mamba-mode-not-all")
    assert "vLLM 0.33.0 has no `all` mode" in row and "[`cache.py:176`]" in row
    assert "returns the align size" in row and "[`scheduler.py:879`]" in row


def test_caps_row_has_the_per_group_round_down() -> None:
    row = _row("caps-reach-prompt")
    assert "under `max_load_tokens` rounds down to each group's chunk again" in row
    assert "[`scheduler.py:918`]" in row


def test_align_row_and_finding_001_name_what_the_layout_needs() -> None:
    row = _row("align-divides-blocks")
    for words in ("checkpoint sets `sliding_window`", "FlashInfer chosen",
                  "up to 1024 on Blackwell", "FLASH_ATTN and Triton"):
        assert words in row, words
    flat = " ".join(F001.split())
    assert "only Mamba hybrid" not in flat
    assert "any hybrid, not only NemotronH" in flat
    for cited in ("attention.py:266-271", "config/model.py:1625-1627"):
        assert cited in flat, cited
    assert "must be chosen explicitly" in flat and "Blackwell" in flat


def test_findings_say_nothing_stale_about_what_was_done() -> None:
    flat = " ".join(F001.split())
    assert "Not done: Z3 proofs" not in flat
    assert "Not done: a simulator workload" not in flat
    for name in ("001-mamba-state-past-hit-end.md", "003-load-cap-loses-a-chunk.md"):
        text = (FINDINGS / name).read_text()
        if "## Affected releases" in text:  # made on every release's real scheduler
            assert "other releases not checked" not in text, name
            assert "vLLM 0.33.0 only" not in text, name
    assert "found without proofs" not in (DOCS / "spec.md").read_text()


def test_fix_diffs_carry_no_stale_comment() -> None:
    added = [line for line in (FINDINGS / "003-fix.diff").read_text().splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    assert added and not any("we must reduce by 1" in line for line in added)


def test_preconditions_table_leads_with_the_newest_releases_rows() -> None:
    # it started with mamba-mode-not-all, a row of 0.23.0/0.24.0 only
    import releases

    newest = releases.newest().base_version
    rows = [line for line in (DOCS / "spec.md").read_text().splitlines()
            if re.match(r"\| `[a-z-]+`: ", line)]
    assumed = [f" {newest} ([needed]" in row.split(" | ")[0] for row in rows]
    assert assumed[0] and assumed == sorted(assumed, reverse=True), assumed


def test_no_preconditions_row_repeats_a_cell() -> None:
    # full-chunk-within-windowed had the same text in its last two cells
    for line in (DOCS / "spec.md").read_text().splitlines():
        if re.match(r"\| `[a-z-]+`: ", line):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            assert len(cells) == 3 and cells[1] != cells[2], line[:60]
