// Support console: redraw the fleet section whenever /ws/support/fleet/ says a node's slices or
// GPUs changed (the server renders it; this only swaps the HTML). Reconnects with backoff.
"use strict";
(() => {
  const fleet = document.getElementById("fleet");
  if (!fleet) return;
  let delay = 1000;
  let pending = null;
  async function redraw() {
    const response = await fetch(location.href, { headers: { "X-Requested-With": "fleet" } });
    if (!response.ok) return;
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const id of ["fleet", "alerts", "unhealthy-gpus", "in-maintenance"]) {
      const fresh = page.getElementById(id);
      if (fresh) document.getElementById(id).replaceWith(fresh);
    }
  }
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + fleet.dataset.livePath);
    socket.onopen = () => { delay = 1000; fleet.dataset.live = "true"; };
    socket.onmessage = () => {
      clearTimeout(pending);
      pending = setTimeout(redraw, 200);  // one redraw for a burst of node reports
    };
    socket.onclose = (event) => {
      fleet.dataset.live = "false";
      if (event.code === 4403 || event.code === 4401) return;  // no access / logged out
      setTimeout(connect, Math.round(delay * (0.5 + Math.random() / 2)));
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();
