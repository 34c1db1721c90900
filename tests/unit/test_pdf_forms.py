"""A PDF form's filled-in values are text of the document (issue 34: pdftotext prints them,
ingest lost them: sample-files--libreoffice-form.pdf read at 90% of pdftotext's words)."""

from __future__ import annotations

from blockbatch.core.ingest import parse_document


def form_pdf(
    fields: list[tuple[str, str, str, tuple[int, int, int, int]]], page_text: str
) -> bytes:
    """A one-page PDF drawing ``page_text`` (label lines ``(x, y, text)``, ';'-separated)
    with AcroForm fields ``(name, field type, value, rect)``; no appearance streams, as a
    form filled by a program often has."""
    content = (
        b"BT /F1 12 Tf "
        + b" ".join(
            f"1 0 0 1 {x} {y} Tm ({text}) Tj".encode()
            for x, y, text in (line.split(",", 2) for line in page_text.split(";"))
        )
        + b" ET"
    )
    first_field = 6
    kids = " ".join(f"{first_field + i} 0 R" for i in range(len(fields)))
    objects = [
        f"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [{kids}] /DA (/Helv 0 Tf 0 g) "
        "/DR << /Font << /Helv 5 0 R >> >> >> >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        f"/Resources << /Font << /F1 5 0 R >> >> /Annots [{kids}] >>",
        f"<< /Length {len(content)} >>\nstream\n{content.decode()}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for name, kind, value, rect in fields:
        extra = " /Ff 131072 /Opt [(Red) (Green)]" if kind == "Ch" else ""
        objects.append(
            f"<< /Type /Annot /Subtype /Widget /FT /{kind} /T ({name}) /V ({value}) "
            f"/Rect [{' '.join(map(str, rect))}] /P 3 0 R /DA (/Helv 12 Tf 0 g){extra} >>"
        )
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (
        f"trailer << /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


def test_filled_in_fields_are_read_where_they_sit_beside_their_labels() -> None:
    data = form_pdf(
        [
            ("first", "Tx", "Alice", (150, 696, 300, 714)),
            ("colour", "Ch", "Green", (150, 656, 300, 674)),
            ("empty", "Tx", "", (150, 616, 300, 634)),
        ],
        "72,700,First Name;72,660,Colour;72,620,Notes;72,500,The form ends here.",
    )
    blocks = parse_document(data, "pdf")
    text = [b.block_content for b in blocks]
    assert text[0] == "First Name Alice"
    assert "Colour Green" in text
    assert "Notes" in text
    first = blocks[0].provenance
    assert first is not None and first.page == 1 and first.bbox is not None
    assert first.bbox[2] >= 300 - 1  # the box covers the field, where the value is shown


def test_a_value_the_page_already_shows_is_not_read_twice() -> None:
    data = form_pdf(
        [("first", "Tx", "Alice", (150, 696, 300, 714))],
        "72,700,First Name;155,700,Alice;72,500,The form ends here.",
    )
    blocks = parse_document(data, "pdf")
    assert blocks[0].block_content == "First Name Alice"
