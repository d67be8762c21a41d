/* queueadmin: the little JavaScript the dashboard needs on top of htmx.
 *  - live status pill and the "Pause live" toggle (remembered per browser);
 *  - while paused, or while rows are ticked in a live table, pushed
 *    fragments are not swapped in (rows do not move under the cursor); on
 *    resume the page asks its socket for the current state;
 *  - "select all" checkboxes and the bulk bar's selected count;
 *  - dismissing messages and the confirm dialog (no inline handlers: the
 *    Content-Security-Policy allows scripts from this origin only).
 */
(function () {
  "use strict";
  var KEY = "qa-live-paused";
  var sockets = new Set();
  var stale = false;

  function paused() { return localStorage.getItem(KEY) === "1"; }
  function pill() { return document.getElementById("live-pill"); }

  function setPill(state, label) {
    var p = pill();
    if (!p) return;
    p.dataset.state = state;
    p.querySelector(".label").textContent = label;
  }

  // Rows ticked for a bulk action, or a field being edited inside a live
  // region, hold the live swaps (they would reset what the operator is doing).
  function editing() {
    var el = document.activeElement;
    return !!(el && el.closest && el.closest(".live-socket") && el.matches("input:not([type=checkbox]), select, textarea"));
  }
  function held() {
    return editing() || document.querySelector("input[type=checkbox][data-row]:checked") !== null;
  }

  function refreshPill() {
    if (!document.querySelector(".live-socket")) { setPill("idle", "Nothing live"); return; }
    if (paused()) { setPill("paused", "Paused"); return; }
    if (held()) { setPill("held", editing() ? "Held (editing)" : "Held (rows selected)"); return; }
    var open = false;
    sockets.forEach(function (s) { if (s.open) open = true; });
    setPill(open ? "open" : "closed", open ? "Live" : (refused || "Connecting…"));
  }

  function requestRefresh() {
    sockets.forEach(function (s) {
      if (s.open) { try { s.wrapper.send(JSON.stringify({ refresh: true })); } catch (e) { /* reconnects */ } }
    });
    stale = false;
  }

  function applyToggle() {
    var btn = document.getElementById("live-toggle");
    var p = paused();
    document.body.classList.toggle("live-paused", p);
    if (btn) {
      btn.setAttribute("aria-pressed", p ? "true" : "false");
      btn.textContent = p ? "Resume live" : "Pause live";
    }
    refreshPill();
  }

  document.addEventListener("click", function (e) {
    var btn = e.target.closest("#live-toggle");
    if (!btn) return;
    var next = !paused();
    localStorage.setItem(KEY, next ? "1" : "0");
    applyToggle();
    if (!next) requestRefresh();
  });

  document.addEventListener("htmx:wsOpen", function (e) {
    refused = "";
    var entry = { elt: e.target, wrapper: e.detail.socketWrapper, open: true };
    sockets.forEach(function (s) { if (s.elt === e.target) sockets.delete(s); });
    sockets.add(entry);
    refreshPill();
  });
  // Close codes the server gives (core/sockets.py): the session ended -> the
  // page reloads (and lands on the login page); refused -> say why.
  var refused = "";
  document.addEventListener("htmx:wsClose", function (e) {
    var code = e.detail && e.detail.event ? e.detail.event.code : 0;
    if (code === 4401) { window.location.reload(); return; }
    if (code === 4429) refused = "Live off: too many live tabs";
    if (code === 4400) refused = "Live off";
    sockets.forEach(function (s) {
      if (s.elt === e.target) { s.open = false; if (!document.body.contains(s.elt)) sockets.delete(s); }
    });
    refreshPill();
  });
  document.addEventListener("htmx:wsError", function () { refreshPill(); });

  document.addEventListener("htmx:wsBeforeMessage", function (e) {
    if (paused() || held()) {
      e.preventDefault();
      stale = true;
    }
  });
  document.addEventListener("htmx:wsAfterMessage", function () { updateCounts(); });

  // select all / selected count -------------------------------------------------
  function updateCounts() {
    document.querySelectorAll("[data-selected-count]").forEach(function (el) {
      var scope = el.closest("form") || document;
      var n = scope.querySelectorAll("input[type=checkbox][data-row]:checked").length;
      el.textContent = n ? n + " selected" : el.dataset.emptyText || "";
      scope.querySelectorAll("[data-needs-selection]").forEach(function (b) { b.disabled = n === 0; });
    });
    refreshPill();
  }

  document.addEventListener("change", function (e) {
    var t = e.target;
    if (t.matches("[data-select-all]")) {
      var scope = t.closest("form") || document;
      scope.querySelectorAll("input[type=checkbox][data-row]").forEach(function (c) { c.checked = t.checked; });
    }
    if (t.matches("input[type=checkbox]")) {
      var wasHeld = stale;
      updateCounts();
      if (!held() && wasHeld && !paused()) requestRefresh();
    }
  });

  document.addEventListener("htmx:afterSettle", updateCounts);
  document.addEventListener("focusin", refreshPill);
  document.addEventListener("focusout", function () {
    setTimeout(function () {
      refreshPill();
      if (stale && !held() && !paused()) requestRefresh();
    }, 0);
  });
  document.addEventListener("DOMContentLoaded", function () { applyToggle(); updateCounts(); });

  // messages and the confirm dialog -----------------------------------------------
  function closeDialog() {
    var slot = document.getElementById("dialog-slot");
    if (slot) slot.innerHTML = "";
  }
  document.addEventListener("click", function (e) {
    var t = e.target;
    if (t.matches("[data-dismiss-backdrop]")) { t.remove(); return; } // a click beside the dialog
    var close = t.closest("[data-dismiss-message]");
    if (close) { close.parentNode.remove(); return; }
    if (t.closest("[data-close-dialog]")) closeDialog();
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    if (e.detail.elt && e.detail.elt.matches && e.detail.elt.matches("[data-close-dialog-after-request]")) closeDialog();
  });

  // Redis in trouble: the server answers 503 with a fragment saying so
  // (core/middleware.py, retargeted to #main); htmx swaps no error by default.
  document.addEventListener("htmx:beforeSwap", function (e) {
    if (e.detail.xhr && e.detail.xhr.status === 503) { e.detail.shouldSwap = true; e.detail.isError = false; }
  });
})();
