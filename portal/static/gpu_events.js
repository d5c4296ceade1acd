// The live page's GPU incidents: each "gpu-event" message status.js receives (it re-dispatches
// every message as a "live-message" event on the slices table) becomes the list's first line.
(function () {
  "use strict";
  const table = document.getElementById("pods");
  const section = document.getElementById("gpu-incidents");
  const list = document.getElementById("gpu-events");
  if (!table || !section || !list) return;
  table.addEventListener("live-message", (event) => {
    const message = event.detail;
    if (!message || message.type !== "gpu-event") return;
    const li = document.createElement("li");
    li.dataset.kind = message.kind;
    const time = document.createElement("time");
    time.textContent = message.at;
    const pod = document.createElement("code");
    pod.textContent = message.pod;
    li.append(time, " ", pod, ": " + message.text);
    list.prepend(li);
    section.hidden = false;
  });
})();
