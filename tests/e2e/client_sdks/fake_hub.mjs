// A loopback stand-in for the Hugging Face hub, answering what llamapp's hub client
// (src/hub/hub_api.cpp) and llama.cpp's downloader (common/hf-cache.cpp, download.cpp) ask:
//   GET  api/models/OWNER/NAME/refs                       the branches, main's commit
//   GET  api/models/OWNER/NAME/tree/COMMIT?recursive=true the files, LFS ones with sha256 and size
//   GET  api/models?search=Q[&full=true]                  search hits (`llamapp search`)
//   HEAD, GET OWNER/NAME/resolve/COMMIT/PATH               302 to cdn/, as the hub sends LFS files
//   HEAD, GET cdn/OWNER/NAME/PATH                          the bytes, with ETag and Range
// Point the server at it with MODEL_ENDPOINT=<endpoint>.
import http from "node:http";
import { createHash } from "node:crypto";

export const commit = "0123456789abcdef0123456789abcdef01234567";

const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");
// What git names a blob: a file outside LFS is listed by it.
const gitBlobId = (bytes) =>
  createHash("sha1").update(`blob ${bytes.length}\0`).update(bytes).digest("hex");

// repos: {"owner/name": {"path/in/repo": Buffer}}. GGUF files are listed as LFS files, the rest
// as plain git blobs. Resolves {endpoint, requests, close()}; `requests` holds "METHOD url" for
// every request, in order.
export function startFakeHub(repos) {
  const requests = [];
  const json = (res, status, body) => {
    res.writeHead(status, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
  };
  const notFound = (res) => json(res, 404, { error: "Repository not found" });

  const tree = (files) =>
    Object.entries(files).map(([path, bytes]) =>
      {
        if (!path.endsWith(".gguf")) return { type: "file", path, size: bytes.length, oid: gitBlobId(bytes) };
        // git holds an LFS file's pointer; the listing names the pointer's blob and the file's sha256.
        const pointer = Buffer.from(
          `version https://git-lfs.github.com/spec/v1\noid sha256:${sha256(bytes)}\nsize ${bytes.length}\n`);
        return {
          type: "file",
          path,
          size: bytes.length,
          oid: gitBlobId(pointer),
          lfs: { oid: sha256(bytes), size: bytes.length, pointerSize: pointer.length },
        };
      },
    );

  const sendFile = (req, res, bytes) => {
    const headers = {
      "Content-Type": "application/octet-stream",
      "Accept-Ranges": "bytes",
      ETag: `"${sha256(bytes)}"`,
    };
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    if (range && Number(range[1]) < bytes.length) {
      const from = Number(range[1]);
      res.writeHead(206, {
        ...headers,
        "Content-Length": bytes.length - from,
        "Content-Range": `bytes ${from}-${bytes.length - 1}/${bytes.length}`,
      });
      return res.end(req.method === "HEAD" ? undefined : bytes.subarray(from));
    }
    res.writeHead(200, { ...headers, "Content-Length": bytes.length });
    res.end(req.method === "HEAD" ? undefined : bytes);
  };

  const server = http.createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    const url = new URL(req.url, "http://hub");
    const path = decodeURIComponent(url.pathname);
    let m;
    if (req.method === "GET" && (m = /^\/api\/models\/([^/]+\/[^/]+)\/refs$/.exec(path))) {
      if (!repos[m[1]]) return notFound(res);
      return json(res, 200, {
        branches: [{ name: "main", ref: "refs/heads/main", targetCommit: commit }],
        converts: [],
        tags: [],
      });
    }
    if (req.method === "GET" && (m = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/([^/]+)$/.exec(path))) {
      if (!repos[m[1]]) return notFound(res);
      if (m[2] !== commit && m[2] !== "main") return json(res, 404, { error: "Invalid rev id" });
      return json(res, 200, tree(repos[m[1]]));
    }
    if (req.method === "GET" && path === "/api/models") {
      const q = url.searchParams.get("search") ?? "";
      const full = url.searchParams.get("full") === "true";
      const hits = Object.entries(repos)
        .filter(([id]) => id.includes(q))
        .map(([id, files]) => ({
          id,
          downloads: 7,
          likes: 3,
          lastModified: "2025-01-01T00:00:00.000Z",
          ...(full ? { siblings: Object.keys(files).map((rfilename) => ({ rfilename })) } : {}),
        }));
      return json(res, 200, hits);
    }
    if ((req.method === "GET" || req.method === "HEAD") &&
        (m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path))) {
      if (!repos[m[1]]?.[m[3]]) return notFound(res);
      if (m[2] !== commit && m[2] !== "main") return json(res, 404, { error: "Invalid rev id" });
      res.writeHead(302, {
        Location: `/cdn/${m[1]}/${m[3]}`,
        "X-Repo-Commit": commit,
        "X-Linked-Size": repos[m[1]][m[3]].length,
        "X-Linked-Etag": `"${sha256(repos[m[1]][m[3]])}"`,
      });
      return res.end();
    }
    if ((req.method === "GET" || req.method === "HEAD") &&
        (m = /^\/cdn\/([^/]+\/[^/]+)\/(.+)$/.exec(path))) {
      const bytes = repos[m[1]]?.[m[2]];
      if (!bytes) return notFound(res);
      return sendFile(req, res, bytes);
    }
    notFound(res);
  });

  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      resolve({
        endpoint: `http://127.0.0.1:${port}/`,
        requests,
        close: () => {
          server.closeAllConnections();
          return new Promise((done) => server.close(done));
        },
      });
    });
  });
}
