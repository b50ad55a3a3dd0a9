// Berth console: shows only the chosen provider's credential fields, copies
// pairing codes, and keeps the computers table fresh by polling with ETags.
// The pages work without it.
(function () {
  "use strict";

  // The connect form: only the chosen provider's credentials.
  var provider = document.querySelector("select[data-creds]");
  if (provider) {
    var sets = document.querySelectorAll("fieldset.creds");
    var show = function () {
      sets.forEach(function (fs) {
        var on = fs.getAttribute("data-provider") === provider.value;
        fs.hidden = !on;
        fs.disabled = !on;
      });
    };
    provider.addEventListener("change", show);
    show();
  }

  // Copy buttons.
  document.querySelectorAll("button[data-copy]").forEach(function (b) {
    b.addEventListener("click", function () {
      var el = document.getElementById(b.getAttribute("data-copy"));
      if (el && navigator.clipboard) {
        navigator.clipboard.writeText(el.textContent).then(function () { b.textContent = "Copied"; });
      }
    });
  });

  // Live tables: poll every few seconds, send the last ETag, swap the rows
  // only when they changed and focus is not inside them.
  var status = document.getElementById("live-status");
  var every = 4000;
  document.querySelectorAll("tbody[data-live]").forEach(function (body) {
    if (!window.fetch) { return; }
    var url = body.getAttribute("data-live");
    var tag = "";
    var tick = function () {
      if (document.hidden) { return setTimeout(tick, every); }
      var headers = {};
      if (tag) { headers["If-None-Match"] = tag; }
      fetch(url, { headers: headers, credentials: "same-origin", cache: "no-store" }).then(function (r) {
        if (r.status === 304) { return null; }
        if (!r.ok) { throw new Error("status " + r.status); }
        return r.text().then(function (html) { return { html: html, tag: r.headers.get("ETag") || "" }; });
      }).then(function (got) {
        // While focus is in the table the rows stay; the next poll retries.
        if (got !== null && !body.contains(document.activeElement)) {
          body.innerHTML = got.html;
          tag = got.tag;
          body.setAttribute("data-updated", String(Date.now()));
          if (status) { status.textContent = "Table updated at " + new Date().toLocaleTimeString() + "."; }
        }
      }).catch(function () {
        if (status) { status.textContent = "Could not refresh the table; retrying."; }
      }).then(function () { setTimeout(tick, every); });
    };
    setTimeout(tick, every);
  });
})();
