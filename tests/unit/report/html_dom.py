"""A small DOM of an HTML page (html.parser): elements with their attributes, children
and text, for the build report's tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "br", "hr", "img", "input", "link", "line", "col", "area", "base", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str, css: str | None = None) -> list[Element]:
        return [e for e in self.iter() if e.tag == tag and (css is None or css in e.classes)]

    def find(self, tag: str, css: str | None = None) -> Element:
        found = self.find_all(tag, css)
        assert found, f"no <{tag} class={css}>"
        return found[0]

    def rows(self) -> list[list[str]]:
        """A table's cells' text, row by row (header row included)."""
        return [
            [c.text.strip() for c in tr.iter() if c.tag in ("td", "th")]
            for tr in self.find_all("tr")
        ]


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return
        raise AssertionError(f"</{tag}> closes nothing open")

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(text: str) -> Element:
    parser = _Parser()
    parser.feed(text)
    parser.close()
    assert len(parser.stack) == 1, f"unclosed: {[e.tag for e in parser.stack[1:]]}"
    return parser.root
