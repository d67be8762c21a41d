/* queueadmin: times in the viewer's time zone.
 * The server renders every moment as <time datetime="…Z" title="… UTC">, in
 * UTC (what shows without JavaScript). Here absolute times are rewritten to
 * the browser's zone ("2025-01-31 15:05:09 GMT+1") with UTC kept in the
 * title; relative ones ("12 s ago", data-relative) keep their text and get
 * the local moment and UTC in the title. Fragments swapped in later (htmx,
 * live WebSocket pushes) are handled as they arrive.
 */
(function () {
  "use strict";
  var pad = function (n) { return (n < 10 ? "0" : "") + n; };
  var zone = (function () {
    try {
      var part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
        .formatToParts(new Date()).filter(function (p) { return p.type === "timeZoneName"; })[0];
      return part ? part.value : "";
    } catch (e) { return ""; }
  })();

  function local(d) {
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + (zone ? " " + zone : "");
  }

  function render(root) {
    var nodes = root.querySelectorAll ? root.querySelectorAll("time[datetime]:not([data-local])") : [];
    for (var i = 0; i < nodes.length; i++) {
      var el = nodes[i];
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) continue;
      var utc = el.getAttribute("title") || "";
      var text = local(d);
      if (el.hasAttribute("data-relative")) {
        el.title = text + "\n" + utc;
      } else {
        el.textContent = text;
        el.title = utc;
      }
      el.setAttribute("data-local", "");
    }
  }

  function start() {
    render(document);
    // any later swap (htmx request, WebSocket push): convert what it brought
    new MutationObserver(function (records) {
      for (var i = 0; i < records.length; i++) {
        for (var j = 0; j < records[i].addedNodes.length; j++) {
          var n = records[i].addedNodes[j];
          if (n.nodeType !== 1) continue;
          if (n.matches("time[datetime]")) render(n.parentNode || document); else render(n);
        }
      }
    }).observe(document.body, { childList: true, subtree: true });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
