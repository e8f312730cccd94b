"""Reading the report's HTML back in tests: its sections and its tables' cell texts."""

from __future__ import annotations

from html.parser import HTMLParser


class ReportPage(HTMLParser):
    """Section ids, and each section's tables as rows of cell texts (figures' text left out)."""

    def __init__(self, text: str):
        super().__init__()
        self.sections: dict[str, list[list[list[str]]]] = {}
        self._section: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._svg = 0
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self._section = dict(attrs)["id"]
            self.sections[self._section] = []
        elif tag == "table" and self._section:
            self.sections[self._section].append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "svg":
            self._svg += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg -= 1
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._section:
            self.sections[self._section][-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None and not self._svg:
            self._cell.append(data)

    def rows(self, section: str, table: int = 0) -> list[dict[str, str]]:
        """A table's rows as {header: text}."""
        header, *body = self.sections[section][table]
        return [dict(zip(header, row, strict=True)) for row in body]
