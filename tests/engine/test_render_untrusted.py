"""A run folder edited by someone hostile: nothing it holds may become markup, script or syntax.

``evaldag report`` and ``evaldag graph --run`` draw folders made elsewhere (a colleague's,
a cluster's, one attached to a bug report). Every value in them is untrusted: a node's
name or status, a reason, a fingerprint, params, provenance, executor statistics, the
EVAL/SUMMARY keys and values. Here a real toy run is made, then every field of its
run.json and of its EVAL/SUMMARY files is replaced by a string that tries to break out of
HTML text, attributes, SVG, Mermaid labels and DOT strings. The pages are opened in
headless Chromium: no script of the payload runs (it would set the title to PWNED and
mark the body), no element it carries exists in the DOM. Mermaid and DOT are checked
line by line against the only shapes the renderers write.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.render.runjson import read_run_json

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")) if p), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (CI installs it: apt-get install -y chromium)")

JS = "document.title='PWNED';document.documentElement.setAttribute('data-pwned','1')"


def hostile(tag: str) -> str:
    """Every way out we know of, in one string; ``tag`` says which field it came from."""
    return (f'{tag}"><script>{JS}</script><img src=x id="pwn-{tag}" class="pwn" onerror="{JS}">'
            f"'><svg onload=\"{JS}\"><b class=pwn>x</b></svg></title></style></textarea>]]><!-- "
            f'`#quot; #lt;b#gt; \\" \\\\ \\n end\nflowchart TD\r\n  x --> y; }} ]] {{ |pipe| %% &amp; &lt;i&gt;')


def make_hostile_folder(tmp: Path) -> Path:
    """A real toy run whose run.json, EVAL and SUMMARY hold a hostile string in every field."""
    out = tmp / "out"
    assert cli.main(["run", "toy", "--quiet", "--out", str(out), "--cache-dir", str(tmp / "cache")]) == 0
    run = json.loads((out / "run.json").read_text())
    rename = {name: hostile(f"node{i}") for i, name in enumerate(sorted(run["nodes"]))}
    nodes = {}
    for i, (name, e) in enumerate(sorted(run["nodes"].items())):
        h = lambda f: hostile(f"n{i}-{f}")  # noqa: E731
        e.update(status=h("status"), kind=h("kind"), metric=h("metric"), reason=h("reason"), error=h("error"),
                 fingerprint=h("fp"), version=h("version"), seconds=h("seconds"),
                 names=[h("name1"), h("name2")], resources={h("need"): h("res")},
                 params={h("pkey"): h("pval"), "nested": {h("nkey"): [h("nval")]}},
                 params_not_default={h("pkey"): h("pval")})
        e["parents"] = {h("akey"): rename[p] for p in (e.get("parents") or {}).values() if p in rename}
        nodes[rename[name]] = e
    run["nodes"] = nodes
    run["wall_seconds"] = hostile("wall")
    run["benchmarks"] = [hostile("bench"), "toy"]
    run["refresh"] = hostile("refresh")
    ex = {k: hostile(f"ex-{k}") for k in run["executor"] if k != "by_kind"}
    ex["by_kind"] = {hostile("kind"): {k: hostile(f"bk-{k}") for k in ("requests", "unique", "cached", "seconds")}}
    ex[hostile("exkey")] = hostile("exval")
    run["executor"] = ex
    prov = {k: hostile(f"prov-{k}") for k in run["provenance"]}
    prov["resources"] = {hostile("rname"): {k: hostile(f"r-{k}") for k in ("kind", "path", "source", "fingerprint",
                                                                             "loaded_dtype", "loaded_device")}}
    prov["command"] = [hostile("cmd0"), hostile("cmd1")]
    prov[hostile("provkey")] = hostile("provval")
    run["provenance"] = prov
    (out / "run.json").write_text(json.dumps(run))
    for kind in ("EVAL", "SUMMARY"):
        for path in out.glob(f"*_{kind}.json"):
            data = json.loads(path.read_text())
            bad = {hostile(f"{kind}-{i}"): v for i, v in enumerate(data.values())}  # hostile names, real values
            bad[hostile(f"{kind}-str")] = hostile(f"{kind}-strval")
            bad[hostile(f"{kind}-dict")] = {"agg_value": hostile(f"{kind}-agg"), "value_by_index": {hostile("i"): hostile("v")}}
            path.write_text(json.dumps(bad))
    return out


class Elements(HTMLParser):
    """Every element of a DOM dump, with its attributes (text is not looked at)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_title = tag == "title" and len([t for t, _ in self.tags if t == "title"]) == 1

    def handle_endtag(self, tag):
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data


