// An Express MCP server built with the official TypeScript SDK, the way the SDK's own
// examples serve it (`app.post("/mcp", ...)`, a stateless StreamableHTTPServerTransport),
// over TLS, for tests/e2e/test_mcp_servers_e2e.py. Express routes "/MCP" and "/mcp/" to
// that handler too. Every tool call is appended to the log (one JSON line) before it
// answers. Run by testbed/mcp_servers.py with NODE_PATH at its npm cache.
//   node mcp_express.js HOST PORT CERT KEY LOG READY
"use strict";
const fs = require("fs");
const https = require("https");
const express = require("express");
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");

const [host, port, cert, key, log, ready] = process.argv.slice(2);

function build() {
  const server = new McpServer({ name: "egress-e2e-express", version: "1.0.0" });
  for (const tool of ["search_repositories", "delete_repo"]) {
    server.registerTool(tool, { description: tool }, async () => {
      fs.appendFileSync(log, JSON.stringify({ tool, server: "express" }) + "\n");
      return { content: [{ type: "text", text: `${tool} done` }] };
    });
  }
  return server;
}

const app = express();
app.use(express.json());
app.post("/mcp", async (req, res) => {
  const server = build();
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  res.on("close", () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, req.body);
});

https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, app).listen(
  Number(port),
  host,
  () => fs.writeFileSync(ready, "ready\n"),
);
