"""Text of DOCX and PPTX blocks: no control character from the file's markup (issue 34:
0 stray characters on the corpus)."""

from __future__ import annotations

import io

from pptx import Presentation
from pptx.util import Pt

from blockbatch.core.ingest import parse_document


def test_a_pptx_line_break_is_a_new_line_not_a_control_character() -> None:
    """docling's powerpoint_bad_text.pptx: a title with <a:br/> line breaks, which
    python-pptx gives as vertical tabs (U+000B)."""
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text_frame.text = "X-Library\vThe template collection"
    box = slide.shapes.add_textbox(Pt(40), Pt(200), Pt(400), Pt(100))
    box.text_frame.text = "first line\vsecond line"
    out = io.BytesIO()
    deck.save(out)
    blocks = parse_document(out.getvalue(), "pptx")
    contents = [b.block_content for b in blocks]
    assert contents == ["X-Library\nThe template collection", "first line\nsecond line"]
    assert not any("\v" in c for c in contents)
