// The terminal page: xterm.js on the supervisor's terminal websocket.
(function () {
  "use strict";
  var state = document.getElementById("state");
  var term = new Terminal({ cursorBlink: true, scrollback: 5000 });
  var fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("term"));
  fit.fit();
  // The link's token is the last part of this page's path; the websocket
  // beside it redeems it once.
  var url = new URL("ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.search = "cols=" + term.cols + "&rows=" + term.rows;
  var ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  var enc = new TextEncoder();
  ws.onopen = function () { state.textContent = "connected"; term.focus(); };
  ws.onmessage = function (ev) {
    if (typeof ev.data !== "string") { term.write(new Uint8Array(ev.data)); return; }
    var m = JSON.parse(ev.data);
    if (m.type === "exit") {
      state.textContent = m.code ? "ended: " + m.message : "exited with " + m.exitCode;
    }
  };
  ws.onclose = function (ev) {
    if (state.textContent === "connected" || state.textContent === "connecting…") {
      state.textContent = "closed" + (ev.reason ? ": " + ev.reason : "");
    }
  };
  term.onData(function (d) { if (ws.readyState === 1) ws.send(enc.encode(d)); });
  term.onResize(function (s) {
    if (ws.readyState === 1) ws.send(JSON.stringify({ type: "resize", cols: s.cols, rows: s.rows }));
  });
  window.addEventListener("resize", function () { fit.fit(); });
})();