def injected(dom: str) -> list[str]:
    """Elements or attributes that only the payload could have made."""
    p = Elements()
    p.feed(dom)
    out = []
    for tag, attrs in p.tags:
        if tag == "img" or "pwn" in (attrs.get("class") or "") or (attrs.get("id") or "").startswith("pwn"):
            out.append(f"<{tag} {attrs}>")
        if any(k.startswith("on") for k in attrs) or "data-pwned" in attrs:
            out.append(f"<{tag} {attrs}>")
    return out


def chromium_dom(tmp: Path, page: Path) -> str:
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp)
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--disable-background-networking", "--no-first-run", f"--user-data-dir={profile}",
                           "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_hostile_folder(tmp_path_factory.mktemp("hostile"))


def test_the_payload_is_caught_by_these_checks_when_unescaped(tmp_path):
    """The control: the same string pasted raw into a page runs and leaves elements behind."""
    if CHROMIUM is None:
        pytest.skip("no chromium")
    page = tmp_path / "raw.html"
    page.write_text(f"<html><head><title>t</title></head><body><p>{hostile('raw')}</p></body></html>")
    dom = chromium_dom(tmp_path, page)
    assert injected(dom)
    assert 'data-pwned="1"' in dom


def test_wrong_types_are_dropped_with_one_warning_naming_file_and_keys(folder, capsys):
    run = read_run_json(folder / "run.json")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"evaldag: warning: {folder / 'run.json'}: ignored ")
    assert ".status" in err[0] and "wall_seconds" in err[0]
    for e in run["nodes"].values():
        assert "status" not in e and "kind" not in e and "seconds" not in e  # dropped: the defaults take over
        assert e["reason"].startswith("n")  # strings of the right type are kept (escaping is the renderers' job)
    assert "wall_seconds" not in run and run["executor"]["by_kind"] and not any(
        isinstance(v, str) for st in run["executor"]["by_kind"].values() for v in st.values())
    read_run_json(folder / "run.json")  # the same file again: no second warning
    assert capsys.readouterr().err == ""


def test_a_field_of_the_right_type_is_kept_and_a_bad_document_is_one_error(tmp_path):
    p = tmp_path / "run.json"
    p.write_text(json.dumps({"nodes": {"a": {"status": "computed", "seconds": 1.5, "kind": "scorer"},
                                       "b": {"status": "done", "seconds": "1.5", "kind": 3}, "c": "text"},
                             "wall_seconds": 2, "executor": {"by_kind": {"tok": {"seconds": -1, "batches": 3}, "gen": 7}}}))
    run = read_run_json(p, warn=False)
    assert run["nodes"]["a"] == {"status": "computed", "seconds": 1.5, "kind": "scorer"}
    assert run["nodes"]["b"] == {} and run["nodes"]["c"] == {} and run["wall_seconds"] == 2
    assert run["executor"]["by_kind"] == {"tok": {"batches": 3}, "gen": {}}
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match="run.json must hold a JSON object"):
        read_run_json(p)
    p.write_text('{"nodes": ')
    with pytest.raises(ValueError, match="not valid JSON"):
        read_run_json(p)


