// A web app an agent might serve in its computer, for the port preview
// tests: a page whose script talks to the app over a websocket, a tiny
// answer, a large one, and 404 for anything else. No packages: the
// websocket is Node's own sockets (text frames only).
const http = require("http");
const crypto = require("crypto");
const port = Number(process.argv[2]);
const host = process.argv[3] || "127.0.0.1";
const page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Preview app</title></head>
<body><main><h1>Preview app</h1><p id="out">waiting</p></main><script src="app.js"></script></body></html>`;
const script = `const ws = new WebSocket(new URL("ws", location.href).href.replace(/^http/, "ws"));
ws.onopen = () => ws.send("ping from the page");
ws.onmessage = (e) => { document.getElementById("out").textContent = e.data; };
ws.onerror = () => { document.getElementById("out").textContent = "websocket failed"; };`;
const chunk = Buffer.alloc(1 << 20, 97);

const server = http.createServer((req, res) => {
  const u = new URL(req.url, "http://app");
  if (u.pathname === "/") {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(page);
  } else if (u.pathname === "/app.js") {
    res.writeHead(200, { "content-type": "text/javascript" });
    res.end(script);
  } else if (u.pathname === "/tiny") {
    res.end("ok");
  } else if (u.pathname === "/big") {
    let left = Number(u.searchParams.get("n"));
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": left });
    const pump = () => {
      while (left > 0) {
        const k = Math.min(left, chunk.length);
        left -= k;
        if (!res.write(k === chunk.length ? chunk : chunk.subarray(0, k))) {
          res.once("drain", pump);
          return;
        }
      }
      res.end();
    };
    pump();
  } else {
    res.writeHead(404, { "content-type": "text/plain" });
    res.end("not found: " + u.pathname);
  }
});

server.on("upgrade", (req, sock) => {
  const accept = crypto.createHash("sha1")
    .update(req.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
  sock.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
    "Sec-WebSocket-Accept: " + accept + "\r\n\r\n");
  let buf = Buffer.alloc(0);
  sock.on("data", (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      if (buf.length < 2) return;
      const op = buf[0] & 15;
      let len = buf[1] & 127, off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        sock.destroy();
        return;
      }
      const masked = (buf[1] & 128) !== 0;
      if (buf.length < off + (masked ? 4 : 0) + len) return;
      const mask = masked ? buf.subarray(off, off + 4) : null;
      if (masked) off += 4;
      const data = Buffer.from(buf.subarray(off, off + len));
      if (mask) for (let i = 0; i < len; i++) data[i] ^= mask[i & 3];
      buf = buf.subarray(off + len);
      if (op === 8) {
        sock.end(Buffer.from([0x88, 0]));
        return;
      }
      if (op === 1) {
        const out = Buffer.from("echo: " + data.toString("utf8"));
        const head = out.length < 126 ? Buffer.from([0x81, out.length]) : Buffer.from([0x81, 126, out.length >> 8, out.length & 255]);
        sock.write(Buffer.concat([head, out]));
      }
    }
  });
  sock.on("error", () => {});
});
server.listen(port, host);
