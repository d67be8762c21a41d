/* queueadmin: live updates announced to screen readers.
 * Live fragments are replaced wholesale by WebSocket pushes, and a live
 * region that is itself replaced is not reliably announced; so one stable
 * region (#live-announcer, role=status, aria-live=polite) speaks for them.
 * Templates mark short summaries:
 *   data-announce      a summary ("120 of 500 items finished"): spoken when
 *                      it changed, at most once every GAP ms (busy queues
 *                      change many times a second);
 *   data-announce-now  a state ("completed"): spoken as soon as it changes.
 * Nothing is spoken for the page as first loaded.
 */
(function () {
  "use strict";
  var GAP = 10000;
  var said = { summary: null, now: null };
  var lastSpoken = 0;
  var timer = null;

  function text(el) {
    return (el.innerText || "").replace(/\s*\n+\s*/g, ", ").replace(/\s+/g, " ").trim();
  }
  function collect(selector) {
    var parts = [];
    document.querySelectorAll(selector).forEach(function (el) {
      var t = text(el);
      if (t) parts.push(t);
    });
    return parts.join(". ");
  }
  function speak(message) {
    var region = document.getElementById("live-announcer");
    if (!region || !message) return;
    lastSpoken = Date.now();
    region.textContent = "";
    setTimeout(function () { region.textContent = message; }, 50); // a fresh text is announced again
  }

  function check() {
    timer = null;
    var now = collect("[data-announce-now]");
    var summary = collect("[data-announce]");
    if (now !== said.now) {
      var spoken = now && said.now !== null;
      said.now = now;
      said.summary = summary;
      if (spoken) speak([now, summary].filter(Boolean).join(". "));
      return;
    }
    if (summary === said.summary) return;
    var wait = lastSpoken + GAP - Date.now();
    if (wait > 0) { timer = setTimeout(check, wait); return; }
    said.summary = summary;
    speak(summary);
  }

  function baseline() {
    said.now = collect("[data-announce-now]");
    said.summary = collect("[data-announce]");
  }

  function start() {
    baseline();
    // a new page swapped into #main (navigation, an action's result) is read as a page, not as news
    document.addEventListener("htmx:afterSwap", function (e) {
      if (e.detail && e.detail.target && e.detail.target.id === "main") {
        clearTimeout(timer);
        timer = null;
        baseline();
      }
    });
    var main = document.getElementById("main");
    if (!main) return;
    new MutationObserver(function () {
      if (!timer) timer = setTimeout(check, 300);
    }).observe(main, { childList: true, subtree: true, characterData: true });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
