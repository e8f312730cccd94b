"""The HTML page around the sections: style, a small script of our own, tables. Nothing is fetched
when the page is viewed: no CDN, no web fonts, every figure inline.

The script sorts a table by the column clicked, shows one section alone when the address
names it (``report.html#sms``: the bar's links act as tabs; ``All`` shows every section), marks
``data-ready="1"`` on the body once it has
run, and shows any script error in a banner (``data-error`` on the body), so a browser test can
tell a page that ran from one that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d1d1f}
header{background:#26324a;color:#fff;padding:10px 20px}header h1{margin:0;font-size:20px}
nav{position:sticky;top:0;background:#eef1f6;padding:6px 20px;border-bottom:1px solid #ccd;z-index:1}
nav a{margin-right:14px;color:#26324a;text-decoration:none;font-weight:600}
main{padding:0 20px 40px}section{margin-top:24px}h2{border-bottom:2px solid #26324a;padding-bottom:2px}
table{border-collapse:collapse;margin:6px 0 12px;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d8dbe2;padding:2px 7px;text-align:right;vertical-align:middle}
th{background:#f4f5f8;cursor:pointer;white-space:nowrap}table.scopes{font-size:12px}table.scopes th,table.scopes td{padding:1px 4px}td.t,th.t{text-align:left}
pre{background:#f7f7f9;padding:8px;overflow-x:auto;font-size:12px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg.hist rect{fill:#3b528b}
svg.heat image,svg.bar image{image-rendering:pixelated}
.note{color:#555}.slower{color:#b00020;font-weight:600}.faster{color:#1b7f3b;font-weight:600}
body.tab main>section:not(.on){display:none}
#js-error{background:#b00020;color:#fff;padding:8px 20px}
"""

SCRIPT = """
window.onerror=function(message){var b=document.getElementById('js-error');
b.hidden=false;b.textContent='script error: '+message;document.body.dataset.error='1';};
document.addEventListener('DOMContentLoaded',function(){
document.querySelectorAll('table.sort th').forEach(function(th,col){th.title='sort';
th.addEventListener('click',function(){var body=th.closest('table').tBodies[0];
var rows=Array.prototype.slice.call(body.rows);var up=th.dataset.up!=='1';th.dataset.up=up?'1':'0';
function key(r){var c=r.cells[th.cellIndex];var v=c&&c.dataset.v;return v===undefined?(c?c.textContent:''):parseFloat(v);}
rows.sort(function(a,b){var x=key(a),y=key(b);var d=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));return up?d:-d;});
rows.forEach(function(r){body.appendChild(r);});});});
function tab(){var id=location.hash.slice(1);var target=id?document.getElementById(id):null;
var one=!!target&&target.tagName==='SECTION';document.body.classList.toggle('tab',one);
document.querySelectorAll('main>section').forEach(function(s){s.classList.toggle('on',s===target);});
if(one){window.scrollTo(0,0);setTimeout(function(){window.scrollTo(0,0);},0);}}
window.addEventListener('hashchange',tab);window.addEventListener('load',tab);tab();
document.body.dataset.ready='1';});
"""


@dataclass(frozen=True)
class Section:
    """One part of the page: its anchor, heading and HTML body."""

    id: str
    title: str
    body: str


@dataclass(frozen=True)
class Cell:
    """A table cell: its text (escaped when written), a number to sort by, left-aligned or not."""

    text: str
    sort: float | None = None
    left: bool = False
    raw_html: bool = False  # ``text`` is HTML made here (a figure), not data

    def html(self) -> str:
        attrs = ' class="t"' if self.left else ""
        if self.sort is not None and self.sort == self.sort:  # NaN sorts as text
            attrs += f' data-v="{self.sort!r}"'
        return f"<td{attrs}>{self.text if self.raw_html else escape(self.text)}</td>"


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], left: int = 1, cls: str = "") -> str:
    """A sortable table; the first ``left`` columns are names, aligned left."""
    head = "".join(f"<th{' class=t' if i < left else ''}>{escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell.html() for cell in row) + "</tr>" for row in rows)
    return f'<table class="sort {cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The whole document: header, a bar of links to the sections, the sections."""
    links = '<a href="#">All</a>' + "".join(f'<a href="#{s.id}">{escape(s.title)}</a>' for s in sections)
    parts = "".join(f'<section id="{s.id}"><h2>{escape(s.title)}</h2>{s.body}</section>' for s in sections)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style><script>{SCRIPT}</script></head>"
        f'<body><div id="js-error" hidden></div><header><h1>{escape(title)}</h1>'
        f"<div>{escape(subtitle)}</div></header><nav>{links}</nav><main>{parts}</main></body></html>\n"
    )


def paragraph(text: str, cls: str = "") -> str:
    return f"<p{f' class={cls}' if cls else ''}>{escape(text)}</p>"
