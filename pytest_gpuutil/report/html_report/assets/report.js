(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("gu-data").textContent);
  var table = document.getElementById("tests");
  var body = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var more = document.getElementById("more-rows");
  var byIndex = Array.prototype.slice.call(body.rows).concat(more ? Array.prototype.slice.call(more.content.children) : []);
  var rows = byIndex.slice();
  // The rows beyond the first screenfuls join the table after the first paint (or when a sort,
  // filter or detail view needs them), so the page opens before 1,000 rows are laid out. A timer
  // backs the frame up: where no frame comes (some headless browsers), the rows still join.
  function showAll() {
    if (more) {
      body.appendChild(more.content);
      more = null;
      document.documentElement.setAttribute("data-gu-rows", "all");
      document.dispatchEvent(new Event("gu-rows"));
    }
  }
  window.guReport = { showAll: showAll };
  if (more) {
    requestAnimationFrame(function () { setTimeout(showAll, 0); });
    setTimeout(showAll, 200);
  } else document.documentElement.setAttribute("data-gu-rows", "all");
  var C = { test: 0, outcome: 1, wall: 2, gpu: 3, busy: 4, mm: 5, attn: 6, comm: 7, mem: 8, kernels: 9, top: 11, limits: 12 };
  byIndex.forEach(function (r, i) { r.guIndex = i; });

  function cellText(row, col) { return row.cells[col].textContent.trim(); }
  function cellKey(row, col, numeric) {
    var text = cellText(row, col);
    if (numeric) { var v = parseFloat(text); return isNaN(v) ? null : v; }
    return text === "" ? null : text.toLowerCase();
  }

  function sortBy(th) {
    showAll();
    var col = heads.indexOf(th), numeric = th.getAttribute("data-sort") === "num";
    var now = th.getAttribute("aria-sort");
    var dir = now === "descending" ? 1 : now === "ascending" ? -1 : numeric ? -1 : 1;
    heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    var keyed = rows.map(function (r, n) { return { r: r, k: cellKey(r, col, numeric), n: n }; });
    keyed.sort(function (a, b) {
      if (a.k === b.k) return a.n - b.n;
      if (a.k === null) return 1;
      if (b.k === null) return -1;
      return (a.k < b.k ? -1 : 1) * dir;
    });
    var frag = document.createDocumentFragment();
    keyed.forEach(function (e) { frag.appendChild(e.r); if (e.r.guDetail) frag.appendChild(e.r.guDetail); });
    body.appendChild(frag);
    rows = keyed.map(function (e) { return e.r; });
  }
  heads.forEach(function (th) {
    if (th.hasAttribute("data-sort")) th.addEventListener("click", function () { sortBy(th); });
  });

  var text = document.getElementById("filter-text");
  var outcome = document.getElementById("filter-outcome");
  var only = document.getElementById("filter-only");
  var shown = document.getElementById("shown");
  function applyFilter() {
    showAll();
    var q = text.value.trim().toLowerCase(), o = outcome.value, which = only.value, count = 0;
    rows.forEach(function (r) {
      var d = DATA.tests[r.guIndex];
      var ok = (!q || (cellText(r, C.test) + " " + (d.tk || cellText(r, C.top))).toLowerCase().indexOf(q) >= 0)
        && (!o || cellText(r, C.outcome) === o)
        && (which !== "gpu" || parseFloat(cellText(r, C.kernels)) > 0)
        && (which !== "limits" || cellText(r, C.limits) !== "")
        && (which !== "findings" || (d.fd && d.fd.length > 0));
      r.hidden = !ok;
      if (r.guDetail) r.guDetail.hidden = !ok;
      if (ok) count++;
    });
    shown.textContent = count === rows.length ? rows.length + " tests" : count + " of " + rows.length + " tests";
  }
  text.addEventListener("input", applyFilter);
  outcome.addEventListener("change", applyFilter);
  only.addEventListener("change", applyFilter);

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (kids || []).forEach(function (k) {
      if (k !== null && k !== undefined) e.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
    });
    return e;
  }
  function fmt(v, digits) {
    if (v === null || v === undefined || v === "") return "–";
    if (typeof v !== "number") return String(v);
    return digits === undefined ? (Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)))) : v.toFixed(digits);
  }
  function grid(headers, body2, numericFrom) {
    var head = el("tr", {}, headers.map(function (h, i) { return el("th", i >= numericFrom ? { "class": "n" } : {}, [h]); }));
    var tb = el("tbody", {}, body2.map(function (r) {
      return el("tr", r.cls ? { "class": r.cls } : {}, r.map(function (c, i) {
        return el("td", i >= numericFrom ? { "class": "n" } : {}, [c instanceof Node ? c : fmt(c)]);
      }));
    }));
    return el("table", {}, [el("thead", {}, [head]), tb]);
  }
  function kv(pairs) {
    return el("div", { "class": "kv" }, pairs.map(function (p) { return el("span", {}, [p[0] + ": ", el("b", {}, [p[1]])]); }));
  }
  var MEM = [["peak_alloc_mb", "peak allocated MiB", 1], ["peak_reserved_mb", "peak reserved MiB", 1],
    ["leaked_mb", "leaked MiB", 1], ["alloc_retries", "allocator retries"], ["ooms", "out-of-memory errors"]];
  var KB = ["median", "mean", "std", "min", "max", "p20", "p80", "reps", "timer", "tflops", "gbps", "tflops_pct_of_peak",
    "gbps_pct_of_peak", "sm_pct", "tensor_pct", "dram_bw_pct", "note"];
  var HW = [["sm_pct", "SM %", 1], ["tensor_pct", "tensor %", 1], ["dram_bw_pct", "DRAM bandwidth %", 1],
    ["occupancy_pct", "occupancy %", 1], ["fp16_pct", "FP16 pipe %", 1], ["fp32_pct", "FP32 pipe %", 1],
    ["fp64_pct", "FP64 pipe %", 1], ["energy_j", "energy J", 2], ["avg_power_w", "mean power W", 0], ["src", "source"]];
  var GT = ["window_us", "busy_us", "busy_pct", "mm_conv_pct", "kernel_count", "profiler_overhead", "top_kernel"];
  function results(title, obj, keys) {
    var labels = Object.keys(obj || {});
    if (!labels.length) return null;
    var cols = keys.filter(function (k) {
      return labels.some(function (l) { return obj[l] && obj[l][k] !== undefined && obj[l][k] !== null && obj[l][k] !== ""; });
    });
    var withCats = labels.some(function (l) { return obj[l] && obj[l].categories; });
    var body2 = labels.map(function (l) {
      var r = [l].concat(cols.map(function (k) { return obj[l] ? obj[l][k] : null; }));
      if (withCats) {
        var c = (obj[l] && obj[l].categories) || {};
        r.push(Object.keys(c).map(function (n) { return n + " " + (typeof c[n] === "number" ? c[n].toFixed(1) + "%" : ""); }).join(", "));
      }
      return r;
    });
    return el("div", {}, [el("h4", {}, [title]), grid(["label"].concat(cols, withCats ? ["categories (% of busy)"] : []), body2, 99)]);
  }

  // a finding: [rule, severity, message, fix, evidence(, places: [[file, line, function, source line, what]])]
  function findings(fd) {
    return el("div", { "class": "fd" }, [el("h4", {}, ["Findings: what to fix"])].concat(fd.map(function (f) {
      var ev = f[4] || {};
      var pl = f[5] || [];
      return el("div", { "class": "finding sev-" + f[1] }, [
        el("p", {}, [el("b", {}, [f[0]]), " ", el("span", { "class": "sev" }, [f[1]]), " ", f[2]]),
        el("p", { "class": "fix" }, ["fix: " + f[3]]),
        pl.length ? el("ul", { "class": "places" }, pl.map(function (p) {
          return el("li", {}, [el("code", {}, [p[0] + ":" + p[1]]), " in " + p[2] + ": " + p[4],
            p[3] ? el("pre", { "class": "mono" }, [p[3]]) : null]);
        })) : null,
        Object.keys(ev).length ? el("details", {}, [el("summary", {}, ["evidence"]),
          el("pre", { "class": "mono" }, [JSON.stringify(ev, null, 1)])]) : null]);
    })));
  }

  function detail(row) {
    var d = DATA.tests[row.guIndex];
    var kids = [el("h3", {}, [cellText(row, C.test)])];
    var facts = [["outcome", cellText(row, C.outcome)]];
    if (d.w) facts.push(["worker", d.w]);
    if (d.gpu) facts.push(["physical GPU", d.gpu.join(", ")]);
    if (cellText(row, C.limits)) facts.push(["limits", cellText(row, C.limits)]);
    kids.push(kv(facts));
    if (d.note) kids.push(el("p", {}, ["note: " + d.note]));
    if (d.fd) kids.push(findings(d.fd));
    var figs = [["wall ms", C.wall], ["GPU ms", C.gpu], ["busy %", C.busy], ["mm/conv %", C.mm], ["attention %", C.attn],
      ["communication %", C.comm], ["kernels", C.kernels]].filter(function (f) { return cellText(row, f[1]) !== ""; })
      .map(function (f) { return [f[0], cellText(row, f[1])]; });
    var f = d.f || {};
    if (f.memcpy_pct !== undefined) figs.push(["memcpy %", fmt(f.memcpy_pct, 1)]);
    if (f.measure_ms !== undefined) figs.push(["measuring it cost ms", fmt(f.measure_ms, 3)]);
    kids.push(el("h4", {}, ["Figures"]), figs.length ? kv(figs) : el("p", {}, ["not measured on a GPU"]));
    if (d.c) {
      kids.push(el("h4", {}, ["Categories"]), grid(["category", "share of busy", "time µs", "% of busy", "% of window", "kernels"],
        d.c.map(function (c) {
          var cat = DATA.categories[c[0]], w = Math.max(0, Math.min(100, c[2] || 0));
          return [cat[0], el("span", { "class": "share " + cat[1], "style": "width:" + (1.6 * w).toFixed(1) + "px" }, []),
            fmt(c[1], 1), fmt(c[2], 2), fmt(c[3], 2), fmt(c[4])];
        }), 2));
    }
    if (d.k) {
      kids.push(el("h4", {}, ["Top kernels"]), grid(["kernel", "category", "count", "time µs", "% of window"],
        d.k.map(function (k) { return [el("span", { "class": "mono" }, [k[0]]), k[1], fmt(k[2]), fmt(k[3], 1), fmt(k[4], 2)]; }), 2));
    } else {
      var top = d.tk || cellText(row, C.top);
      if (top) kids.push(el("h4", {}, ["Top kernel"]), el("div", { "class": "mono" }, [top]));
    }
    if (d.g) {
      kids.push(el("h4", {}, ["Longest idle gaps"]), grid(["GPU", "from µs (after the call's start)", "idle µs"],
        d.g.map(function (g) { return [g[0], fmt(g[1], 1), fmt(g[2], 1)]; }), 1));
    }
    if (d.p) {
      kids.push(el("h4", {}, ["Processes"]), grid(["pid", "program", "rank", "GPU", "note", "memory from", "GPU ms", "peak MiB"],
        d.p.map(function (p) { return [fmt(p[0]), p[1], p[2], p[3], p[7], p[6], fmt(p[4], 3), fmt(p[5], 1)]; }), 6));
    }
    kids.push(el("h4", {}, ["Memory"]));
    kids.push(d.m ? kv(MEM.filter(function (m) { return d.m[m[0]] !== undefined; }).map(function (m) { return [m[1], fmt(d.m[m[0]], m[2])]; }))
      : el("p", {}, ["not measured"]));
    Object.keys(d.md || {}).forEach(function (g) {
      var m = d.md[g] || {};
      kids.push(kv([["GPU " + g, ""]].concat(MEM.filter(function (x) { return m[x[0]] !== undefined && m[x[0]] !== null; })
        .map(function (x) { return [x[1], fmt(m[x[0]], x[2])]; }))));
    });
    if (d.hw) {
      kids.push(el("h4", {}, ["Hardware counters"]), kv(HW.filter(function (x) { return d.hw[x[0]] !== undefined && d.hw[x[0]] !== ""; })
        .map(function (x) { return [x[1], fmt(d.hw[x[0]], x[2])]; })));
      if (d.hw.note) kids.push(el("p", {}, [d.hw.note]));
    }
    kids.push(results("kernel_bench", d.kb, KB));
    kids.push(results("gpu_trace", d.gt, GT));
    if (d.cmp) {
      kids.push(el("h4", {}, ["Against the baseline"]), grid(["metric", "baseline", "now", "change", "limit", ""],
        d.cmp.map(function (r) { var x = [r[0], r[1], r[2], r[3], r[4], r[5] ? "regression" : "within"]; if (r[5]) x.cls = "reg"; return x; }), 1));
    }
    if (d.tr) {
      kids.push(el("h4", {}, ["Trace"]), el("p", {}, [el("a", { "href": d.tr }, ["trace file"]),
        " (gzip'd Chrome trace: open it in Perfetto, ui.perfetto.dev > Open trace file, or with gpuutil analyze)"]));
    }
    return el("div", { "class": "dv" }, kids);
  }
  function toggle(row) {
    if (row.guDetail) {
      body.removeChild(row.guDetail);
      row.guDetail = null;
      row.setAttribute("aria-expanded", "false");
      return;
    }
    var tr = el("tr", { "class": "detail" }, [el("td", { "colspan": String(heads.length) }, [detail(row)])]);
    body.insertBefore(tr, row.nextSibling);
    row.guDetail = tr;
    row.setAttribute("aria-expanded", "true");
  }
  body.addEventListener("click", function (ev) {
    if (ev.target.closest("a")) return;
    var row = ev.target.closest("tr");
    if (row && row.guIndex !== undefined) toggle(row);
  });
  body.addEventListener("keydown", function (ev) {
    var row = ev.target.closest("tr");
    if (row && row.guIndex !== undefined && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); toggle(row); }
  });

  var rest = document.getElementById("cmp-rest");
  if (rest) {
    rest.addEventListener("toggle", function () {
      var tb = rest.querySelector("tbody");
      if (!rest.open || tb.rows.length) return;
      var items = [];
      DATA.tests.forEach(function (d, i) {
        (d.cmp || []).forEach(function (r) { if (!r[5]) items.push([i, r]); });
      });
      items.sort(function (a, b) { return b[1][6] - a[1][6]; });
      var frag = document.createDocumentFragment();
      items.forEach(function (it) {
        var r = it[1];
        frag.appendChild(el("tr", {}, [el("td", { "class": "t" }, [cellText(byIndex[it[0]], C.test)]), el("td", {}, [r[0]]),
          el("td", { "class": "n" }, [fmt(r[1])]), el("td", { "class": "n" }, ["→ " + fmt(r[2])]),
          el("td", { "class": "n" }, [r[3]]), el("td", { "class": "n" }, [r[4]])]));
      });
      tb.appendChild(frag);
    });
  }
})();
