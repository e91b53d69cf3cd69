(function () {
  "use strict";
  // The per-test GPU timeline in a test's detail view (only on pages with timelines). The data
  // block holds each timeline's events as zlib'd varint columns (pytest_gpuutil/capture/timeline.py):
  // decoded when the detail view first opens, drawn on a canvas. At any zoom the events of a lane
  // that fall in the same pixel are merged into one span (the category of the longest), so
  // 100,000 events draw at once; zoomed in, every event is its own rectangle.
  var node = document.getElementById("gu-timelines");
  var table = document.getElementById("tests");
  if (!node || !table) return;
  var body = table.tBodies[0];
  var ALL = null;
  var KINDS = ["kernel", "memcpy", "memset"];
  var LANE_H = 18, AXIS_H = 20, HOST_H = 14, STRIP_H = 16, LABEL_W = 230;
  var STRIP = [["sm_pct", "SM %", "#4e79a7"], ["tensor_pct", "tensor %", "#f28e2b"], ["dram_bw_pct", "DRAM %", "#59a14f"]];
  var api = { views: [], ready: {} };
  window.guTimeline = api;

  function all() { if (!ALL) ALL = JSON.parse(node.textContent); return ALL; }
  var DETAILS = null;
  function findingsOf(index) {  // the row's findings, from the page's own detail data (read once)
    if (!DETAILS) DETAILS = JSON.parse(document.getElementById("gu-data").textContent).tests;
    return (DETAILS[index] && DETAILS[index].fd) || [];
  }
  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (kids || []).forEach(function (k) { if (k !== null) e.appendChild(typeof k === "string" ? document.createTextNode(k) : k); });
    return e;
  }
  function dur(ns) {
    var a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + " ns";
    if (a < 1e6) return Number((ns / 1e3).toPrecision(3)) + " µs";
    if (a < 1e9) return Number((ns / 1e6).toPrecision(3)) + " ms";
    return Number((ns / 1e9).toPrecision(3)) + " s";
  }

  // -- decoding ---------------------------------------------------------------------------------
  function bytesOf(text, zipped) {
    var bin = atob(text), raw = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) raw[i] = bin.charCodeAt(i);
    if (!zipped) return Promise.resolve(raw);
    if (typeof DecompressionStream === "undefined") return Promise.reject(new Error("this browser cannot inflate the timeline (no DecompressionStream)"));
    var stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (b) { return new Uint8Array(b); });
  }
  function decode(t) {
    return bytesOf(t.e, t.z).then(function (raw) {
      var n = t.n, at = 0, cols = [], count = t.m ? 5 : 4;
      for (var c = 0; c < count; c++) {
        var col = new Float64Array(n);
        for (var i = 0; i < n; i++) {
          var v = 0, mul = 1, b;
          do { b = raw[at++]; v += (b & 127) * mul; mul *= 128; } while (b >= 128);
          col[i] = v;
        }
        cols.push(col);
      }
      var lane = cols[0], start = cols[2], lanes = t.l.length, first = new Int32Array(lanes + 1), maxDur = new Float64Array(lanes);
      for (var k = 0; k < n; k++) {  // deltas within a lane back to starts
        if (k > 0 && lane[k] === lane[k - 1]) start[k] += start[k - 1];
        if (cols[3][k] > maxDur[lane[k]]) maxDur[lane[k]] = cols[3][k];
      }
      var l = 0;
      for (var j = 0; j <= lanes; j++) { while (l < n && lane[l] < j) l++; first[j] = l; }
      return { t: t, lane: lane, key: cols[1], start: start, dur: cols[3], count: cols[4] || null, first: first, maxDur: maxDur };
    });
  }

  // -- one view ---------------------------------------------------------------------------------
  function laneLabel(l) {
    var where = "GPU " + l[0] + " · stream " + l[1];
    return l[2] ? l[2] + " · " + where : where;
  }
  function View(box, ev, colors, index) {
    var t = ev.t, self = this;
    this.ev = ev; this.t = t; this.colors = colors; this.index = index;
    this.v0 = 0; this.v1 = Math.max(1, t.w); this.hl = null;
    this.strip = STRIP.filter(function (s) { return t.c && t.c[s[0]]; });
    this.top = AXIS_H + (t.h.length ? HOST_H : 0);
    this.height = this.top + t.l.length * LANE_H + this.strip.length * STRIP_H + 4;
    var labels = el("div", { "class": "tl-labels", "style": "width:" + LABEL_W + "px;height:" + this.height + "px" });
    labels.appendChild(el("div", { "class": "tl-lab tl-axis-lab", "style": "top:0;height:" + AXIS_H + "px" }, ["time in the call"]));
    if (t.h.length) labels.appendChild(el("div", { "class": "tl-lab tl-host", "style": "top:" + AXIS_H + "px" }, ["host waits"]));
    t.l.forEach(function (l, i) {
      labels.appendChild(el("div", { "class": "tl-lab tl-lane" + (l[2] ? " tl-child" : ""), "title": laneLabel(l),
        "style": "top:" + (self.top + i * LANE_H) + "px" }, [laneLabel(l)]));
    });
    this.strip.forEach(function (s, i) {
      labels.appendChild(el("div", { "class": "tl-lab tl-strip", "style": "top:" + (self.top + t.l.length * LANE_H + i * STRIP_H) + "px" }, [s[1]]));
    });
    this.canvas = el("canvas", { "class": "tl-canvas" });
    this.overlay = el("div", { "class": "tl-overlay" });
    this.tip = el("div", { "class": "tl-tip", "hidden": "" });
    this.plot = el("div", { "class": "tl-plot", "style": "height:" + this.height + "px" }, [this.canvas, this.overlay, this.tip]);
    box.appendChild(el("div", { "class": "tl-body" }, [labels, this.plot]));
    this.width = 0;
    this.listen();
    this.draw();
  }
  View.prototype.x = function (ns) { return (ns - this.v0) / (this.v1 - this.v0) * this.width; };
  View.prototype.ns = function (x) { return this.v0 + x / this.width * (this.v1 - this.v0); };
  View.prototype.laneY = function (i) { return this.top + i * LANE_H; };
  View.prototype.color = function (k) { return this.colors[this.t.k[k][2]] || "#bab0ac"; };
  View.prototype.lit = function (k, d) {
    var h = this.hl;
    if (!h || !h.events) return true;
    var key = this.t.k[k];
    return (h.kinds && h.kinds[key[1]]) || (h.cats && h.cats[key[2]]) ||
      (h.prefixes && h.prefixes.some(function (p) { return key[0].indexOf(p) === 0; })) ||
      (h.shorter !== undefined && key[1] === 0 && d <= h.shorter) || false;
  };
  View.prototype.fitWidth = function () {
    var w = Math.max(200, this.plot.clientWidth || this.width || 800), dpr = window.devicePixelRatio || 1;
    if (w === this.width && this.ctx) return;
    this.width = w;
    this.canvas.width = Math.round(w * dpr); this.canvas.height = Math.round(this.height * dpr);
    this.canvas.style.width = w + "px"; this.canvas.style.height = this.height + "px";
    this.ctx = this.canvas.getContext("2d"); this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  };
  View.prototype.draw = function () {
    this.fitWidth();
    var c = this.ctx, t = this.t, ev = this.ev, w = this.width, self = this;
    c.clearRect(0, 0, w, this.height);
    c.font = "10px system-ui, sans-serif";
    // the axis
    var span = this.v1 - this.v0, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
    if (span / step > 12) step *= 5; else if (span / step > 6) step *= 2;
    c.fillStyle = "#59636e"; c.strokeStyle = "#d1d9e0";
    for (var g = Math.ceil(this.v0 / step) * step; g <= this.v1; g += step) {
      var gx = Math.round(this.x(g)) + 0.5;
      c.beginPath(); c.moveTo(gx, AXIS_H - 6); c.lineTo(gx, this.height); c.stroke();
      c.fillText(dur(g), Math.min(gx + 2, w - 40), 10);
    }
    // lane backgrounds
    for (var i = 0; i < t.l.length; i++) {
      c.fillStyle = i % 2 ? "#f6f8fa" : "#ffffff";
      c.fillRect(0, this.laneY(i), w, LANE_H);
    }
    // idle gaps: shaded over the lanes of their device
    this.overlay.textContent = "";
    var gapLit = this.hl && this.hl.gaps;
    t.g.forEach(function (gap) {
      var x0 = self.x(gap[1]), x1 = self.x(gap[1] + gap[2]);
      if (x1 < 0 || x0 > w) return;
      var rows = t.l.map(function (l, j) { return l[0] === gap[0] ? j : -1; }).filter(function (j) { return j >= 0; });
      c.fillStyle = gapLit ? "rgba(207,34,46,0.28)" : "rgba(207,34,46,0.10)";
      rows.forEach(function (j) { c.fillRect(x0, self.laneY(j), Math.max(1, x1 - x0), LANE_H); });
      var label = el("span", { "class": "tl-gap" + (gapLit ? " tl-lit" : ""), "data-start": String(gap[1]), "data-dur": String(gap[2]),
        "data-device": gap[0], "title": "GPU " + gap[0] + " idle " + dur(gap[2]) + " from " + dur(gap[1]) },
        ["idle " + dur(gap[2])]);
      var left = Math.max(0, x0), right = Math.min(w, x1);
      label.style.left = left + "px"; label.style.width = Math.max(0, right - left) + "px";
      label.style.top = (self.laneY(rows[0] || 0) - 1) + "px";
      if (right - left < 44) label.classList.add("tl-narrow");
      self.overlay.appendChild(label);
    });
    // events, merged per pixel
    var dim = !!(this.hl && this.hl.events);
    for (var ln = 0; ln < t.l.length; ln++) {
      var y = this.laneY(ln) + 2, h = LANE_H - 4;
      var lo = ev.first[ln], hi = ev.first[ln + 1], from = this.v0 - ev.maxDur[ln];
      var a = lo, b = hi;
      while (a < b) { var m = (a + b) >> 1; if (ev.start[m] < from) a = m + 1; else b = m; }
      var px0 = -1, px1 = -1, best = -1, bestDur = -1, bestLit = false;
      for (var e = a; e < hi; e++) {
        var s = ev.start[e];
        if (s > this.v1) break;
        var d = ev.dur[e], x0 = this.x(s), x1 = this.x(s + d);
        if (x1 < 0) continue;
        var lit = this.lit(ev.key[e], d);
        if (best >= 0 && Math.floor(x0) <= Math.floor(px1)) {  // starts in the pixel the span ends in: one span
          if (x1 > px1) px1 = x1;
          if (d > bestDur) { best = e; bestDur = d; }
          bestLit = bestLit || lit;
          continue;
        }
        if (best >= 0) this.span(px0, px1, y, h, best, dim && !bestLit);
        px0 = x0; px1 = x1; best = e; bestDur = d; bestLit = lit;
      }
      if (best >= 0) this.span(px0, px1, y, h, best, dim && !bestLit);
    }
    // the host's waits, in their own row above the lanes
    if (t.h.length) {
      var hy = AXIS_H + 2, waitsLit = this.hl && this.hl.waits;
      c.fillStyle = waitsLit ? "#cf222e" : "#8250df";
      t.h.forEach(function (wt) {
        var x0 = self.x(wt[0]), x1 = self.x(wt[1]);
        if (x1 < 0 || x0 > w) return;
        c.fillRect(x0, hy + 3, Math.max(2, x1 - x0), HOST_H - 8);
        c.beginPath(); c.moveTo(x0, hy); c.lineTo(x0 + 4, hy); c.lineTo(x0, hy + 6); c.closePath(); c.fill();
      });
    }
    // the hardware counters' strip
    var sy = this.top + t.l.length * LANE_H;
    this.strip.forEach(function (s, i) {
      var vals = t.c[s[0]], y0 = sy + i * STRIP_H;
      c.fillStyle = "#f6f8fa"; c.fillRect(0, y0, w, STRIP_H - 2);
      c.fillStyle = (self.hl && self.hl.strip) ? "#cf222e" : s[2];
      for (var k = 0; k < t.c.t.length; k++) {
        var v = vals[k];
        if (v === null || v === undefined) continue;
        var x0 = self.x(t.c.t[k]), x1 = self.x(t.c.t[k] + t.c.d[k]), hh = (STRIP_H - 3) * Math.min(100, Math.max(0, v)) / 100;
        if (x1 < 0 || x0 > w) continue;
        c.fillRect(x0, y0 + STRIP_H - 2 - hh, Math.max(1, x1 - x0), hh);
      }
    });
    this.box && this.box.setAttribute("data-view", this.v0 + " " + this.v1);
  };
  View.prototype.span = function (x0, x1, y, h, e, faded) {
    var c = this.ctx;
    c.globalAlpha = faded ? 0.22 : 1;
    c.fillStyle = this.color(this.ev.key[e]);
    var left = Math.max(0, x0), right = Math.min(this.width, Math.max(x1, x0 + 1));
    c.fillRect(left, y, Math.max(1, right - left), h);
    c.globalAlpha = 1;
  };
  // what the host was doing in [from, to]: its sampled places (t.hs: [ns, "path:line function: text"]), most often first
  function hostAt(t, from, to) {
    if (!t.hs || !t.hs.length) return "";
    var counts = {}, order = [];
    t.hs.forEach(function (s) {
      if (s[0] < from || s[0] > to) return;
      if (!(s[1] in counts)) { counts[s[1]] = 0; order.push(s[1]); }
      counts[s[1]] += 1;
    });
    if (!order.length) return "";
    order.sort(function (a, b) { return counts[b] - counts[a]; });
    return "\nthe host was at:" + order.slice(0, 3).map(function (k) { return "\n  " + k + " (" + counts[k] + (counts[k] === 1 ? " sample)" : " samples)"); }).join("");
  }

  // what is under the mouse: an event (or merged span), a wait, a gap, a counter sample
  View.prototype.at = function (x, y) {
    var t = this.t, ev = this.ev, ns = this.ns(x), slack = 2 * (this.v1 - this.v0) / this.width;
    if (t.h.length && y >= AXIS_H && y < AXIS_H + HOST_H) {
      for (var i = 0; i < t.h.length; i++) {
        if (ns >= t.h[i][0] - slack && ns <= t.h[i][1] + slack) return "host wait: " + t.h[i][2] + "\nduration: " + dur(t.h[i][1] - t.h[i][0]) + "\nat: " + dur(t.h[i][0]);
      }
      return null;
    }
    var ln = Math.floor((y - this.top) / LANE_H);
    if (ln >= 0 && ln < t.l.length) {
      var lo = ev.first[ln], hi = ev.first[ln + 1], a = lo, b = hi, from = ns - slack - ev.maxDur[ln];
      while (a < b) { var m = (a + b) >> 1; if (ev.start[m] < from) a = m + 1; else b = m; }
      var hit = -1, n = 0, best = -1;
      for (var e = a; e < hi && ev.start[e] <= ns + slack; e++) {
        if (ev.start[e] + ev.dur[e] >= ns - slack) { n += ev.count ? ev.count[e] : 1; if (best < 0 || ev.dur[e] > ev.dur[best]) best = e; if (ev.start[e] <= ns && ev.start[e] + ev.dur[e] >= ns) hit = e; }
      }
      var k = hit >= 0 ? hit : best;
      if (k >= 0) {
        var key = t.k[ev.key[k]], merged = ev.count && ev.count[k] > 1 ? ev.count[k] : 0;
        var text = (n > 1 && hit < 0 ? n + " events here; the longest:\n" : "") + key[0] + "\nduration: " + dur(ev.dur[k]) +
          "\ncategory: " + key[2] + " (" + KINDS[key[1]] + ")\nat: " + dur(ev.start[k]) + "\nlane: " + laneLabel(t.l[ln]);
        return merged ? merged + " events merged (zoom in for each); the longest:\n" + text : text;
      }
      for (var g = 0; g < t.g.length; g++) {
        var gap = t.g[g];
        if (gap[0] === t.l[ln][0] && ns >= gap[1] && ns <= gap[1] + gap[2]) return "GPU " + gap[0] + " idle " + dur(gap[2]) + "\nfrom " + dur(gap[1]) + hostAt(t, gap[1], gap[1] + gap[2]);
      }
      return null;
    }
    var si = Math.floor((y - this.top - t.l.length * LANE_H) / STRIP_H);
    if (si >= 0 && si < this.strip.length) {
      for (var q = 0; q < t.c.t.length; q++) {
        if (ns >= t.c.t[q] && ns <= t.c.t[q] + t.c.d[q]) {
          var v = t.c[this.strip[si][0]][q];
          return this.strip[si][1] + ": " + (v === null ? "–" : v) + "\nsample of " + dur(t.c.d[q]) + " at " + dur(t.c.t[q]);
        }
      }
    }
    return null;
  };
  View.prototype.zoom = function (factor, x) {
    var at = this.ns(x), span = Math.min(this.t.w, Math.max(200, (this.v1 - this.v0) * factor));
    var v0 = at - (at - this.v0) * span / (this.v1 - this.v0);
    this.v0 = Math.max(0, Math.min(v0, this.t.w - span)); this.v1 = this.v0 + span;
    this.draw();
  };
  View.prototype.show = function (v0, v1) {
    this.v0 = Math.max(0, v0); this.v1 = Math.min(this.t.w, Math.max(v1, this.v0 + 200)); this.draw();
  };
  View.prototype.listen = function () {
    var self = this, plot = this.plot, drag = null;
    function local(e) { var r = self.canvas.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; }
    plot.addEventListener("wheel", function (e) {
      e.preventDefault();
      self.zoom(e.deltaY > 0 ? 1.25 : 0.8, local(e)[0]);
    }, { passive: false });
    plot.addEventListener("mousedown", function (e) { drag = { x: e.clientX, v0: self.v0, v1: self.v1 }; e.preventDefault(); });
    window.addEventListener("mouseup", function () { drag = null; });
    plot.addEventListener("mousemove", function (e) {
      var p = local(e);
      if (drag) {
        var shift = (drag.x - e.clientX) / self.width * (drag.v1 - drag.v0);
        var v0 = Math.max(0, Math.min(drag.v0 + shift, self.t.w - (drag.v1 - drag.v0)));
        self.v0 = v0; self.v1 = v0 + (drag.v1 - drag.v0); self.draw();
        return;
      }
      var text = self.at(p[0], p[1]);
      if (!text) { self.tip.hidden = true; return; }
      self.tip.textContent = text; self.tip.hidden = false;
      self.tip.style.left = Math.min(p[0] + 12, self.width - 260) + "px"; self.tip.style.top = (p[1] + 14) + "px";
    });
    plot.addEventListener("mouseleave", function () { self.tip.hidden = true; });
    plot.addEventListener("dblclick", function () { self.show(0, self.t.w); });
  };

  // a finding's evidence, as what to light up on the timeline
  function evidence(f) {
    var rule = f[0], ev = f[4] || {};
    // the kernels or copies it names (a long name cut with "..." matches by its start)
    var named = Object.keys(ev.by_name || {}).concat((ev.top_kernels || []).map(function (k) { return String(k.name || ""); }))
      .map(function (n) { return n.replace(/(\.\.\.|…)$/, ""); }).filter(function (n) { return n; });
    if (rule === "host-sync") return { waits: true };
    if (rule === "gpu-idle") return { gaps: true };
    if (rule === "low-sm-activity") return { strip: true, gaps: true };
    if (rule === "launch-bound") return { events: true, shorter: 2 * 1000 * (ev.median_kernel_us || 5) };
    if (named.length) return { events: true, prefixes: named };
    if (rule === "fp32-matmul") return { events: true, cats: { gemm: true, conv: true } };
    if (rule.indexOf("memcpy") >= 0) return { events: true, kinds: { 1: true } };
    return { events: true };
  }

  function addTo(row) {
    var tr = row.guDetail;
    if (!tr || tr.guTimeline) return;
    var d = all(), t = d.tests[String(row.guIndex)];
    if (!t) return;
    tr.guTimeline = true;
    var dv = tr.querySelector(".dv");
    var box = el("div", { "class": "tl", "data-test-index": String(row.guIndex) });
    var note = el("p", { "class": "note" }, [t.n + (t.m ? " spans (" + t.ne + " events, merged to fit the page)" : " events") +
      " · idle gaps of at least " + dur(t.gt || 0) + " shaded · wheel: zoom, drag: pan, double-click: all · hover for details" +
      (t.h.length ? " · host waits above the lanes" : "")]);
    var head = el("h4", {}, ["Timeline of the call"]);
    var where = dv.querySelector(".fd");
    var anchor = where ? where.nextSibling : dv.children[2] || null;
    dv.insertBefore(head, anchor); dv.insertBefore(note, anchor); dv.insertBefore(box, anchor);
    api.ready[row.guIndex] = decode(t).then(function (ev) {
      var view = new View(box, ev, d.colors, row.guIndex);
      view.box = box; box.guView = view; api.views.push(view);
      Array.prototype.forEach.call(dv.querySelectorAll(".finding"), function (fEl, i) {
        fEl.classList.add("tl-link"); fEl.title = "show its evidence on the timeline";
        fEl.addEventListener("click", function (e) {
          if (e.target.closest("summary, details")) return;
          var fd = findingsOf(row.guIndex);
          var on = !fEl.classList.contains("tl-on");
          Array.prototype.forEach.call(dv.querySelectorAll(".finding.tl-on"), function (o) { o.classList.remove("tl-on"); });
          if (on) fEl.classList.add("tl-on");
          view.hl = on && fd[i] ? evidence(fd[i]) : null;
          box.setAttribute("data-highlight", on && fd[i] ? fd[i][0] : "");
          view.draw();
        });
      });
      document.dispatchEvent(new CustomEvent("gu-timeline", { detail: { index: row.guIndex } }));
      return view;
    }, function (err) {
      box.appendChild(el("p", { "class": "notice" }, ["The timeline could not be drawn: " + err.message]));
      document.dispatchEvent(new CustomEvent("gu-timeline", { detail: { index: row.guIndex, error: String(err) } }));
    });
  }
  function opened(e) {
    var row = e.target.closest && e.target.closest("tr");
    if (row && row.guIndex !== undefined) addTo(row);
  }
  window.addEventListener("resize", function () { api.views.forEach(function (v) { v.draw(); }); });
  body.addEventListener("click", opened);
  body.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") opened(e); });
  api.open = function (row) { if (!row.guDetail) row.click(); else addTo(row); return api.ready[row.guIndex]; };
  api.has = function (index) { return !!all().tests[String(index)]; };
  // rows with a timeline say so in the table (a mark after the test's name, drawn by the style)
  function mark() {
    var tests = all().tests;
    Array.prototype.forEach.call(body.rows, function (r) {
      if (r.guIndex !== undefined && tests[String(r.guIndex)]) r.classList.add("tl-has");
    });
  }
  mark();
  document.addEventListener("gu-rows", mark);
})();
