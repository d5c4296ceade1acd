// Tranche portal: copy buttons, one-shot forms, auto-submitting project switcher. No framework.
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  const status = document.getElementById("copy-status");
  const text = source.value !== undefined ? source.value : source.textContent;
  try {
    await navigator.clipboard.writeText(text);
    if (status) status.textContent = "Copied to the clipboard.";
  } catch (error) {
    if (status) status.textContent = "Copy failed: select the text and copy it by hand.";
  }
});
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!form.hasAttribute("data-once")) return;
  if (form.dataset.sent) { event.preventDefault(); return; }
  form.dataset.sent = "1";
  form.querySelectorAll("button[type=submit]").forEach((b) => { b.disabled = true; });
});
document.addEventListener("change", (event) => {
  if (event.target.matches("select[data-autosubmit]")) event.target.form.requestSubmit();
});
// Invitation links carry their token after "#", which browsers never send to a server; post it.
document.addEventListener("DOMContentLoaded", () => {
  const field = document.getElementById("invitation-token");
  const token = window.location.hash.slice(1);
  if (!field || !token) return;
  history.replaceState(null, "", window.location.pathname);
  field.value = decodeURIComponent(token);
  field.form.requestSubmit();
});
