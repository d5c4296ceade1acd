// Live status table: applies snapshot/row/remove messages from /ws/projects/<id>/status/ and
// reconnects with capped exponential backoff and jitter. No framework.
"use strict";
(() => {
  const table = document.getElementById("pods");
  const banner = document.getElementById("live-status");
  if (!table || !banner) return;
  const body = table.tBodies[0];
  const empty = document.getElementById("pods-empty");
  const columns = Array.from(table.tHead.rows[0].cells, (th) => th.dataset.field);
  let delay = 1000;

  const say = (state, text) => { banner.dataset.state = state; banner.textContent = text; };
  const rows = () => Array.from(body.querySelectorAll("tr[data-key]"));
  const refreshEmpty = () => { empty.hidden = rows().length > 0; };

  function upsert(message) {
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
      body.insertBefore(tr, next || empty);
    }
    for (const td of tr.cells) td.textContent = message.cells[td.dataset.field] ?? "";
  }

  function remove(key) {
    const tr = rows().find((r) => r.dataset.key === key);
    if (tr) tr.remove();
  }

  function apply(message) {
    if (message.type === "snapshot") {
      const keep = new Set(message.rows.map((r) => r.key));
      rows().filter((r) => !keep.has(r.dataset.key)).forEach((r) => r.remove());
      message.rows.forEach(upsert);
    } else if (message.type === "row") {
      upsert(message);
    } else if (message.type === "remove") {
      remove(message.key);
    }
    refreshEmpty();
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
      const wait = Math.round(delay * (0.5 + Math.random() / 2));
      say("down", `Live connection lost; the figures below may be out of date. Reconnecting in ${Math.ceil(wait / 1000)} s…`);
      setTimeout(connect, wait);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();
