/* evaldag pages: sortable tables, lineage highlighting in the DAG, table filter.
   Plain ES5-compatible script, no libraries, nothing fetched. */
(function () {
  "use strict";

  function cellKey(td) {
    var raw = td.getAttribute("data-sort");
    if (raw === null) raw = td.textContent.trim();
    var num = parseFloat(raw);
    return (raw !== "" && isFinite(num) && /^[-+]?[\d.]/.test(raw)) ? { n: num } : { s: raw.toLowerCase() };
  }

  function compare(a, b) {
    if ("n" in a && "n" in b) return a.n - b.n;
    if ("n" in a) return -1;
    if ("n" in b) return 1;
    return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  }

  function makeSortable(table) {
    var heads = table.querySelectorAll("thead th");
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var asc = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var rows = Array.prototype.slice.call(body.rows);
        rows.forEach(function (r, i) { r._edIndex = i; });
        rows.sort(function (r1, r2) {
          var c = compare(cellKey(r1.cells[col]), cellKey(r2.cells[col]));
          return (asc ? c : -c) || (r1._edIndex - r2._edIndex);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  function wireGraph(section) {
    var svg = section.querySelector("svg.ed-dag");
    if (!svg) return;
    var up = {}, down = {}, edges = svg.querySelectorAll(".ed-edge");
    Array.prototype.forEach.call(edges, function (e) {
      var s = e.getAttribute("data-src"), d = e.getAttribute("data-dst");
      (down[s] = down[s] || []).push(d);
      (up[d] = up[d] || []).push(s);
    });
    function reach(start, adj) {
      var seen = {}, todo = [start];
      while (todo.length) {
        var n = todo.pop();
        if (seen[n]) continue;
        seen[n] = true;
        (adj[n] || []).forEach(function (m) { todo.push(m); });
      }
      return seen;
    }
    var current = null;
    function clear() {
      current = null;
      svg.classList.remove("ed-focus");
      Array.prototype.forEach.call(svg.querySelectorAll(".ed-on"), function (el) { el.classList.remove("ed-on"); });
      Array.prototype.forEach.call(section.querySelectorAll("tr.ed-sel"), function (r) { r.classList.remove("ed-sel"); });
    }
    function focus(id) {
      if (current === id) { clear(); return; }
      clear();
      current = id;
      var on = reach(id, up), below = reach(id, down);
      Object.keys(below).forEach(function (k) { on[k] = true; });
      svg.classList.add("ed-focus");
      Array.prototype.forEach.call(svg.querySelectorAll(".ed-node"), function (g) {
        if (on[g.getAttribute("data-id")]) g.classList.add("ed-on");
      });
      Array.prototype.forEach.call(edges, function (e) {
        if (on[e.getAttribute("data-src")] && on[e.getAttribute("data-dst")]) e.classList.add("ed-on");
      });
      var row = section.querySelector('tr[data-id="' + id + '"]');
      if (row) row.classList.add("ed-sel");
    }
    Array.prototype.forEach.call(svg.querySelectorAll(".ed-node"), function (g) {
      g.addEventListener("click", function (ev) { ev.stopPropagation(); focus(g.getAttribute("data-id")); });
    });
    svg.addEventListener("click", clear);
    Array.prototype.forEach.call(section.querySelectorAll("tr.ed-row"), function (r) {
      r.addEventListener("click", function () {
        focus(r.getAttribute("data-id"));
        var node = svg.querySelector('[data-id="' + r.getAttribute("data-id") + '"]');
        if (node && node.scrollIntoView) node.scrollIntoView({ block: "nearest", inline: "nearest" });
      });
    });
    var filter = section.querySelector("input.ed-filter");
    if (filter) {
      filter.addEventListener("input", function () {
        var q = filter.value.trim().toLowerCase();
        Array.prototype.forEach.call(section.querySelectorAll("tr.ed-row"), function (r) {
          var hit = !q || r.textContent.toLowerCase().indexOf(q) >= 0;
          r.classList.toggle("ed-hidden", !hit);
          var node = svg.querySelector('.ed-node[data-id="' + r.getAttribute("data-id") + '"]');
          if (node) { node.classList.toggle("ed-hit", !!q && hit); node.classList.toggle("ed-miss", !!q && !hit); }
        });
      });
    }
    document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") clear(); });
  }

  /* Opened as page.html#ed-selftest (the browser test does): click the last box of the
     first graph and sort the first column of its table, and record what happened. */
  function selftest() {
    var section = document.querySelector(".ed-graph");
    var nodes = section ? section.querySelectorAll("svg .ed-node") : [];
    if (!nodes.length) return;
    var node = nodes[nodes.length - 1];
    node.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    var th = section.querySelector("table.ed-sortable thead th");
    th.click();
    th.click();
    var first = section.querySelector("table.ed-sortable tbody tr");
    document.body.setAttribute("data-ed-selftest", [
      node.getAttribute("data-id"), section.querySelectorAll("svg .ed-node.ed-on").length,
      section.querySelectorAll("svg .ed-edge.ed-on").length, th.getAttribute("aria-sort"),
      first ? first.getAttribute("data-id") : ""].join(","));
  }

  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("table.ed-sortable"), makeSortable);
    Array.prototype.forEach.call(document.querySelectorAll(".ed-graph"), wireGraph);
    if (location.hash === "#ed-selftest") selftest();
    document.body.setAttribute("data-ed-ready", "1");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
