// Live page charts, drawn by the vendored uPlot (static/vendor/uplot, see its README): per pod
// and for the project, GPU memory used against the slice's limit (GiB) and compute used against
// its target (%), with axes, units, the limit/target line and hover values (uPlot's legend).
// Starts from the page's chart-data (24 h of history, per minute for the last hour) and adds
// every row the socket delivers as a point; a pod no agent reports any more is folded away
// under "Pods no longer reported". No framework. status.js calls window.trancheCharts.
"use strict";
(() => {
  const source = document.getElementById("chart-data");
  const live = document.getElementById("charts");
  const gone = document.getElementById("gone-charts");
  if (!source || !live || !gone || typeof uPlot === "undefined") return;
  const initial = JSON.parse(source.textContent);
  const MAX_POINTS = 3000; // a day of minutes plus an hour of 2 s reports
  const PROJECT_EVERY_S = 5; // the project's line gains a point at most this often
  const charts = new Map(); // pod ("" = the project) -> {data, plots}
  const latest = new Map(); // pod -> its last figures, for the project's sums
  const utc = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");
  const noHistory = document.getElementById("no-history");

  const KINDS = {
    memory: {
      title: "GPU memory", unit: "GiB", limitLabel: "Slice limit",
      used: "memory_used", limit: "memory_limit", scale: 1 / 1024, digits: 2,
    },
    compute: {
      title: "Compute", unit: "%", limitLabel: "Target share",
      used: "compute_used", limit: "compute_target", scale: 1, digits: 1,
    },
  };

  // The time axis at every span: whole-second steps only (uPlot's own go down to milliseconds
  // and, for one point, up to years: a new pod got five "00:00" ticks), at least MIN_SPAN_S
  // shown (a pod's first reports sit at the right edge, as they arrive), ticks at least
  // TICK_SPACE_PX apart so "HH:MM:SS" labels never run together, and the label's precision
  // from the step: seconds under a minute, the date from a day.
  const MIN_SPAN_S = 120;
  const TICK_SPACE_PX = 72;
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    14400, 21600, 43200, 86400, 172800];
  const drawnTicks = new WeakMap(); // plot -> the labels its time axis shows now (ticks())

  function timeRange(u, min, max) {
    if (min == null || max == null) return [min, max];
    return max - min >= MIN_SPAN_S ? [min, max] : [max - MIN_SPAN_S, max];
  }

  // uPlot ranges a single point itself (over 1,000 days, passing our range by), so a chart
  // whose points span less than MIN_SPAN_S is given its window after each setData.
  function fitTime(plot, t) {
    if (!t.length || t[t.length - 1] - t[0] >= MIN_SPAN_S) return;
    const [min, max] = timeRange(plot, t[0], t[t.length - 1]);
    plot.setScale("x", { min, max });
  }

  function timeTicks(u, ticks, axis, space, step) {
    const pattern = step % 86400 === 0 ? "{MM}-{DD}" : step % 60 ? "{HH}:{mm}:{ss}" : "{HH}:{mm}";
    const format = uPlot.fmtDate(pattern);
    const labels = ticks.map((t) => format(utc(t)));
    drawnTicks.set(u, { ticks, labels });
    return labels;
  }

  function options(kind, width) {
    const k = KINDS[kind];
    const show = (u, v) => (v == null ? "—" : `${v.toFixed(k.digits)} ${k.unit}`);
    return {
      width, height: 160, tzDate: utc,
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true, range: timeRange }, y: { range: (u, min, max) => [0, Math.max(max, 0.01) * 1.1] } },
      axes: [
        { label: "Time (UTC)", labelSize: 20, stroke: "#1b1f24", values: timeTicks,
          incrs: TIME_STEPS, space: TICK_SPACE_PX },
        { label: k.unit, labelSize: 20, size: 56, stroke: "#1b1f24",
          values: (u, ticks) => ticks.map((t) => `${+t.toFixed(k.digits)}`) },
      ],
      series: [
        { label: "Time", value: (u, ts) => (ts == null ? "—" : uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}:{ss} UTC")(utc(ts))) },
        { label: k.limitLabel, stroke: "#5a6570", dash: [6, 4], width: 1, value: show, points: { show: false } },
        { label: `${k.title} used`, stroke: "#0b5fff", width: 2, fill: "rgba(11,95,255,0.08)", value: show, points: { show: true, size: 5 } },
      ],
    };
  }

  function columns(series, kind) {
    const k = KINDS[kind];
    return [series.t.slice(), series[k.limit].map((v) => v * k.scale), series[k.used].map((v) => v * k.scale)];
  }

  function figureOf(pod) {
    return document.querySelector(`figure[data-pod="${CSS.escape(pod)}"]`);
  }

  function newFigure(pod) {
    const figure = document.createElement("figure");
    figure.className = "pod-chart";
    figure.dataset.pod = pod;
    const caption = document.createElement("figcaption");
    caption.textContent = pod;
    figure.appendChild(caption);
    live.appendChild(figure);
    return figure;
  }

  function draw(pod, series) {
    const figure = figureOf(pod) || newFigure(pod);
    const width = Math.max(260, Math.min(420, (live.clientWidth || 840) / 2 - 24));
    const plots = {};
    for (const kind of Object.keys(KINDS)) {
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.kind = kind;
      box.setAttribute("role", "group");
      box.setAttribute("aria-label", `${KINDS[kind].title} of ${pod || "all pods"}, used against ${KINDS[kind].limitLabel.toLowerCase()}`);
      figure.appendChild(box);
      plots[kind] = new uPlot(options(kind, width), columns(series, kind), box);
      fitTime(plots[kind], series.t);
    }
    const entry = { series, plots, figure };
    charts.set(pod, entry);
    figure.dataset.points = String(series.t.length);
    if (noHistory) noHistory.hidden = true;
    return entry;
  }

  function append(entry, ts, figures) {
    const s = entry.series;
    if (s.t.length && ts <= s.t[s.t.length - 1]) return;
    s.t.push(ts);
    for (const key of ["memory_used", "memory_limit", "compute_used", "compute_target"]) s[key].push(figures[key]);
    if (s.t.length > MAX_POINTS) for (const key of Object.keys(s)) s[key].shift();
    for (const kind of Object.keys(KINDS)) {
      entry.plots[kind].setData(columns(s, kind));
      fitTime(entry.plots[kind], s.t);
    }
    entry.figure.dataset.points = String(s.t.length);
  }

  const empty = () => ({ t: [], memory_used: [], memory_limit: [], compute_used: [], compute_target: [] });

  function refreshGone() {
    const count = gone.querySelectorAll("figure").length;
    gone.hidden = count === 0;
    document.getElementById("gone-count").textContent = String(count);
  }

  function projectPoint(ts) {
    const entry = charts.get("") || draw("", empty());
    const s = entry.series;
    if (s.t.length && ts - s.t[s.t.length - 1] < PROJECT_EVERY_S) return;
    const sum = { memory_used: 0, memory_limit: 0, compute_used: 0, compute_target: 0 };
    for (const f of latest.values()) for (const key of Object.keys(sum)) sum[key] += f[key];
    append(entry, ts, sum);
  }

  window.trancheCharts = {
    // What a pod's chart ("" = the project's) shows now: copies of its columns (t, memory_*
    // in MiB, compute_* in %); for reading, never for changing the chart.
    series(pod) {
      const entry = charts.get(pod);
      return entry ? JSON.parse(JSON.stringify(entry.series)) : null;
    },
    // The time axis of a pod's chart ("" = the project's) as drawn: each tick's label, its
    // position and its width in CSS pixels (the axis font); for reading, as series() is.
    ticks(pod, kind) {
      const entry = charts.get(pod);
      const plot = entry && entry.plots[kind];
      const drawn = plot && drawnTicks.get(plot);
      if (!drawn) return null;
      const ctx = document.createElement("canvas").getContext("2d");
      ctx.font = plot.axes[0].font[0]; // scaled by the device pixel ratio, as uPlot draws it
      const ratio = window.devicePixelRatio || 1;
      return drawn.ticks.map((t, i) => ({
        label: drawn.labels[i], x: plot.valToPos(t, "x"), width: ctx.measureText(drawn.labels[i]).width / ratio,
      }));
    },
    // Every row as the socket has them now: charts of pods not among them fold away.
    snapshot(rows) {
      const reported = new Set(rows.map((r) => r.cells.pod));
      for (const pod of charts.keys()) if (pod && !reported.has(pod)) this.removed(`/${pod}`);
      rows.forEach((r) => this.row(r));
    },
    // A pod's row arrived (snapshot or live): its chart gains the point, drawn if it was not.
    row(message) {
      const f = message.figures;
      const pod = message.cells && message.cells.pod;
      if (!f || !pod) return;
      const entry = charts.get(pod) || draw(pod, empty());
      if (entry.figure.parentElement !== live) { live.appendChild(entry.figure); refreshGone(); }
      append(entry, f.ts, f);
      latest.set(pod, f);
      projectPoint(f.ts);
    },
    // A pod's row went (its node no longer reports it): fold its chart away.
    removed(key) {
      const pod = key.slice(key.indexOf("/") + 1);
      latest.delete(pod);
      const figure = figureOf(pod);
      if (figure && figure.parentElement === live) { gone.appendChild(figure); refreshGone(); }
    },
  };

  if (initial.project.t.length) draw("", initial.project);
  for (const [pod, series] of Object.entries(initial.pods)) draw(pod, series);
  refreshGone();
})();
