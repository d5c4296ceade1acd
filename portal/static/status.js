// Live status tables (agent slices; the cluster's view): apply snapshot/row/remove and
// cluster-row/cluster-remove messages from /ws/projects/<id>/status/ and
// reconnects with capped exponential backoff and jitter; rows' figures go to the charts
// (status_charts.js). No framework.
"use strict";
(() => {
  const table = document.getElementById("pods");
  const banner = document.getElementById("live-status");
  if (!table || !banner) return;
  let delay = 1000;
  const say = (state, text) => { banner.dataset.state = state; banner.textContent = text; };

  // One live table: rows keyed by data-key, kept sorted, with an "empty" placeholder row.
  function liveTable(element, emptyRow) {
    const body = element.tBodies[0];
    const columns = Array.from(element.tHead.rows[0].cells, (th) => th.dataset.field);
    const rows = () => Array.from(body.querySelectorAll("tr[data-key]"));
    return {
      upsert(message) {
        let tr = rows().find((r) => r.dataset.key === message.key);
        if (!tr) {
          tr = document.createElement("tr");
          tr.dataset.key = message.key;
          for (const name of columns) {
            const td = document.createElement("td");
            td.dataset.field = name;
            tr.appendChild(td);
          }
          const next = rows().find((r) => r.dataset.key > message.key);
          body.insertBefore(tr, next || emptyRow);
        }
        if (message.reason !== undefined) tr.dataset.reason = message.reason;
        for (const td of tr.cells) fill(td, message);
      },
      remove(key) {
        const tr = rows().find((r) => r.dataset.key === key);
        if (tr) tr.remove();
      },
      replace(list) {
        const keep = new Set(list.map((r) => r.key));
        rows().filter((r) => !keep.has(r.dataset.key)).forEach((r) => r.remove());
        list.forEach((r) => this.upsert(r));
      },
      refreshEmpty() { emptyRow.hidden = rows().length > 0; },
    };
  }
  // A cell's text, plus the memory bar / compute gauge (a <meter>) or the raw warnings toggle.
  const GAUGES = {
    memory: ["memory_used", "memory_limit", "GPU memory used of the slice's limit"],
    compute: ["compute_used", "compute_target", "Compute used of the target share"],
  };
  function fill(td, message) {
    const text = message.cells[td.dataset.field] ?? "";
    const gauge = GAUGES[td.dataset.field];
    const parts = [];
    if (gauge && message.figures) {
      const meter = document.createElement("meter");
      const [used, whole, label] = gauge;
      meter.min = 0;
      meter.max = Math.max(message.figures[whole], 0.001);
      meter.high = meter.max * 0.9;
      meter.value = Math.min(message.figures[used], meter.max);
      meter.setAttribute("aria-label", label);
      parts.push(meter);
    }
    const span = document.createElement("span");
    span.className = "cell-text";
    span.textContent = text;
    parts.push(span);
    if (td.dataset.field === "events" && message.raw) {
      const details = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = "Details";
      const pre = document.createElement("pre");
      pre.className = "raw";
      pre.textContent = message.raw;
      details.append(summary, pre);
      parts.push(details);
    }
    td.replaceChildren(...parts);
  }
  const charts = () => window.trancheCharts;
  const slices = liveTable(table, document.getElementById("pods-empty"));
  const clusterTable = document.getElementById("cluster-pods");
  const cluster = clusterTable
    ? liveTable(clusterTable, document.getElementById("cluster-pods-empty")) : null;

  function apply(message) {
    table.dispatchEvent(new CustomEvent("live-message", { detail: message }));  // stale.js
    if (message.type === "snapshot") {
      slices.replace(message.rows);
      if (cluster) cluster.replace(message.cluster || []);
      if (charts()) charts().snapshot(message.rows);
    } else if (message.type === "row") {
      slices.upsert(message);
      if (charts()) charts().row(message);
    } else if (message.type === "remove") {
      slices.remove(message.key);
      if (charts()) charts().removed(message.key);
    } else if (cluster && message.type === "cluster-row") {
      cluster.upsert(message);
    } else if (cluster && message.type === "cluster-remove") {
      cluster.remove(message.key);
    }
    slices.refreshEmpty();
    if (cluster) cluster.refreshEmpty();
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + table.dataset.livePath);
    socket.onopen = () => { delay = 1000; say("live", "Live: updates appear as the agents report them."); };
    socket.onmessage = (event) => apply(JSON.parse(event.data));
    socket.onclose = (event) => {
      if (event.code === 4403) {
        say("forbidden", "Live updates stopped: you no longer have access to this project. Reload the page or ask an owner of the organization.");
        return;
      }
      if (event.code === 4401) {
        say("forbidden", "Live updates stopped: you logged out. Log in again to follow this project.");
        return;
      }
      const wait = Math.round(delay * (0.5 + Math.random() / 2));
      say("down", `Live connection lost; the figures below may be out of date. Reconnecting in ${Math.ceil(wait / 1000)} s…`);
      setTimeout(connect, wait);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();
