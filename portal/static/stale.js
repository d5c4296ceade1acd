// The live page's stale mark: a node whose agent missed two reports (data-late-after seconds
// without a "seen" message) gets its rows marked "stale: last report 22 s ago", refreshed every
// second; the next report clears it. Times are the portal's (data-now corrects the browser's
// clock). Messages come from status.js as "live-message" events on the table.
"use strict";
(() => {
  const table = document.getElementById("pods");
  if (!table) return;
  const lateAfter = Number(table.dataset.lateAfter || 3);
  // data-now is the portal's clock when it rendered the page, which is when the page's first
  // byte reached the browser; now (after the page loaded and this deferred script ran) would
  // count the load time as skew and read every age that much too young.
  const nav = performance.getEntriesByType?.("navigation")?.[0];
  const arrived = nav?.responseStart
    ? (performance.timeOrigin + nav.responseStart) / 1000 : Date.now() / 1000;
  const skew = table.dataset.now ? arrived - Number(table.dataset.now) : 0;
  const seen = JSON.parse(table.dataset.seen || "{}");
  const portalNow = () => Date.now() / 1000 - skew;

  function mark() {
    const now = portalNow();
    for (const tr of table.tBodies[0].querySelectorAll("tr[data-key]")) {
      const node = tr.querySelector('td[data-field="node"]')?.textContent;
      const at = seen[node];
      const age = at === undefined ? null : now - at;
      let badge = tr.querySelector(".stale-mark");
      if (age !== null && age > lateAfter) {
        tr.dataset.stale = "true";
        if (!badge) {
          badge = document.createElement("span");
          badge.className = "stale-mark";
          tr.cells[0].append(" ", badge);
        }
        badge.textContent = `stale: last report ${Math.round(age)} s ago`;
      } else {
        delete tr.dataset.stale;
        if (badge) badge.remove();
      }
    }
  }

  table.addEventListener("live-message", (event) => {
    const message = event.detail;
    if (message.type === "seen") seen[message.node] = message.at;
    else if (message.type === "row" && message.cells) seen[message.cells.node] = portalNow();
    setTimeout(mark, 0);  // after status.js has applied the message
  });
  setInterval(mark, 1000);
  mark();
})();