@needs_chromium
@pytest.mark.parametrize("how", ["report", "graph-html", "graph-svg"])
def test_hostile_folder_renders_in_chromium_with_no_script_and_no_injected_element(folder, tmp_path, how, capsys):
    page = tmp_path / ("page.svg" if how == "graph-svg" else "page.html")
    if how == "report":
        assert cli.main(["report", str(folder), "--out", str(page)]) == 0
        title = "evaldag report"
    else:
        assert cli.main(["graph", "--run", str(folder), "--format", how.split("-")[1], "--out", str(page)]) == 0
        title = None
    err = capsys.readouterr().err
    assert "Traceback" not in err
    text = page.read_text()
    assert "<script>document" not in text and "<img" not in text
    dom = chromium_dom(tmp_path, page)
    assert injected(dom) == []
    assert "PWNED" not in (re.search(r"<title>(.*?)</title>", dom, re.S) or [None, ""])[1] or how == "graph-svg"
    assert 'data-pwned="1"' not in dom
    if title:
        p = Elements()
        p.feed(dom)
        assert p.title == title  # no script changed it
        assert len([t for t, _ in p.tags if t == "script"]) == 1  # the page's own, nothing more
    else:
        assert len([t for t, _ in Elements_of(dom) if t == "script"]) == (1 if how == "graph-html" else 0)
    # the hostile text is still there, as text: the reader sees what the file says
    assert "pwn-node0" in html.unescape(dom)


def Elements_of(dom: str) -> list[tuple[str, dict]]:
    p = Elements()
    p.feed(dom)
    return p.tags


# ---------------------------------------------------------------------- Mermaid and DOT, line by line
_MM_LABEL = r'"[^"\n]*"'
_MM_LINES = [
    r"flowchart LR",
    r"    classDef [A-Za-z0-9_-]+ fill:#[0-9a-f]{6},stroke:#[0-9a-f]{6},color:#[0-9a-f]{6}(,stroke-dasharray:5 3)?",
    r"    classDef shared stroke-width:3px",
    rf" *subgraph g\d+(s\d+)?\[{_MM_LABEL}\]",
    r" *end",
    rf" *n\d+(\[{_MM_LABEL}\]|\[\[{_MM_LABEL}\]\]|\(\[{_MM_LABEL}\]\))",
    r"    n\d+ --> n\d+",
    r"    class n\d+(,n\d+)* [A-Za-z0-9_-]+",
]


def test_mermaid_of_a_hostile_folder_has_only_the_renderers_own_lines(folder, tmp_path):
    out = tmp_path / "g.mmd"
    assert cli.main(["graph", "--run", str(folder), "--format", "mermaid", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    for line in lines:
        assert any(re.fullmatch(p, line) for p in _MM_LINES), f"unexpected Mermaid line: {line!r}"
    labels = re.findall(_MM_LABEL, out.read_text())
    own = re.compile(r"</?(b|i|small)>|<br/>")
    for label in labels:
        bare = own.sub("", label[1:-1])
        assert not set(bare) & set("<>[]{}|`\"'"), bare  # every reserved character is an entity code
    # entity codes decode back to what the file says
    decoded = [re.sub(r"#(\d+|[a-z]+);", lambda m: html.unescape(f"&{'#' if m.group(1).isdigit() else ''}{m.group(1)};"),
                      own.sub("", lb[1:-1])) for lb in labels]
    want = hostile("n0-name1").replace("\n", " ").replace("\r", " ")
    assert any(want in d for d in decoded)
    assert len([ln for ln in lines if " --> " in ln]) >= 2  # the parents survived the renaming


def test_dot_of_a_hostile_folder_quotes_every_string(folder, tmp_path):
    out = tmp_path / "g.dot"
    assert cli.main(["graph", "--run", str(folder), "--format", "dot", "--out", str(out)]) == 0
    text = out.read_text()
    quoted = re.compile(r'"(?:[^"\\\n]|\\.)*"')
    outside = quoted.sub('""', text)
    assert "<" not in outside and "PWN" not in outside.upper() and "script" not in outside
    for line in outside.splitlines():  # what is left is DOT's own punctuation and identifiers
        assert re.fullmatch(r"[A-Za-z0-9_ =;,\[\]{}\-\">.]*", line), line
    labels = [m[1:-1] for m in quoted.findall(text)]
    unq = [re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), s) for s in labels]
    assert any(hostile("n0-name1").replace("\r\n", "\n").replace("\r", "\n") in s for s in unq)
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
