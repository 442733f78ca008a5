// Node.js clients as a sandbox runs them: `node node_client.cjs AGENT URL [OUT]`.
// Node 20 has no proxy support in core; AGENT is `https-proxy-agent` (with the `https`
// module), `undici` (its EnvHttpProxyAgent, which reads HTTPS_PROXY / NO_PROXY), or `none`
// (the `https` module alone, connecting directly: transparent mode). The CA
// comes from NODE_EXTRA_CA_CERTS. The libraries are loaded from $CLIENT_NODE_MODULES.
// Prints one JSON line: {"status", "bytes"} or {"error"} (exit 1).
"use strict";
const fs = require("fs");
const path = require("path");
const modules = process.env.CLIENT_NODE_MODULES;
const [agentName, url, out] = process.argv.slice(2);
const own = { authorization: "Bearer sandbox-own-token" };

function done(result, code) {
  process.stdout.write(JSON.stringify(result) + "\n");
  process.exit(code);
}

if (agentName === "https-proxy-agent" || agentName === "none") {
  const https = require("https");
  let agent;
  if (agentName === "https-proxy-agent") {
    const { HttpsProxyAgent } = require(path.join(modules, "https-proxy-agent"));
    agent = new HttpsProxyAgent(process.env.HTTPS_PROXY);
  }
  https
    .get(url, { agent, headers: own }, (res) => {
      const sink = out ? fs.createWriteStream(out) : null;
      let bytes = 0;
      res.on("data", (chunk) => {
        bytes += chunk.length;
        if (sink) sink.write(chunk);
      });
      const finish = () => {
        if (sink) sink.end(() => done({ status: res.statusCode, bytes }, 0));
        else done({ status: res.statusCode, bytes }, 0);
      };
      res.on("end", finish);
      // A refused CONNECT: the agent replays the proxy's answer on a socket that then
      // closes, so the response may end without "end".
      res.on("close", finish);
    })
    .on("error", (err) => done({ error: `${err.name}: ${err.message}` }, 1));
} else if (agentName === "undici") {
  const { fetch, EnvHttpProxyAgent } = require(path.join(modules, "undici"));
  fetch(url, { dispatcher: new EnvHttpProxyAgent(), headers: own })
    .then(async (res) => {
      const body = Buffer.from(await res.arrayBuffer());
      if (out) fs.writeFileSync(out, body);
      done({ status: res.status, bytes: body.length }, 0);
    })
    .catch((err) => {
      // fetch wraps the reason: TypeError <- DOMException <- the dispatcher's error.
      const chain = [];
      for (let e = err; e; e = e.cause) chain.push(`${e.name}: ${e.message}`);
      done({ error: chain.join(" <- ") }, 1);
    });
} else {
  done({ error: `unknown agent ${agentName}` }, 2);
}
